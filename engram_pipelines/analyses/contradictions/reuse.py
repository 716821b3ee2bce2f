"""Contradictions reused across nights: when the memories, pairs and settings they are computed from are what
they were at the last computation, that result is tonight's (a quiet night recomputed every memory's features
and every candidate pair: the largest step of a night with nothing new).

The inputs' fingerprint hashes every column the analysis reads of the memories (id, namespace, content,
created_at, the metadata keys of explicit links and of flags already set, superseded_by, pinned), every pair (ids and score), the configuration's fingerprint, the
rule book and the versions of the parser and of this cache; the result kept is the table, the intents and
the figures, under <warehouse>/contradiction_cache/. Nothing else decides, so the reused result is the one a
computation would give.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.contradictions.features import FEATURES_VERSION
from engram_pipelines.analyses.contradictions.policy import ContradictionResult, find_contradictions
from engram_pipelines.analyses.contradictions.rules import load_rules
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.tables import read_parquet, write_parquet

# 2: the rows' digests are aggregated, not their text (a 1M store's contents were one 1 GB string).
CACHE_VERSION = 2
MEMORY_COLUMNS = ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]


def inputs_fingerprint(memories: pa.Table, pairs: pa.Table, config: Config) -> str:
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
        con.register("p", pairs.select(["left_id", "right_id", "score"]))
        ((rows,),) = con.execute(
            f"""
            SELECT md5(coalesce(string_agg(md5(concat_ws(chr(31), id, namespace, content, created_at::VARCHAR,
                {metadata}, coalesce(superseded_by, chr(0)), pinned::VARCHAR)), '' ORDER BY id), ''))
            FROM m
            """
        ).fetchall()
        ((links,),) = con.execute(
            """
            SELECT md5(coalesce(string_agg(md5(concat_ws(chr(31), left_id, right_id, score::VARCHAR)), ''
                ORDER BY left_id, right_id), ''))
            FROM p
            """
        ).fetchall()
    return hashlib.sha256(f"{salt}|{rows}|{links}".encode()).hexdigest()


def contradictions_reusing(
    memories: pa.Table, pairs: pa.Table, config: Config, *, cache_root: Path
) -> ContradictionResult:
    """The contradictions of these inputs: the cached result when its fingerprint matches, else computed (and
    kept for the next night). `figures["reused"]` says which."""
    cache = cache_root / "contradiction_cache"
    fingerprint = inputs_fingerprint(memories, pairs, config)
    kept = _read(cache, fingerprint)
    if kept is not None:
        return kept
    result = find_contradictions(memories, pairs, config, cache_root=cache_root)
    result.figures["reused"] = False
    _write(cache, fingerprint, result)
    return result


def _read(cache: Path, fingerprint: str) -> ContradictionResult | None:
    try:
        if (cache / "fingerprint").read_text() != fingerprint:
            return None
        figures = json.loads((cache / "figures.json").read_text())
        table = read_parquet(cache / "table.parquet")
        intents = read_parquet(cache / "intents.parquet")
    except (OSError, ValueError, pa.ArrowException):
        return None  # none yet, or damaged: computed again
    return ContradictionResult(
        table=table,
        intents=intents,
        figures={"reused": True},
        candidates_by_source=figures["candidates_by_source"],
        found_by_source=figures["found_by_source"],
        by_rule=figures["by_rule"],
        samples=figures["samples"],
    )


def _write(cache: Path, fingerprint: str, result: ContradictionResult) -> None:
    """Written aside and renamed into place: a reader never sees half of one."""
    staging = cache.with_name(cache.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    write_parquet(result.table, staging / "table.parquet")
    write_parquet(result.intents, staging / "intents.parquet")
    figures = {
        "candidates_by_source": result.candidates_by_source,
        "found_by_source": result.found_by_source,
        "by_rule": result.by_rule,
        "samples": result.samples,
    }
    (staging / "figures.json").write_text(json.dumps(figures, sort_keys=True))
    (staging / "fingerprint").write_text(fingerprint)  # last: a cache without it is never read
    shutil.rmtree(cache, ignore_errors=True)
    staging.rename(cache)
