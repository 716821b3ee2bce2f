"""Semantic extraction reused across nights, per namespace: a namespace whose inputs are what they were at the
last computation and where no node's anti-anchoring falls due tonight keeps that computation's rows and
intents; only the other namespaces are computed again (nothing in the analysis crosses a namespace). At 1M
memories the step took 23 s of a quiet night, most of it over namespaces where nothing had moved.

Time enters the result in two ways only. Anti-anchoring (a node idle for `stale_threshold_days` loses
confidence) is checked per node for tonight: a namespace where it may fall due is computed again. And the
intents carry the night's instant as text (a node's `created_at` and `reinforcedAt`, a compression mark's `at`,
a dissent's `at`): a namespace whose last computation proposed something that did not land (held for review,
waiting for approval) proposes it again with tonight's instant, so the kept rows and intents are re-stamped, the
last computation's instant replaced by tonight's. An instant of the inputs cannot equal it: anything stamped with
it landed after that computation, which moved the inputs. (Recomputing such namespaces every night cost most of
the step at 1M: the demo's big namespaces are held by the volume guard night after night.)

A namespace's fingerprint hashes what the analysis reads: of its memories the id, kind, content, importance,
tags, superseded_by, the metadata's conversation and project ids, node state, compression and contradiction
markers, and of the zone only what decides (may it seed, is a node's source queued for purge, is it live where
compression marks are made: rows archived by age every night in every namespace changed nothing else and
made every namespace compute again); its `contradicts` links, its pairs at or above the cluster threshold, its
vectors (id, model, the values' stored digest: `warehouse/vector_digests.py`), the configuration's fingerprint
and the analysis's own source files and word lists. The result put together is the one a computation of every
namespace gives (the tests hold the two equal).
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
from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.warehouse.kept import read_kept, write_kept
from engram_pipelines.warehouse.vector_digests import VectorSource, vector_fingerprints

CACHE_VERSION = 2
KEPT = pa.schema(
    [
        pa.field("namespace", pa.string()),
        pa.field("fingerprint", pa.string()),
        pa.field("when", pa.string()),  # the computation's instant, as its intents carry it
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
    when = format_timestamp(at)
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
                    "WHERE namespace NOT IN (SELECT namespace FROM due)"
                )
                .to_arrow_table()["namespace"]
                .combine_chunks()
            )
    computed = tonight.num_rows - len(same)
    parts = []
    if kept is not None and len(same):
        fingerprints, table, intents = kept
        then = fingerprints["when"][0].as_py() if fingerprints.num_rows else when

        def reused(kept_table: pa.Table) -> pa.Table:
            return restamped(kept_table.filter(pc.is_in(kept_table["namespace"], value_set=same)), then, when)

        parts.append(AnalysisResult(table=reused(table), intents=reused(intents)))
    if computed:

        def others(table: pa.Table) -> pa.Table:
            return (
                table.filter(pc.invert(pc.is_in(table["namespace"], value_set=same))) if len(same) else table
            )

        parts.append(
            semantic_extraction(
                others(memories),
                others(links),
                others(pairs),
                lambda ids: vectors.load_except(same, ids),  # only the computed namespaces' vectors are read
                config,
                at,
                fading=fading,
                cache_root=cache_root,
            )
        )
    result = in_namespace_order(parts)
    if computed:
        stamps = pa.array([when] * tonight.num_rows, pa.string())
        _write(cache, tonight.append_column("when", stamps), result.table, result.intents)
    return result, computed


def restamped(table: pa.Table, then: str, when: str) -> pa.Table:
    """`table` with the instant `then` replaced by `when` in every text (and list of texts) column."""
    if then == when:
        return table

    def replaced(column: pa.ChunkedArray) -> pa.ChunkedArray:
        kind = column.type
        if pa.types.is_string(kind):
            return pc.replace_substring(column, pattern=then, replacement=when)
        if pa.types.is_list(kind) and pa.types.is_string(kind.value_type):
            lists = column.combine_chunks() if column.num_chunks else pa.array([], kind)
            values = pc.replace_substring(lists.values, pattern=then, replacement=when)
            return pa.chunked_array(
                [pa.ListArray.from_arrays(lists.offsets, values, kind, mask=lists.is_null())]
            )
        return column

    return pa.table([replaced(c) for c in table.columns], schema=table.schema)


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


def _read(cache: Path) -> tuple[pa.Table, pa.Table, pa.Table] | None:
    tables = read_kept(cache, ("fingerprints", "table", "intents"), str(CACHE_VERSION))
    return None if tables is None else (tables[0].cast(KEPT), tables[1], tables[2])


def _write(cache: Path, fingerprints: pa.Table, table: pa.Table, intents: pa.Table) -> None:
    write_kept(cache, {"fingerprints": fingerprints, "table": table, "intents": intents}, str(CACHE_VERSION))
