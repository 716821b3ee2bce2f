"""Semantic extraction reused across nights, per namespace: a namespace whose inputs are what they were at the
last computation, which proposed nothing there, and where no node's anti-anchoring falls due tonight, keeps that
computation's rows (its rejected clusters); only the other namespaces are computed again (nothing in the
analysis crosses a namespace). At 1M memories the step took 23 s of a quiet night, most of it over namespaces
where nothing had moved.

Why a namespace that proposed something is always computed again: its intents carry the night's time (a node's
`reinforcedAt`, a compression mark's `at`), and they are proposed until they land, which changes the inputs.
Time enters the result otherwise only through anti-anchoring (a node idle for `stale_threshold_days` loses
confidence), checked per node for tonight.

A namespace's fingerprint hashes what the analysis reads: of its memories the id, kind, content, importance,
tags, superseded_by, the metadata's conversation and project ids, node state, compression and contradiction
markers, and of the zone only what decides (may it seed, is a node's source queued for purge, is it live where
compression marks are made: rows archived by age every night in every namespace changed nothing else and
made every namespace compute again); its `contradicts` links, its pairs at or above the cluster threshold, its
vectors (id, model, the values' stored digest: `warehouse/vector_digests.py`), the configuration's fingerprint and the analysis's own source files and word lists.
The result put together is the one a computation of every namespace gives (the tests hold the two equal).
"""

from __future__ import annotations

import datetime as dt
import json
from functools import cache
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.knowledge import chitchat, clusters, nodes, rows, semantic, texts
from engram_pipelines.analyses.knowledge.semantic import SEMANTIC_SCHEMA, semantic_extraction
from engram_pipelines.analyses.merges import containment
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.config.model import Config
from engram_pipelines.core.digests import files_digest
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.kept import read_kept, write_kept
from engram_pipelines.warehouse.vector_digests import VectorSource, vector_fingerprints

CACHE_VERSION = 1
KEPT = pa.schema(
    [
        pa.field("namespace", pa.string()),
        pa.field("fingerprint", pa.string()),
        pa.field("proposed", pa.bool_()),  # the computation proposed something there: never reused
    ]
)


@cache
def _code() -> str:
    """The analysis's source files (this one's too) and word lists: changed code never answers from old results."""
    modules = (semantic, clusters, nodes, rows, texts, chitchat, containment)
    return files_digest([__file__, *(str(m.__file__) for m in modules), str(containment.WORDS_PATH)])


def namespace_fingerprints(
    memories: pa.Table, links: pa.Table, pairs: pa.Table, digests: pa.Table, fading: pa.Array, config: Config
) -> pa.Table:
    """(namespace, fingerprint) of every namespace of `memories`."""
    salt = f"{CACHE_VERSION}|{_code()}|{config.fingerprint()}"
    keys = ("conversation_id", "project_id", "semantic", "semanticCompressed", "contradictionWith")
    # One parse of each row's metadata for every key (five json_extract calls took three times as long).
    paths = ", ".join(quoted("$." + json.dumps(k)) for k in keys)
    metadata = f"json_extract(metadata, [{paths}])::VARCHAR"
    with duck() as con:
        con.register(
            "m",
            memories.select(
                [
                    "id",
                    "namespace",
                    "kind",
                    "content",
                    "importance",
                    "zone",
                    "superseded_by",
                    "tags",
                    "metadata",
                ]
            ),
        )
        con.register("f", pa.table({"id": fading.cast(pa.string())}))
        con.register("l", links.select(["namespace", "src_id", "dst_id", "kind"]))
        threshold = float(config.semantic.cluster_similarity_threshold)
        con.register("p", pairs.select(["namespace", "left_id", "right_id", "score"]))
        con.register("v", vector_fingerprints(digests))
        return (
            con.sql(
                f"""
            WITH nodes AS (
                SELECT namespace, json_extract(metadata, '$.semantic') AS state,
                    zone = 'active' AND superseded_by IS NULL AS live
                FROM m WHERE kind = 'semantic' AND json_extract(metadata, '$.semantic') IS NOT NULL
            ), sources AS (
                SELECT DISTINCT unnest(from_json(json_extract(state, '$.sources'), '["VARCHAR"]')) AS id
                FROM nodes WHERE json_type(json_extract(state, '$.sources')) = 'ARRAY'
            ), marking AS (
                SELECT DISTINCT namespace FROM nodes
                WHERE live AND json_extract_string(state, '$.tier') IN ('assessed', 'baseline')
            ), rows AS (
                -- Of a row's zone, what the analysis reads: whether it may seed (active as the night started),
                -- whether a node's source is queued for purge, and whether it is live where compression
                -- marks are made (a namespace with an assessed or baseline node) or it is a node (maintained only
                -- while live): rows aging out of Active elsewhere change nothing the analysis decides.
                -- An order-free 64-bit digest per row, xor-ed (ids are unique: no two rows cancel); md5 of every
                -- row's text cost a third of the analysis itself at 100k memories.
                SELECT namespace, count(*)::VARCHAR || ':' || bit_xor(hash(id, kind, content, importance,
                    superseded_by, tags, {metadata},
                    zone = 'active' OR id IN (SELECT id FROM f),
                    zone = 'purge_queue' AND id IN (SELECT id FROM sources),
                    CASE WHEN (kind = 'semantic' AND json_extract(metadata, '$.semantic') IS NOT NULL)
                        OR namespace IN (SELECT namespace FROM marking)
                        THEN zone = 'active' AND superseded_by IS NULL END))::VARCHAR AS digest
                FROM m GROUP BY namespace
            ), contradicts AS (
                SELECT namespace, md5(string_agg(concat_ws(chr(31), src_id, dst_id), chr(30)
                    ORDER BY src_id, dst_id)) AS digest
                FROM l WHERE kind = 'contradicts' GROUP BY namespace
            ), close AS (
                SELECT namespace, md5(string_agg(concat_ws(chr(31), left_id, right_id, score::VARCHAR), chr(30)
                    ORDER BY left_id, right_id)) AS digest
                FROM p WHERE score >= {threshold!r} GROUP BY namespace
            )
            SELECT namespace, md5(concat_ws('|', {quoted(salt)}, rows.digest, coalesce(contradicts.digest, ''),
                coalesce(close.digest, ''), coalesce(v.fingerprint, ''))) AS fingerprint
            FROM rows LEFT JOIN contradicts USING (namespace) LEFT JOIN close USING (namespace)
                LEFT JOIN v USING (namespace)
            ORDER BY namespace
            """
            )
            .to_arrow_table()
            .cast(KEPT.remove(2))
        )


def anti_anchoring_due(memories: pa.Table, config: Config, at: dt.datetime) -> set[str]:
    """Namespaces with a live node idle for longer than `stale_threshold_days` at `at`, whose anti-anchoring
    may fall due tonight (`semantic._anti_anchoring_due`; one whose reinforcement time does not parse counts)."""
    with duck() as con:
        con.register("m", memories.select(["namespace", "kind", "zone", "superseded_by", "metadata"]))
        due = con.execute(
            """
            SELECT DISTINCT namespace FROM (
                SELECT namespace, json_extract_string(metadata, '$.semantic.reinforcedAt') AS reinforced
                FROM m WHERE kind = 'semantic' AND zone = 'active' AND superseded_by IS NULL
            )
            WHERE reinforced IS NOT NULL
                AND coalesce(TRY_CAST(reinforced AS TIMESTAMPTZ) < $at - to_microseconds($idle), true)
            """,
            {"at": at, "idle": round(config.semantic.stale_threshold_days * 86_400_000_000)},
        ).fetchall()
    return {namespace for (namespace,) in due}


def semantic_reusing(
    memories: pa.Table,
    links: pa.Table,
    pairs: pa.Table,
    vectors: VectorSource,
    config: Config,
    at: dt.datetime,
    *,
    fading: pa.Array,
    cache_root: Path,
) -> tuple[AnalysisResult, int]:
    """`semantic_extraction` of these inputs in `in_namespace_order`, the namespaces that can be reused taken
    from the last computation; and how many namespaces were computed (only their vectors are read)."""
    cache = cache_root / "semantic_cache"
    tonight = namespace_fingerprints(memories, links, pairs, vectors.digests, fading, config)
    kept = _read(cache)
    same = pa.array([], pa.string())
    if kept is not None:
        due = sorted(anti_anchoring_due(memories, config, at))
        with duck() as con:
            con.register("tonight", tonight)
            con.register("kept", kept[0])
            con.register("due", pa.table({"namespace": pa.array(due, pa.string())}))
            same = (
                con.sql(
                    "SELECT namespace FROM tonight JOIN kept USING (namespace, fingerprint) "
                    "WHERE NOT proposed AND namespace NOT IN (SELECT namespace FROM due)"
                )
                .to_arrow_table()["namespace"]
                .combine_chunks()
            )
    computed = tonight.num_rows - len(same)
    parts = []
    if kept is not None and len(same):
        reused = kept[1].filter(pc.is_in(kept[1]["namespace"], value_set=same))
        parts.append(AnalysisResult(table=reused, intents=INTENT_SCHEMA.empty_table()))
    if computed:

        def others(table: pa.Table) -> pa.Table:
            return (
                table.filter(pc.invert(pc.is_in(table["namespace"], value_set=same))) if len(same) else table
            )

        # Only the computed namespaces' vectors, read once (they are looked up by id for the rows given).
        chosen = pc.filter(tonight["namespace"], pc.invert(pc.is_in(tonight["namespace"], value_set=same)))
        parts.append(
            semantic_extraction(
                others(memories),
                others(links),
                others(pairs),
                vectors.load(chosen.to_pylist() if len(same) else None),
                config,
                at,
                fading=fading,
                cache_root=cache_root,
            )
        )
    result = in_namespace_order(parts)
    if computed:
        proposed = set(pc.unique(result.intents["namespace"]).to_pylist())
        marks = pa.array([n in proposed for n in tonight["namespace"].to_pylist()], pa.bool_())
        _write(cache, tonight.append_column("proposed", marks), result.table)
    return result, computed


def in_namespace_order(parts: list[AnalysisResult]) -> AnalysisResult:
    """One result of the namespaces' parts: the table and the intents grouped by namespace, each namespace's
    rows in the order its computation gave them (a stable sort), as for a computation of all of them."""

    def by_namespace(tables: list[pa.Table], schema: pa.Schema) -> pa.Table:
        whole = pa.concat_tables([t.cast(schema) for t in tables]) if tables else schema.empty_table()
        return whole.take(pc.sort_indices(whole["namespace"]))  # sort_indices is stable

    return AnalysisResult(
        table=by_namespace([p.table for p in parts], SEMANTIC_SCHEMA),
        intents=by_namespace([p.intents for p in parts], INTENT_SCHEMA),
    )


def _read(cache: Path) -> tuple[pa.Table, pa.Table] | None:
    tables = read_kept(cache, ("fingerprints", "table"), str(CACHE_VERSION))
    return None if tables is None else (tables[0].cast(KEPT), tables[1])


def _write(cache: Path, fingerprints: pa.Table, table: pa.Table) -> None:
    write_kept(cache, {"fingerprints": fingerprints, "table": table}, str(CACHE_VERSION))
