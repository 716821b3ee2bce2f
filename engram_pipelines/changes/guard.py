"""The volume guard: a night that would hide much of a namespace waits for review instead of being applied.

Tried on real histories, a first night archived most of them automatically (63% of a hand-made two-user corpus,
2,886 of 3,037 dialogue turns): each rule was right by its own terms, but nobody had looked. So, before the
change sets are composed, the `auto` intents that would hide a visible memory (archive, queue for purge,
supersede) are counted per namespace; where they would hide more than `review.max_hidden_fraction` of the
namespace's visible memories, they move to a `held` change set of their own (approved apart from the night's
merges), the reason saying why ("night would hide 94% of conv-26 (2,886 of 3,037 visible memories): held for
review"), and with them the other auto intents of their clusters (a merge's link and annotation wait with the
merge). Likewise every `auto` intent moves when the night's auto intents exceed `review.max_auto_changes` (0:
no ceiling). Nothing is dropped: approving the held set applies exactly what the night proposed.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.config.model import ReviewConfig
from engram_pipelines.core.duck import duck

HIDING = """(i.op IN ('supersede', 'purge')
    OR (i.op = 'move_zone' AND json_extract_string(i.params, '$.to') IN ('archived', 'purge_queue')))"""

# What the guard reads of the intents.
GUARD_COLUMNS = ["namespace", "review_class", "target_kind", "target_id", "op", "params"]

# The intents (table `i`) held in a namespace the guard holds (table `held`): the auto ones that hide a visible row.
_HELD_IN_NAMESPACE = (
    f"review_class = 'auto' AND {HIDING} AND i.namespace IN (SELECT namespace FROM held) "
    "AND i.target_id IN (SELECT id FROM m WHERE zone = 'active' AND superseded_by IS NULL)"
)


def hold_for_review(
    intents: pa.Table, memories: pa.Table, review: ReviewConfig
) -> tuple[pa.Table, list[dict]]:
    """(`intents` with the held ones in the `held` class, what was held: one entry per namespace, or one for
    the whole night when the ceiling was passed, each with a `message`)."""
    with duck() as con:
        # A row number, not a copy (the columns are shared): the held rows are found by it.
        con.register(
            "i", intents.append_column("_row", pa.array(np.arange(intents.num_rows, dtype=np.int64)))
        )
        con.register("m", memories.select(["id", "namespace", "zone", "superseded_by"]))
        auto = _past_ceiling(con, review)
        if auto is not None:
            ceiling = review.max_auto_changes
            message = f"night would make {auto:,} changes (more than review.max_auto_changes, {ceiling:,}): held for review"
            held = [{"namespace": "*", "changes": auto, "ceiling": ceiling, "message": message}]
            return _held(con, intents, "review_class = 'auto'", message), held
        rows = _over_fraction(con, review)
        if not rows:
            return intents, []
        held = [
            {
                "namespace": namespace,
                "hidden": int(hidden),
                "visible": int(visible),
                "fraction": round(float(fraction), 4),
                "message": (
                    f"night would hide {fraction:.0%} of {namespace} ({hidden:,} of {visible:,} visible memories): "
                    "held for review"
                ),
            }
            for namespace, hidden, visible, fraction in rows
        ]
        con.register("held", pa.Table.from_pylist(held).select(["namespace", "message"]))
        return _held(con, intents, _HELD_IN_NAMESPACE, None), held


def held_targets(intents: pa.Table, memories: pa.Table, review: ReviewConfig) -> pa.Array | None:
    """The targets of the hiding intents `hold_for_review` holds in their namespace, judged on `intents` alone;
    None when their number passes `review.max_auto_changes` (every auto intent is held). `intents`: at least
    GUARD_COLUMNS."""
    with duck() as con:
        con.register("i", intents)
        con.register("m", memories.select(["id", "namespace", "zone", "superseded_by"]))
        if _past_ceiling(con, review) is not None:
            return None
        namespaces = [row[0] for row in _over_fraction(con, review)]
        con.register("held", pa.table({"namespace": pa.array(namespaces, pa.string())}))
        targets = con.sql(f"SELECT DISTINCT i.target_id FROM i WHERE {_HELD_IN_NAMESPACE}").to_arrow_table()
        return targets["target_id"].combine_chunks()


def _past_ceiling(con: duckdb.DuckDBPyConnection, review: ReviewConfig) -> int | None:
    """How many auto intents (table `i`) the night has, when they pass `review.max_auto_changes`."""
    if not review.max_auto_changes:
        return None
    auto = con.sql("SELECT count(*) FROM i WHERE review_class = 'auto'").fetchall()[0][0]
    return int(auto) if auto > review.max_auto_changes else None


def _over_fraction(con: duckdb.DuckDBPyConnection, review: ReviewConfig) -> list[tuple]:
    """(namespace, hidden, visible, fraction) where the auto intents (table `i`) would hide more than
    `review.max_hidden_fraction` of the visible rows (table `m`)."""
    return con.sql(
        f"""
        WITH visible AS (
            SELECT namespace, count(*) AS visible FROM m
            WHERE zone = 'active' AND superseded_by IS NULL GROUP BY namespace
        ),
        hidden AS (
            SELECT i.namespace, count(DISTINCT i.target_id) AS hidden
            FROM i JOIN m ON m.id = i.target_id
            WHERE i.review_class = 'auto' AND i.target_kind = 'memory' AND {HIDING}
                AND m.zone = 'active' AND m.superseded_by IS NULL
            GROUP BY i.namespace
        )
        SELECT namespace, hidden, visible, hidden / visible AS fraction
        FROM hidden JOIN visible USING (namespace)
        WHERE hidden / visible > {float(review.max_hidden_fraction)!r}
        ORDER BY namespace
        """
    ).fetchall()


def _held(con: duckdb.DuckDBPyConnection, intents: pa.Table, where: str, message: str | None) -> pa.Table:
    """`intents` (table `i`) with the rows matching `where` moved to the `held` class, their reason extended.
    The other auto intents of a held intent's cluster go with it (a merge's `duplicate-of` link and the
    canonical's annotation): left behind, they landed while the merge waited, and every later run proposed them
    again. Only the two columns are made anew, the others are shared (a first night at 1M: 1.6 GB of intents,
    copied whole through DuckDB before)."""
    where = (
        f"(({where}) OR (i.review_class = 'auto' AND i.cluster_id IN "
        f"(SELECT i.cluster_id FROM i WHERE {where} AND i.cluster_id IS NOT NULL)))"
    )
    note = (
        f"'{message.replace(chr(39), chr(39) * 2)}'"
        if message is not None
        else "(SELECT h.message FROM held h WHERE h.namespace = i.namespace)"
    )
    held = con.sql(
        f"SELECT i._row, i.reason || ' [' || {note} || ']' AS reason FROM i WHERE {where} ORDER BY i._row"
    ).to_arrow_table()
    # Each intent's held reason, NULL where it stays: `take` of the held rows at their positions.
    position = np.full(intents.num_rows, -1, dtype=np.int64)
    position[held["_row"].to_numpy()] = np.arange(held.num_rows)
    held_reason = held["reason"].take(pa.array(position, mask=position < 0))
    review_class = pc.if_else(pc.is_valid(held_reason), pa.scalar("held"), intents["review_class"])
    reason = pc.coalesce(held_reason, intents["reason"])
    out = intents.set_column(intents.schema.get_field_index("review_class"), "review_class", review_class)
    return out.set_column(out.schema.get_field_index("reason"), "reason", reason).cast(intents.schema)
