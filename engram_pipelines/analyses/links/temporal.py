"""Temporal edges (seed 003): one maintenance cycle of the `temporal` links, and the edges history lacks.

**Cycle** (per link of kind `temporal` whose endpoints both exist in the link's namespace, are two rows and
are not both in the purge queue: gc deletes the others, and an upsert here would overrule its delete). Each
nightly cycle multiplies a weight by `temporal.decay_rate`; that is applied lazily, so a weight drifting by 5% a
night is not a write (DESIGN §5: write volume follows real changes, not corpus size). A link's stored `weight`
is its weight as of its `updated_at` (the apply stamps the change set's as-of instant), and its weight now is

    weight x decay_rate ^ cycles,   cycles = ceil((as-of instant - updated_at) / 1 day)

A link is written only when something happens to it: traversed since it was last written
(`traversed_at > updated_at`): the decayed weight x `temporal.traversal_boost`, never lifted above
`WEIGHT_CEILING` (or above the stored weight, when that was higher), and the boost is written; decayed below
`temporal.prune_threshold`: deleted. A rerun of a partition finds no cycle due (`updated_at` is the as-of
instant), and a quiet night writes nothing but prunes.

Backfills: on a store whose links were all written today, historical partitions find no link due; decay is
not compounded retroactively for days that were not run.

**Missing forward edges** (historical corpora never went through encoding, which links each new memory to its
previous `temporal.neighbor_k` memories): memories of one conversation (`metadata.conversation_id`, within the
namespace; episodic, active, not superseded), ordered by `created_at` then id. Each memory is linked with each
of its previous k: forward (earlier -> later) weight `forward_weight / distance`, backward (later -> earlier)
`backward_weight / distance`, so forward beats backward at every distance (asymmetric contiguity) and nearer
neighbours beat farther ones. Only missing edges are created (an existing temporal link either way is kept as
it is), and the later memory is marked `metadata.temporalEdges` = {builtAt, neighbors}: a marked memory is
never wired again, so an edge that decays and is pruned does not come back the next night. A memory whose
edges all exist is not written, unless one of them is pruned tonight (action `mark`: marked, nothing built).
Edges weaker than the prune threshold are not created.

Everything is review class `auto`; links are upserted or deleted, memories only get the marker.
"""

from __future__ import annotations

import datetime as dt
import json

import duckdb
import pyarrow as pa

from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.config.model import Config, TemporalConfig
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.core.timestamps import format_timestamp

SOURCE = "temporal"
WEIGHT_CEILING = 1.0
MARKER = "temporalEdges"

TEMPORAL_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("src_id", pa.string(), nullable=False),
        pa.field("dst_id", pa.string(), nullable=False),
        pa.field("action", pa.string(), nullable=False),  # boost | prune | build | mark
        pa.field("weight_before", pa.float64()),
        pa.field("weight_after", pa.float64()),
        pa.field("direction", pa.string()),  # forward | backward, for built edges
        pa.field("distance", pa.int64()),  # positions apart in the conversation, for built edges
        pa.field("conversation_id", pa.string()),
    ]
)


def temporal_edges(memories: pa.Table, links: pa.Table, config: Config, at: dt.datetime) -> AnalysisResult:
    """One cycle of temporal-link maintenance plus the missing conversation edges (TEMPORAL_SCHEMA)."""
    cfg = config.temporal
    with duck() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register(
            "m",
            memories.select(["id", "namespace", "kind", "zone", "superseded_by", "created_at", "metadata"]),
        )
        con.register("l", links)
        cycle = con.sql(_cycle_sql(cfg, at)).to_arrow_table().cast(TEMPORAL_SCHEMA)
        con.register("cycle", cycle)
        built = con.sql(_build_sql(cfg)).to_arrow_table().cast(TEMPORAL_SCHEMA)
        result = pa.concat_tables([cycle, built]).sort_by(
            [("namespace", "ascending"), ("src_id", "ascending"), ("dst_id", "ascending")]
        )
        return AnalysisResult(table=result, intents=_intents(con, result, cfg, at))


def _literal(at: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{format_timestamp(at)}'"


def _cycle_sql(cfg: TemporalConfig, at: dt.datetime) -> str:
    return f"""
    -- The weights first, from the links alone: a quiet night has few links due, and the endpoint joins below
    -- only filter (matching every link's endpoints first was 3.0 s of a 1M night with 2.9M links, none due).
    WITH aged AS (
        SELECT namespace, src_id, dst_id, weight,
            coalesce(traversed_at > updated_at, false) AS traversed,
            weight * pow({cfg.decay_rate!r}::DOUBLE, ceil((epoch_us({_literal(at)}) - epoch_us(updated_at)) / 86400e6))
                AS decayed
        FROM l
        WHERE kind = 'temporal' AND updated_at < {_literal(at)} AND src_id <> dst_id
    ),
    due AS (
        SELECT * FROM (
            SELECT *, round(CASE WHEN traversed
                                 THEN least(decayed * {cfg.traversal_boost!r}, greatest(weight, {WEIGHT_CEILING!r}))
                                 ELSE decayed END, 6) AS new_weight
            FROM aged
        )
        WHERE new_weight < {cfg.prune_threshold!r} OR (traversed AND new_weight <> weight)
    ),
    -- Endpoints are matched on id + namespace as one key: with two equalities per join the optimizer would
    -- infer a.namespace = b.namespace and join the two scans of `m` on namespace first (quadratic).
    keyed AS (SELECT id || chr(31) || namespace AS key, zone FROM m)
    SELECT d.namespace, d.src_id, d.dst_id,
        CASE WHEN d.new_weight < {cfg.prune_threshold!r} THEN 'prune' ELSE 'boost' END AS action,
        d.weight AS weight_before,
        CASE WHEN d.new_weight < {cfg.prune_threshold!r} THEN NULL ELSE d.new_weight END AS weight_after,
        NULL AS direction, NULL AS distance, NULL AS conversation_id
    FROM due d JOIN keyed a ON a.key = d.src_id || chr(31) || d.namespace
               JOIN keyed b ON b.key = d.dst_id || chr(31) || d.namespace
    WHERE NOT (a.zone = 'purge_queue' AND b.zone = 'purge_queue')
    """


def _build_sql(cfg: TemporalConfig) -> str:
    return f"""
    WITH conversation AS (
        SELECT id, namespace, created_at, json_extract_string(metadata, '$.conversation_id') AS conversation_id,
            json_extract(metadata, '$.{MARKER}') IS NOT NULL AS wired
        FROM m
        WHERE kind = 'episodic' AND zone = 'active' AND superseded_by IS NULL
          AND json_extract_string(metadata, '$.conversation_id') IS NOT NULL
    ),
    ordered AS (
        SELECT *, row_number() OVER (PARTITION BY namespace, conversation_id ORDER BY created_at, id) AS position
        FROM conversation
    ),
    neighbours AS (
        SELECT later.namespace, later.conversation_id, earlier.id AS earlier_id, later.id AS later_id,
            later.position - earlier.position AS distance
        FROM ordered later JOIN ordered earlier
          ON earlier.namespace = later.namespace AND earlier.conversation_id = later.conversation_id
         AND earlier.position < later.position AND earlier.position >= later.position - {int(cfg.neighbor_k)}
        WHERE NOT later.wired
    ),
    edges AS (
        SELECT namespace, conversation_id, earlier_id AS src_id, later_id AS dst_id, 'forward' AS direction,
            distance, {cfg.forward_weight!r} / distance AS weight
        FROM neighbours
        UNION ALL
        SELECT namespace, conversation_id, later_id, earlier_id, 'backward', distance,
            {cfg.backward_weight!r} / distance
        FROM neighbours
    )
    SELECT e.namespace, e.src_id, e.dst_id, 'build' AS action, NULL AS weight_before,
        round(e.weight, 6) AS weight_after, e.direction, e.distance, e.conversation_id
    FROM edges e
    WHERE round(e.weight, 6) >= {cfg.prune_threshold!r}
      AND NOT EXISTS (SELECT 1 FROM l WHERE l.kind = 'temporal' AND l.src_id = e.src_id AND l.dst_id = e.dst_id)
    UNION ALL
    -- An unwired memory whose edge to a neighbour decays away tonight was wired by history: marked, so the
    -- next night does not build the pruned edge again (on the 30k demo, 31 edges came back the same day).
    -- The pruned edges in both directions, joined on equalities (an OR of two directions in one condition was
    -- a nested-loop join: 20 s of a 1M first night, 1.3M neighbours against the 8k edges of the cycle).
    SELECT n.namespace, n.earlier_id, n.later_id, 'mark', NULL, NULL, 'forward', n.distance, n.conversation_id
    FROM neighbours n SEMI JOIN (
        SELECT src_id AS a, dst_id AS b FROM cycle WHERE action = 'prune'
        UNION SELECT dst_id, src_id FROM cycle WHERE action = 'prune'
    ) p ON p.a = n.earlier_id AND p.b = n.later_id
    """


def _intents(
    con: duckdb.DuckDBPyConnection, result: pa.Table, cfg: TemporalConfig, at: dt.datetime
) -> pa.Table:
    """The edges as link intents, and the marker on each newly wired memory; built in SQL (hundreds of
    thousands of edges on a first night). JSON keys are written sorted, as every intent's are."""
    con.register("result", result)
    marker = _compact({"values": {MARKER: {"builtAt": format_timestamp(at), "neighbors": cfg.neighbor_k}}})
    boost_reason = f"traversed since it was last written: decayed, then x {cfg.traversal_boost}"
    return (
        con.sql(
            f"""
        WITH origins AS (SELECT src_id, dst_id, origin FROM l WHERE kind = 'temporal'),
        edges AS (
            SELECT r.*, CASE WHEN r.action = 'boost' THEN coalesce(o.origin, '{SOURCE}') ELSE '{SOURCE}' END AS origin
            FROM result r LEFT JOIN origins o USING (src_id, dst_id)
            WHERE r.action <> 'mark'
        )
        SELECT namespace, 'link' AS target_kind, src_id || '|' || dst_id || '|temporal' AS target_id,
            CASE WHEN action = 'prune' THEN 'delete_link' ELSE 'upsert_link' END AS op,
            CASE WHEN action = 'prune' THEN json_object('dst_id', dst_id, 'kind', 'temporal', 'src_id', src_id)
                 ELSE json_object('dst_id', dst_id, 'kind', 'temporal', 'origin', origin, 'src_id', src_id,
                                  'weight', weight_after) END::VARCHAR AS params,
            CASE action
                WHEN 'prune' THEN 'weight ' || printf('%.4f', weight_before) || {quoted(f" decayed (x {cfg.decay_rate} a night) below {cfg.prune_threshold}")}
                WHEN 'build' THEN direction || ' neighbour at distance ' || distance || ' in conversation ' || conversation_id
                ELSE {quoted(boost_reason)} END AS reason,
            CASE WHEN action = 'build'
                 THEN json_object('direction', direction, 'distance', distance, 'rule', 'temporal_build',
                                  'weight_after', weight_after, 'weight_before', weight_before)
                 ELSE json_object('rule', 'temporal_' || action, 'weight_after', weight_after,
                                  'weight_before', weight_before) END::VARCHAR AS evidence,
            '{SOURCE}' AS source, 'auto' AS review_class, NULL AS cluster_id
        FROM edges
        UNION ALL
        SELECT DISTINCT namespace, 'memory', CASE WHEN direction = 'forward' THEN dst_id ELSE src_id END,
            'set_metadata', {quoted(marker)},
            {quoted(f"temporal edges to its previous {cfg.neighbor_k} memories built")},
            {quoted(_compact({"neighbors": cfg.neighbor_k, "rule": "temporal_build"}))},
            '{SOURCE}', 'auto', NULL
        FROM result WHERE action IN ('build', 'mark')
        -- One order, so the same input gives the same table (DuckDB's parallel DISTINCT has none).
        ORDER BY target_kind, target_id, op
        """
        )
        .to_arrow_table()
        .cast(INTENT_SCHEMA)
    )


def _compact(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
