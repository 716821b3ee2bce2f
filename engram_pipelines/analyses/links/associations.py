"""Associations (seed 001): semantically close memories that nothing links yet get an `associated` link.

Candidates: pairs of one namespace in [`similarity.association_threshold`, `similarity.merge_threshold`)
(default [0.70, 0.85): related, but below the band where consolidation merges them), both rows active and not
superseded, and no link of any kind between them in either direction.

Top-k per memory (`similarity.association_top_k`), as a k-nearest-neighbour graph made symmetric by union: a
candidate is kept when it is among the k best of *either* of its rows, so every memory gets links to its k
nearest unlinked neighbours (a pair kept only when both agree would leave hubs' neighbours unlinked). A
memory's existing `associated` links take part in its ranking (by the pair's score, else the link's weight)
and so use up its k: the next run ranks the same set the same way and adds nothing, while a new close memory
that outranks them still gets its link. Ties break on the other row's id.

Each kept pair is one `upsert_link` left -> right (left_id < right_id), weight = the cosine, origin
`associations`, review class `auto`.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA, intents_table
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.timestamps import format_timestamp

SOURCE = "associations"

ASSOCIATION_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("src_id", pa.string(), nullable=False),
        pa.field("dst_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("src_rank", pa.int64(), nullable=False),  # the pair's rank among src's neighbours
        pa.field("dst_rank", pa.int64(), nullable=False),
    ]
)


def associations(
    memories: pa.Table, links: pa.Table, pairs: pa.Table, config: Config, at: dt.datetime
) -> AnalysisResult:
    """New `associated` links; its table has ASSOCIATION_SCHEMA, its intents are auto."""
    similarity = config.similarity
    kept = _kept_pairs(
        memories,
        links,
        pairs,
        low=similarity.association_threshold,
        high=similarity.merge_threshold,
        top_k=similarity.association_top_k,
    )
    return AnalysisResult(table=kept, intents=_intents(kept, at))


def _kept_pairs(
    memories: pa.Table, links: pa.Table, pairs: pa.Table, *, low: float, high: float, top_k: int
) -> pa.Table:
    with duck() as con:
        con.register("m", memories.select(["id", "namespace", "kind", "zone", "superseded_by"]))
        con.register("l", links.select(["namespace", "src_id", "dst_id", "kind", "weight"]))
        con.register("p", pairs.select(["namespace", "left_id", "right_id", "score"]))
        return (
            con.sql(
                f"""
            -- Rows are matched on id + namespace as one key: with two equalities the optimizer would infer
            -- x.namespace = y.namespace and join the two scans of `live` on namespace first (quadratic).
            -- Semantic nodes and summaries are linked to their sources already (derived-from, summarized-into):
            -- associating them again would only echo their sources.
            WITH live AS (SELECT id || chr(31) || namespace AS key FROM m
                          WHERE zone = 'active' AND superseded_by IS NULL AND kind NOT IN ('semantic', 'summary')),
            band AS (
                SELECT p.namespace, least(p.left_id, p.right_id) AS a, greatest(p.left_id, p.right_id) AS b,
                    max(p.score) AS score
                FROM p SEMI JOIN live x ON x.key = p.left_id || chr(31) || p.namespace
                       SEMI JOIN live y ON y.key = p.right_id || chr(31) || p.namespace
                WHERE p.score >= {float(low)!r} AND p.score < {float(high)!r} AND p.left_id <> p.right_id
                GROUP BY ALL
            ),
            -- Only a link between two band rows can match a band pair: the links from one are enough to look at
            -- (all 2.86M links' distinct ends were 0.4 of the step's 0.83 s on a 1M night, 2026-12-07).
            linked AS (SELECT DISTINCT least(src_id, dst_id) AS a, greatest(src_id, dst_id) AS b FROM l
                       SEMI JOIN (SELECT a AS id FROM band UNION SELECT b FROM band) e ON e.id = l.src_id),
            associated AS (
                SELECT namespace, least(src_id, dst_id) AS a, greatest(src_id, dst_id) AS b, max(weight) AS weight
                FROM l WHERE kind = 'associated' AND src_id <> dst_id GROUP BY ALL
            ),
            -- What each memory ranks: its unlinked band pairs (new) and its existing associations.
            items AS (
                SELECT namespace, a, b, score, true AS new FROM band
                WHERE NOT EXISTS (SELECT 1 FROM linked k WHERE k.a = band.a AND k.b = band.b)
                UNION ALL
                SELECT s.namespace, s.a, s.b, coalesce(band.score, s.weight), false
                FROM associated s LEFT JOIN band ON band.a = s.a AND band.b = s.b AND band.namespace = s.namespace
            ),
            sides AS (
                SELECT namespace, a AS memory, b AS other, a, b, score, new FROM items
                UNION ALL SELECT namespace, b, a, a, b, score, new FROM items
            ),
            ranked AS (
                SELECT *, row_number() OVER (PARTITION BY namespace, memory ORDER BY score DESC, other) AS rank
                FROM sides
            )
            SELECT namespace, a AS src_id, b AS dst_id, any_value(score) AS score,
                min(rank) FILTER (WHERE memory = a) AS src_rank, min(rank) FILTER (WHERE memory = b) AS dst_rank
            FROM ranked WHERE new
            GROUP BY namespace, a, b
            HAVING min(rank) <= {int(top_k)}
            ORDER BY namespace, src_id, dst_id
            """
            )
            .to_arrow_table()
            .cast(ASSOCIATION_SCHEMA)
        )


def _intents(kept: pa.Table, at: dt.datetime) -> pa.Table:
    if kept.num_rows == 0:
        return INTENT_SCHEMA.empty_table()
    when = format_timestamp(at)
    rows = []
    for pair in kept.to_pylist():
        weight = round(pair["score"], 6)
        rows.append(
            {
                "namespace": pair["namespace"],
                "target_kind": "link",
                "target_id": f"{pair['src_id']}|{pair['dst_id']}|associated",
                "op": "upsert_link",
                "params": {
                    "src_id": pair["src_id"],
                    "dst_id": pair["dst_id"],
                    "kind": "associated",
                    "weight": weight,
                    "origin": SOURCE,
                },
                "reason": f"related (cosine {weight:.3f}) and not linked yet",
                "evidence": {
                    "rule": "association",
                    "score": weight,
                    "src_rank": pair["src_rank"],
                    "dst_rank": pair["dst_rank"],
                    "at": when,
                },
                "source": SOURCE,
                "review_class": "auto",
            }
        )
    return intents_table(rows)
