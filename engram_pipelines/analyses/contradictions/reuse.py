"""Contradictions reused across nights, per namespace: a namespace whose memories, pairs and settings are what
they were at the last computation keeps that computation's rows and intents; only the others are computed
again (contradictions never cross a namespace). A whole-partition fingerprint moved every night at 100k and 1M
memories, because the night before had flagged a pair somewhere (2 of 102,556 rows' inputs changed), so a
quiet night recomputed every namespace.

A namespace's fingerprint hashes every column the analysis reads of its memories (id, namespace, content,
created_at, the metadata keys of explicit links and of flags already set, superseded_by, pinned), its pairs
(ids and score), the configuration's fingerprint, the rule book and the versions of the parser and of this
cache; what is kept is the table, the intents and the candidate counts, under <warehouse>/contradiction_cache/.
Nothing else decides, so the result put together is the one a computation of every namespace gives (the
tests hold the two equal).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.contradictions.features import FEATURES_VERSION
from engram_pipelines.analyses.contradictions.policy import (
    CANDIDATE_COUNTS,
    CONTRADICTION_SCHEMA,
    TABLE_ORDER,
    ContradictionResult,
    contradiction_result,
    find_contradictions,
)
from engram_pipelines.analyses.contradictions.rules import load_rules
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.kept import read_kept, write_kept

# 2: the rows' digests are aggregated, not their text (a 1M store's contents were one 1 GB string).
# 3: per namespace.
CACHE_VERSION = 3
MEMORY_COLUMNS = ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]
FINGERPRINTS = pa.schema([pa.field("namespace", pa.string()), pa.field("fingerprint", pa.string())])


def namespace_fingerprints(memories: pa.Table, pairs: pa.Table, config: Config) -> pa.Table:
    """(namespace, fingerprint) of every namespace of `memories`."""
    rules = load_rules(config.contradiction.rules_path)
    salt = f"{CACHE_VERSION}|{FEATURES_VERSION}|{config.fingerprint()}|{rules.fingerprint}"
    # Of the metadata, only what the analysis reads: the explicit links and the flags already set. A stale mark
    # or a temporal marker (written every night by time alone) does not make it compute again.
    read = [*rules.explicit_keys, "contradictionWith"]
    metadata = ", ".join(
        f"coalesce(json_extract(metadata, {quoted('$.' + json.dumps(key))})::VARCHAR, chr(0))"
        for key in dict.fromkeys(read)
    )
    with duck() as con:
        con.register("m", memories.select(MEMORY_COLUMNS))
        con.register("p", pairs.select(["namespace", "left_id", "right_id", "score"]))
        return (
            con.sql(
                f"""
            WITH rows AS (
                SELECT namespace, md5(string_agg(md5(concat_ws(chr(31), id, namespace, content,
                    created_at::VARCHAR, {metadata}, coalesce(superseded_by, chr(0)), pinned::VARCHAR)), ''
                    ORDER BY id)) AS digest
                FROM m GROUP BY namespace
            ), links AS (
                SELECT namespace, md5(string_agg(md5(concat_ws(chr(31), left_id, right_id, score::VARCHAR)), ''
                    ORDER BY left_id, right_id)) AS digest
                FROM p GROUP BY namespace
            )
            SELECT namespace, md5(concat_ws('|', {quoted(salt)}, rows.digest, coalesce(links.digest, '')))
                AS fingerprint
            FROM rows LEFT JOIN links USING (namespace)
            ORDER BY namespace
            """
            )
            .to_arrow_table()
            .cast(FINGERPRINTS)
        )


@dataclass(frozen=True)
class _Kept:
    fingerprints: pa.Table
    table: pa.Table
    intents: pa.Table
    candidate_counts: pa.Table


def contradictions_reusing(
    memories: pa.Table, pairs: pa.Table, config: Config, *, cache_root: Path
) -> ContradictionResult:
    """The contradictions of these inputs: the kept rows of every namespace whose fingerprint matches, the
    others computed (and everything kept for the next night). `figures["reused"]` says whether every namespace
    was reused, `figures["namespaces_computed"]` how many were not."""
    cache = cache_root / "contradiction_cache"
    tonight = namespace_fingerprints(memories, pairs, config)
    kept = _read(cache)
    same: pa.Array = pa.array([], pa.string())
    if kept is not None:
        with duck() as con:
            con.register("tonight", tonight)
            con.register("kept", kept.fingerprints)
            same = (
                con.sql("SELECT namespace FROM tonight JOIN kept USING (namespace, fingerprint)")
                .to_arrow_table()["namespace"]
                .combine_chunks()
            )
    computed = tonight.num_rows - len(same)
    parts = [_of(kept, same)] if kept is not None and len(same) else []
    if computed:
        parts.append(
            find_contradictions(
                memories.filter(pc.invert(pc.is_in(memories["namespace"], value_set=same))),
                pairs.filter(pc.invert(pc.is_in(pairs["namespace"], value_set=same))),
                config,
                cache_root=cache_root,
            )
        )
    result = _combined(parts)
    result.figures.update({"reused": computed == 0, "namespaces_computed": computed})
    if computed:
        _write(cache, tonight, result)
    return result


def _of(kept: _Kept, namespaces: pa.Array) -> ContradictionResult:
    def chosen(table: pa.Table) -> pa.Table:
        return table.filter(pc.is_in(table["namespace"], value_set=namespaces))

    return ContradictionResult(
        table=chosen(kept.table), intents=chosen(kept.intents), candidate_counts=chosen(kept.candidate_counts)
    )


def _combined(parts: list[ContradictionResult]) -> ContradictionResult:
    """One result of the namespaces' parts, in the order a computation of all of them gives: the table by its
    key, the intents and counts by namespace (stable: within one, as computed)."""
    if not parts:
        return contradiction_result(
            CONTRADICTION_SCHEMA.empty_table(), INTENT_SCHEMA.empty_table(), CANDIDATE_COUNTS.empty_table()
        )

    def by_namespace(tables: list[pa.Table]) -> pa.Table:
        whole = pa.concat_tables(tables)
        return whole.take(pc.sort_indices(whole["namespace"]))  # sort_indices is stable

    table = pa.concat_tables([p.table for p in parts]).sort_by(TABLE_ORDER)
    intents = by_namespace([p.intents for p in parts])
    counts = by_namespace([p.candidate_counts for p in parts])
    return contradiction_result(table, intents, counts)


def _read(cache: Path) -> _Kept | None:
    tables = read_kept(cache, _KEPT_FILES, str(CACHE_VERSION))
    return None if tables is None else _Kept(*tables)


_KEPT_FILES = ("fingerprints", "table", "intents", "candidate_counts")


def _write(cache: Path, fingerprints: pa.Table, result: ContradictionResult) -> None:
    tables = (fingerprints, result.table, result.intents, result.candidate_counts)
    write_kept(cache, dict(zip(_KEPT_FILES, tables, strict=True)), str(CACHE_VERSION))
