"""Garbage collection of links (seed 001): edges that point at nothing, say the same thing twice, or join two
rows on their way out. Every finding is one `delete_link`, review class `auto` (the apply keeps the link's
pre-image in the audit log). Memories are never touched here: purging rows is retention's job.

Rules, the first that matches names the finding:
1. `self_link`: a link from a row to itself.
2. `orphan`: the source or the destination is neither in the snapshot nor in its quarantine (a quarantined row
   still exists; it only failed validation). Only links created before the as-of instant are judged: a newer
   one may point at a row written after the snapshot read the memories.
3. `cross_namespace`: the endpoints live in different namespaces, or not in the link's (nothing ever crosses a
   namespace; such a link would leak one namespace's memory into another's graph).
4. `purged_pair`: both endpoints are in the purge queue (nothing will traverse it; the rows are going).
5. `duplicate`: the store's key is (src_id, dst_id, kind), so a duplicate is the same relation stated both
   ways for a *symmetric* kind (`SYMMETRIC_KINDS`: `associated`, `contradicts`). The older link (created_at,
   then src_id < dst_id) is kept, the other deleted. Directed kinds (`temporal` forward and backward,
   `duplicate-of`, `summarized-into`, `derived-from`) both ways are two different facts and are kept.
   Whoever writes `contradicts` must therefore write it one way only.

Idempotent: a deleted link is not in the next snapshot, and the survivor of a duplicate is no longer one.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA, intents_table
from engram_pipelines.core.duck import duck
from engram_pipelines.core.timestamps import format_timestamp

SOURCE = "gc"
SYMMETRIC_KINDS = ("associated", "contradicts")

GC_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("src_id", pa.string(), nullable=False),
        pa.field("dst_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("rule", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
    ]
)

_REASONS = {
    "self_link": "links a memory to itself",
    "orphan": "an endpoint no longer exists",
    "cross_namespace": "its endpoints are not both in the link's namespace",
    "purged_pair": "both endpoints are in the purge queue",
    "duplicate": "the same symmetric relation exists the other way round",
}


LINK_COLUMNS = ["namespace", "src_id", "dst_id", "kind", "created_at"]


def garbage_links(
    memories: pa.Table,
    links: pa.Table,
    at: dt.datetime,
    *,
    quarantined: pa.Table | None = None,
    judged: pa.Table | None = None,
) -> AnalysisResult:
    """Links to delete; its table has GC_SCHEMA, its intents are auto. `quarantined`: any table with an `id` column.
    `judged`: the links to judge (rows of `links`; all of them when None); each is judged against all `links`
    (its twin may be any of them)."""
    with duck() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("m", memories.select(["id", "namespace", "zone"]))
        con.register("l", links.select(LINK_COLUMNS))
        con.register("c", (links if judged is None else judged).select(LINK_COLUMNS))
        known = (
            quarantined.select(["id"])
            if quarantined is not None
            else pa.table({"id": pa.array([], pa.string())})
        )
        con.register("q", known)
        kinds = ", ".join(f"'{k}'" for k in SYMMETRIC_KINDS)
        found = con.sql(
            f"""
            WITH judged AS (
                SELECT l.*, a.namespace AS src_namespace, b.namespace AS dst_namespace,
                    a.zone AS src_zone, b.zone AS dst_zone,
                    (a.id IS NULL AND l.src_id NOT IN (SELECT id FROM q))
                        OR (b.id IS NULL AND l.dst_id NOT IN (SELECT id FROM q)) AS missing
                FROM c l LEFT JOIN m a ON a.id = l.src_id LEFT JOIN m b ON b.id = l.dst_id
            ),
            -- Of a symmetric relation stated both ways, the one that is not kept.
            duplicate AS (
                SELECT x.src_id, x.dst_id, x.kind FROM c x JOIN l y
                  ON y.src_id = x.dst_id AND y.dst_id = x.src_id AND y.kind = x.kind
                WHERE x.kind IN ({kinds}) AND x.src_id <> x.dst_id
                  AND (y.created_at < x.created_at OR (y.created_at = x.created_at AND y.src_id < x.src_id))
            )
            SELECT j.namespace, j.src_id, j.dst_id, j.kind,
                CASE
                    WHEN j.src_id = j.dst_id THEN 'self_link'
                    WHEN j.missing AND j.created_at < TIMESTAMPTZ '{format_timestamp(at)}' THEN 'orphan'
                    WHEN coalesce(j.src_namespace <> j.namespace OR j.dst_namespace <> j.namespace, false)
                        THEN 'cross_namespace'
                    WHEN j.src_zone = 'purge_queue' AND j.dst_zone = 'purge_queue' THEN 'purged_pair'
                    WHEN d.kind IS NOT NULL THEN 'duplicate'
                END AS rule
            FROM judged j LEFT JOIN duplicate d USING (src_id, dst_id, kind)
            WHERE rule IS NOT NULL
            ORDER BY j.namespace, j.src_id, j.dst_id, j.kind
            """
        ).to_arrow_table()
        rules = found["rule"].to_pylist()
        result = found.append_column("reason", pa.array([_REASONS[r] for r in rules], pa.string())).cast(
            GC_SCHEMA
        )
        return AnalysisResult(table=result, intents=_intents(result))


def _intents(result: pa.Table) -> pa.Table:
    if result.num_rows == 0:
        return INTENT_SCHEMA.empty_table()
    return intents_table(
        [
            {
                "namespace": row["namespace"],
                "target_kind": "link",
                "target_id": f"{row['src_id']}|{row['dst_id']}|{row['kind']}",
                "op": "delete_link",
                "params": {"src_id": row["src_id"], "dst_id": row["dst_id"], "kind": row["kind"]},
                "reason": f"{row['kind']} link {row['reason']}",
                "evidence": {"rule": f"gc_{row['rule']}"},
                "source": SOURCE,
                "review_class": "auto",
            }
            for row in result.to_pylist()
        ]
    )
