"""Held changes that already wait for review are not proposed again.

What the volume guard holds waits for a person, who may take days. Proposed again each night, the same hold
became a new set of the same changes every night: one reviewer saw a week of overlapping sets (only the newest
applies cleanly: the others' guards fail on the rows it moved), and a 1M store whose first night held 593k
archive moves composed and stored all of them again every quiet night (measured on one: the change set step
12.9 s of a 42.0 s quiet night and a 60 MB held set each night; waiting, 3.8 s of 31.4 s and 2 MB).

So a held change of an earlier night's set that is still `proposed` keeps waiting there, and tonight proposes
it again only if it would not apply as it stands: the target's row moved (version, access, pin or content
differ from the change's guards), tonight holds other ops on it, the change belongs to a cluster (a merge is
proposed whole), the set was made under other settings (config fingerprint) or by another job, or it is
`review.held_renewal_days` old or more (its reasons, ages and instants are then proposed afresh; 0 turns
waiting off). Nothing is dropped from the night: the namespace is still held (the guard counts what waits),
and approving the waiting set applies what it holds.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.changes.registry import ChangeSetNotFound, find_change_set, read_changes
from engram_pipelines.config.model import Config
from engram_pipelines.core.digests import content_sha_sql
from engram_pipelines.core.duck import duck
from engram_pipelines.store import ChangeSetRecord, Store

# What a waiting change is matched on: its target, its ops and the guards it would be applied with.
_WAITING_COLUMNS = [
    "target_kind",
    "target_id",
    "ops",
    "cluster_id",
    "expected_version",
    "guard_access_count",
    "guard_last_accessed_at",
    "guard_pinned",
    "guard_content_sha",
]


def waiting_sets(
    store: Store, warehouse_root: str | Path | None, as_of: dt.date, *, job: str, config: Config
) -> list[ChangeSetRecord]:
    """The held sets whose changes may still wait tonight: proposed (not approved, applied or reverted),
    not empty, of an earlier night (a re-run of a night proposes what its first run did) younger than
    `review.held_renewal_days`, by the same job under the same settings, their file at hand and whole."""
    renewal = config.review.held_renewal_days
    if renewal <= 0:
        return []
    fingerprint = config.fingerprint()
    found = []
    for record in store.list_change_sets():
        if not (
            record.review_class == "held"
            and record.status == "proposed"
            and record.total
            and record.job == job
            and record.config_fingerprint == fingerprint
        ):
            continue
        age = (as_of - dt.date.fromisoformat(record.as_of)).days
        if not 0 < age < renewal:
            continue
        try:
            located = find_change_set(store, record.change_set_id, warehouse_root)
            if pq.read_metadata(located.path).num_rows != record.total:
                continue  # not the registered plan: `approve` refuses it, so nothing may wait on it
        except (ChangeSetNotFound, OSError, pa.ArrowException):
            continue
        found.append(located)
    return found


def without_waiting(
    intents: pa.Table, memories: pa.Table, sets: list[ChangeSetRecord]
) -> tuple[pa.Table, list[dict]]:
    """(`intents` less the held ones whose change waits in one of `sets`, how many targets wait: one entry
    per namespace and set, {namespace, change_set_id, changes}). `memories`: tonight's snapshot with the
    guards' columns and the content."""
    if not sets or not pc.any(pc.equal(intents["review_class"], "held")).as_py():
        return intents, []
    waiting = pa.concat_tables(
        read_changes(record, _WAITING_COLUMNS).append_column(
            "change_set_id", pa.array([record.change_set_id] * record.total, pa.string())
        )
        for record in sets
    )
    with duck() as con:
        con.register(
            "i", intents.select(["namespace", "review_class", "target_kind", "target_id", "op", "cluster_id"])
        )
        con.register("w", waiting)
        con.register(
            "m",
            memories.select(["id", "version", "access_count", "last_accessed_at", "pinned", "content"]),
        )
        # Tonight's held ops per memory target, outside any cluster; a target waits where a waiting change has
        # the same ops and its guards hold on tonight's row (the oldest set first: the one a reviewer meets).
        matched = con.sql(
            f"""
            WITH tonight AS (
                SELECT target_id, any_value(namespace) AS namespace, list_sort(list(op)) AS ops FROM i
                WHERE review_class = 'held' AND target_kind = 'memory'
                GROUP BY target_id HAVING bool_and(cluster_id IS NULL)
            )
            SELECT DISTINCT ON (w.target_id) w.target_id, t.namespace, w.change_set_id
            FROM w JOIN tonight t USING (target_id) JOIN m ON m.id = w.target_id
            WHERE w.target_kind = 'memory' AND w.cluster_id IS NULL AND list_sort(w.ops) = t.ops
                AND w.expected_version = m.version
                AND w.guard_access_count IS NOT DISTINCT FROM m.access_count
                AND w.guard_last_accessed_at IS NOT DISTINCT FROM m.last_accessed_at
                AND w.guard_pinned IS NOT DISTINCT FROM m.pinned
                AND w.guard_content_sha = {content_sha_sql("m.content")}
            ORDER BY w.target_id, w.change_set_id
            """
        ).to_arrow_table()
        if not matched.num_rows:
            return intents, []
        con.register("matched", matched)
        counts = con.sql(
            "SELECT namespace, change_set_id, count(*) AS changes FROM matched "
            "GROUP BY ALL ORDER BY namespace, change_set_id"
        ).to_arrow_table()
    waits = pc.and_(
        pc.and_(pc.equal(intents["review_class"], "held"), pc.equal(intents["target_kind"], "memory")),
        pc.is_in(intents["target_id"], matched["target_id"]),
    )
    return intents.filter(pc.invert(waits)), counts.to_pylist()
