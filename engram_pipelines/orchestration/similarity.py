"""Similarity: comparable vectors, similar pairs, duplicate collapse (auto) and consolidation (gated)."""

import datetime as dt
import json
from collections import Counter
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.analyses.merges.clusters import CLUSTER_SCHEMA, MERGE_COLUMNS
from engram_pipelines.analyses.merges.collapse import MergeResult
from engram_pipelines.config.model import Config
from engram_pipelines.core.progress import LogProgress
from engram_pipelines.core.registry import inputs_of
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.night.wiring import consolidation_for_day, duplicates_for_day
from engram_pipelines.orchestration.metadata import (
    Lineage,
    column_lineage,
    sample_markdown,
    standard,
    value_counts,
)
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, WarehouseResource
from engram_pipelines.orchestration.shards import combine_op, shard_ops
from engram_pipelines.reports.plots import cluster_sizes, markdown_image, similarity_histogram
from engram_pipelines.vectors.comparable import VECTOR_INPUT_COLUMNS, partition_vectors
from engram_pipelines.vectors.embedding_layers import write_embeddings
from engram_pipelines.vectors.embeddings import load_embedder
from engram_pipelines.vectors.pair_cache import cached_vector_pairs
from engram_pipelines.vectors.pairs import PAIR_SCHEMA, exact_content_pairs, merged_pairs
from engram_pipelines.warehouse.tables import Warehouse
from engram_pipelines.warehouse.vector_digests import stored_vectors

# A stored vector is used while it is current (its embedded_content_sha matches the content); otherwise the
# content is embedded, and the model and source say which happened.
_CURRENT_VECTOR = ["embedding", "embedded_content_sha", "content"]

_EMBEDDINGS_LINEAGE: Lineage = {
    "id": {"memory_snapshot": ["id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    "model": {"memory_snapshot": ["embedding_model", *_CURRENT_VECTOR]},
    "source": {"memory_snapshot": _CURRENT_VECTOR},
    "vector": {"memory_snapshot": _CURRENT_VECTOR},
    "digest": {"memory_snapshot": _CURRENT_VECTOR},  # of the vector's bits (warehouse/vector_digests.py)
}

# Exact-content twins (score 1.0) come from the snapshot's content; every other pair from the two rows' vectors.
_PAIRS_LINEAGE: Lineage = {
    "namespace": {"embeddings": ["namespace"], "memory_snapshot": ["namespace"]},
    "left_id": {"embeddings": ["id"], "memory_snapshot": ["id"]},
    "right_id": {"embeddings": ["id"], "memory_snapshot": ["id"]},
    "score": {"embeddings": ["vector"], "memory_snapshot": ["content"]},
    "exact_content": {"memory_snapshot": ["content"]},
}


def _embed_shard(
    context: dg.OpExecutionContext, wh: Warehouse, config: Config, as_of: dt.date, shard: int, shards: int
) -> None:
    embedder = load_embedder(config.embeddings.embedder)
    if shards == 1 and config.execution.reuse:
        # One part: over a layered snapshot, only the rows written since its base need vectors.
        stats = write_embeddings(wh, as_of, embedder, progress=LogProgress(context.log))
        context.log.info(f"vectors found tonight {stats.as_dict()}")
        return
    memories = wh.read_shard("memories", as_of, shard, shards, columns=VECTOR_INPUT_COLUMNS)
    table, stats = partition_vectors(memories, embedder, wh.root, progress=LogProgress(context.log))
    wh.write_shard("embeddings", as_of, shard, shards, table)
    context.log.info(f"shard {shard}/{shards}: {memories.num_rows} memories, vectors {stats.as_dict()}")


def _combine_embeddings(
    context: dg.OpExecutionContext, wh: Warehouse, config: Config, as_of: dt.date, shards: int
) -> dict[str, Any]:
    if shards > 1 or wh.shard_path("embeddings", as_of, 0, 1).exists():
        wh.combine_shards("embeddings", as_of, shards)
    # else the one shard wrote the partition as layers (`write_embeddings`). The counts need no vectors.
    table = wh.read_table("embeddings", as_of, ["source", "model"])
    layers = wh.layers("embeddings", as_of)
    embedder_name = config.embeddings.embedder
    sources = value_counts(table, "source")
    return {
        **standard(wh.schema("embeddings", as_of), table.num_rows),
        "dagster/column_lineage": column_lineage(_EMBEDDINGS_LINEAGE),
        # Layered: the vectors of the rows written since the snapshot's base were found tonight, the others
        # (and their `source`) on the night that base was read.
        "layered": layers is not None,
        "stored": sources.get("stored", 0),
        "embedded": sources.get("embedded", 0),
        "cached": sources.get("cached", 0),
        "excluded": wh.read_table("memories", as_of, ["id"]).num_rows - table.num_rows,
        "models": dg.MetadataValue.json(value_counts(table, "model")),
        "embedder": embedder_name,
        "shards": shards,
    }


def _pair_shard(
    context: dg.OpExecutionContext, wh: Warehouse, config: Config, as_of: dt.date, shard: int, shards: int
) -> None:
    found = cached_vector_pairs(
        stored_vectors(wh, as_of, shard, shards),
        config.similarity.lowest_threshold,
        exact_cutoff=config.similarity.exact_cutoff,
        directory=wh.root / "pair_cache" / f"shard-{shard}-of-{shards}",
        progress=LogProgress(context.log),
        reuse=config.execution.reuse,
    )
    memories = wh.read_shard("memories", as_of, shard, shards, columns=MERGE_COLUMNS)
    pairs = merged_pairs(found.pairs, exact_content_pairs(memories))
    # The shard's counts travel with its part (the combine step may run in another process).
    counts = {
        "rows_by_method": found.methods,
        "namespaces_reused": found.reused_namespaces,
        "namespaces_updated": found.updated_namespaces,
    }
    wh.write_shard(
        "similarity_pairs",
        as_of,
        shard,
        shards,
        pairs.replace_schema_metadata({"counts": json.dumps(counts)}),
    )
    context.log.info(
        f"shard {shard}/{shards}: {found.pairs.num_rows} vector pairs; namespaces compared "
        f"{found.compared_namespaces}, unchanged since the last run (pairs reused) "
        f"{found.reused_namespaces}, updated {found.updated_namespaces} (their {found.changed_rows} moved "
        f"rows joined, the other pairs reused); rows by method {found.methods}"
    )


def _combine_pairs(
    context: dg.OpExecutionContext, wh: Warehouse, config: Config, as_of: dt.date, shards: int
) -> dict[str, Any]:
    order = [("namespace", "ascending"), ("left_id", "ascending"), ("right_id", "ascending")]
    parts = wh.read_shards("similarity_pairs", as_of, shards)
    pairs = parts.sort_by(order).replace_schema_metadata(None)
    wh.write_table("similarity_pairs", as_of, pairs)
    methods: Counter[str] = Counter()
    reused = updated = 0
    for shard in range(shards):
        counts = json.loads(
            pq.read_schema(wh.shard_path("similarity_pairs", as_of, shard, shards)).metadata[b"counts"]
        )
        methods.update(counts["rows_by_method"])
        reused += counts["namespaces_reused"]
        updated += counts["namespaces_updated"]
    return {
        **standard(PAIR_SCHEMA, pairs.num_rows),
        "rows_by_method": dg.MetadataValue.json(dict(methods)),  # rows compared this run, by engine method
        "namespaces_reused": reused,
        # A few rows moved: their pairs found again, the others' pairs reused (vectors/pair_cache.py).
        "namespaces_updated": updated,
        "dagster/column_lineage": column_lineage(_PAIRS_LINEAGE),
        "exact_content_pairs": int(pa.compute.sum(pairs["exact_content"]).as_py() or 0),
        "threshold": config.similarity.lowest_threshold,
        "shards": shards,
        "similarity_histogram": dg.MetadataValue.md(
            markdown_image(
                similarity_histogram(
                    pairs["score"].to_numpy(zero_copy_only=False),
                    {
                        "association": config.similarity.association_threshold,
                        "contradiction": config.similarity.contradiction_threshold,
                        "merge": config.similarity.merge_threshold,
                        "duplicate": config.similarity.duplicate_threshold,
                    },
                ),
                "similarity histogram",
            )
        ),
    }


def sharded_assets(shards: int) -> list[dg.AssetsDefinition]:
    """embeddings and similarity_pairs, each one step per namespace hash shard plus a combine step."""
    embed_ops = shard_ops("embeddings", shards, _embed_shard, ("memory_snapshot",))
    combine_embeddings = combine_op("embeddings", shards, _combine_embeddings)
    pair_ops = shard_ops("similarity_pairs", shards, _pair_shard, ("memory_snapshot", "embeddings"))
    combine_pairs = combine_op("similarity_pairs", shards, _combine_pairs)

    @dg.graph_asset(
        name="embeddings",
        ins={"memory_snapshot": dg.AssetIn(dagster_type=dg.Nothing)},
        partitions_def=as_of_partitions,
        group_name="analysis",
        kinds={"parquet", "onnx"},
        owners=["team:data-platform"],
        description=(
            "The partition's comparable vectors: a memory's stored vector where it is current (its "
            "embedded_content_sha matches the content), else an embedding from the configured embedder "
            "(embeddings.embedder; default all-MiniLM-L6-v2 int8, offline), cached in the warehouse by model and "
            "content hash so only new or changed rows are ever embedded. Each vector keeps its model name; "
            "vectors of two models are never compared; each carries a 64-bit digest of its values, which the "
            "reusing steps compare without reading vectors. Rows marked embeddingExcluded are left out. One step per "
            "namespace hash shard (execution.shards), run in parallel by the executor, then a combine step."
        ),
    )
    def embeddings(memory_snapshot):
        return combine_embeddings(parts=[op(memory_snapshot=memory_snapshot) for op in embed_ops])

    @dg.graph_asset(
        name="similarity_pairs",
        ins={
            "memory_snapshot": dg.AssetIn(dagster_type=dg.Nothing),
            "embeddings": dg.AssetIn(dagster_type=dg.Nothing),
        },
        partitions_def=as_of_partitions,
        group_name="analysis",
        kinds={"parquet", "numpy"},
        owners=["team:data-platform"],
        description=(
            "Every pair at or above the lowest configured threshold (similarity.association_threshold, "
            "{config.similarity.association_threshold}) within one namespace and one embedding model, never across: exact blocked matrix products "
            "for namespaces up to similarity.exact_cutoff ({config.similarity.exact_cutoff}) rows, a k-means cell join tuned to recall >= 0.99 above "
            "it (bench/similarity.py). Plus exact-content twins at score 1.0 (historical corpora never passed "
            "write-time dedup). Columns: score is the cosine of the two rows' vectors. One step per namespace "
            "hash shard (execution.shards), run in parallel by the executor, then a combine step."
        ),
    )
    def similarity_pairs(memory_snapshot, embeddings):
        return combine_pairs(
            parts=[op(memory_snapshot=memory_snapshot, embeddings=embeddings) for op in pair_ops]
        )

    return [embeddings, similarity_pairs]


@dg.asset(
    partitions_def=as_of_partitions,
    deps=inputs_of("duplicates"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Duplicate collapse (seed 000's write-time dedup, after the fact): pairs at or above "
        "similarity.duplicate_threshold ({config.similarity.duplicate_threshold}, MEMORY_DUPLICATE_THRESHOLD) and exact-content twins collapse "
        "into their canonical (the member that contains the others: most content words, then the longer text, "
        "then highest importance, most recent, lowest id), which gets the tag union "
        "and a duplicateMatches annotation; the rest are superseded with a duplicate-of link. Class auto. "
        "Pairs whose numbers differ, of different kinds, or in a contradiction are never collapsed; semantic "
        "nodes and rows this run's retention moves out of Active take no part."
    ),
)
def duplicates(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    memories = wh.read_table("memories", as_of, columns=MERGE_COLUMNS)
    result = duplicates_for_day(
        wh.read_table("similarity_pairs", as_of),
        memories,
        config,
        end_of_day(as_of),
        contradiction_pairs=_contradiction_pairs(wh, as_of),
        moves=_moves(wh, as_of),
        cache_root=wh.root,
    )
    return _merge_result(wh, "duplicates", as_of, result, "Duplicate clusters")


@dg.asset(
    partitions_def=as_of_partitions,
    deps=inputs_of("consolidation"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Corpus consolidation (seeds 000, 002): near-duplicates in [similarity.merge_threshold, "
        "similarity.duplicate_threshold) = [{config.similarity.merge_threshold}, {config.similarity.duplicate_threshold}) grouped so that every loser is in the band to its "
        "canonical and to every other loser (no single-link chains) and contained in its canonical (same "
        "subject, names in order, 40% of its content words; no questions): a loser says nothing the canonical "
        "lacks. Canonical: most content words, then the longer text, then importance, recency, id; tag "
        "union onto it; losers superseded with a reason, the score and a duplicate-of link. Excluded: superseded "
        "rows, rows in a contradiction, pinned rows and blocks as losers, different kinds, rows without a vector, "
        "pairs whose numbers differ, rows the duplicate collapse already took, semantic nodes (they dedupe "
        "themselves), rows this run's retention moves out of Active (no row is hidden behind an archived one). "
        "Class gated: nothing merges "
        "before `engram-pipelines approve` and `apply`; `changes show ID --html` is the review page."
    ),
)
def consolidation(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    memories = wh.read_table("memories", as_of, columns=MERGE_COLUMNS)
    result = consolidation_for_day(
        wh.read_table("similarity_pairs", as_of),
        memories,
        config,
        end_of_day(as_of),
        contradiction_pairs=_contradiction_pairs(wh, as_of),
        moves=_moves(wh, as_of),
        duplicates=wh.read_table("duplicates", as_of),
        cache_root=wh.root,
    )
    return _merge_result(wh, "consolidation", as_of, result, "Near-duplicate clusters (gated)", dry_run=True)


# Clusters are built over the pairs; the canonical is the member a merge keeps (highest importance, then most
# recent, then lowest id) and takes the tag union of its cluster.
_CLUSTER_LINEAGE: Lineage = {
    "cluster_id": {"similarity_pairs": ["left_id", "right_id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    "canonical": {
        "similarity_pairs": ["left_id", "right_id"],
        "memory_snapshot": ["importance", "created_at", "id"],
    },
    "loser": {"similarity_pairs": ["left_id", "right_id"]},
    "score": {"similarity_pairs": ["score"]},
    "tag_union": {"memory_snapshot": ["tags"]},
}


def _merge_result(wh, name: str, as_of, result: MergeResult, title: str, **extra) -> dg.MaterializeResult:
    """Store a merge step's clusters and intents; its metadata carries seed 000's summary and a plot."""
    table = result.table
    wh.write_table(name, as_of, table)
    wh.write_proposals(name, as_of, result.intents)
    summary = result.summary()
    sizes = [1 + len(c.losers) for c in result.clusters]
    return dg.MaterializeResult(
        metadata={
            **standard(CLUSTER_SCHEMA, table.num_rows),
            "dagster/column_lineage": column_lineage(_CLUSTER_LINEAGE),
            "scanned": summary["scanned"],
            "clusters": summary["clusters"],
            "merged": summary["merged"],
            **extra,
            "transitions": result.intents.num_rows,
            "sample": sample_markdown(table, ["cluster_id", "canonical", "loser", "score", "tag_union"]),
            "cluster_sizes": dg.MetadataValue.md(markdown_image(cluster_sizes(sizes, title), title)),
        }
    )


def _contradiction_pairs(wh, as_of) -> pa.Table:
    """Pairs the contradiction analysis found this run (a changed value is not a duplicate)."""
    return wh.read_table("contradictions", as_of, columns=["left_id", "right_id"])


def _moves(wh: Warehouse, as_of: dt.date) -> pa.Table:
    """The night's retention moves (the merge steps leave out the rows they take out of Active)."""
    return wh.read_table("retention", as_of, columns=["id", "namespace", "from_zone", "to_zone"])
