"""Knowledge: semantic extraction, compression, associations, temporal edges and link garbage collection."""

from typing import Any

import dagster as dg
import pyarrow as pa

from engram_pipelines.analyses.knowledge.compression import COMPRESSION_SCHEMA, compression
from engram_pipelines.analyses.knowledge.semantic import SEMANTIC_SCHEMA
from engram_pipelines.analyses.links.associations import ASSOCIATION_SCHEMA, associations
from engram_pipelines.analyses.links.gc import GC_SCHEMA
from engram_pipelines.analyses.links.temporal import TEMPORAL_SCHEMA, temporal_edges
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.guard import GUARD_COLUMNS
from engram_pipelines.changes.propose import proposed_intents
from engram_pipelines.core.registry import NAMES, inputs_of
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.night.wiring import gc_for_day, semantic_for_day, semantic_view
from engram_pipelines.orchestration.metadata import (
    Lineage,
    column_lineage,
    sample_markdown,
    standard,
    value_counts,
)
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, WarehouseResource
from engram_pipelines.warehouse.tables import Warehouse
from engram_pipelines.warehouse.vector_digests import stored_vectors
from engram_pipelines.warehouse.written import read_written

_COMMON: dict[str, Any] = {
    "partitions_def": as_of_partitions,
    "group_name": "analysis",
    "kinds": {"duckdb", "parquet"},
    "owners": ["team:data-platform"],
}


def _finish(
    wh: Warehouse,
    name: str,
    as_of,
    result: AnalysisResult,
    schema: pa.Schema,
    sample: list[str],
    lineage: Lineage,
    **extra,
) -> dg.MaterializeResult:
    table, intents = result.table, result.intents
    wh.write_table(name, as_of, table)
    wh.write_proposals(name, as_of, intents)
    return dg.MaterializeResult(
        metadata={
            **standard(schema, table.num_rows),
            "dagster/column_lineage": column_lineage(lineage),
            "transitions": intents.num_rows,
            "by_op": dg.MetadataValue.json(value_counts(intents, "op")),
            "sample": sample_markdown(table, [c for c in sample if c in table.column_names]),
            **extra,
        }
    )


# A node's state lives in its metadata; a cluster's members come from the pairs. A source counts while it is
# valid: not superseded (tonight's duplicate losers are) and not queued for purge (nor moved there tonight).
_MEMBERS = ["left_id", "right_id"]
_VALID_EVIDENCE = {
    "memory_snapshot": ["metadata", "superseded_by", "zone"],
    "duplicates": ["loser"],
    "retention": ["to_zone"],
    "similarity_pairs": _MEMBERS,
}

_SEMANTIC_LINEAGE: Lineage = {
    "namespace": {"memory_snapshot": ["namespace"]},
    # A new node's id hashes its sources; a cluster that reinforces a node takes the closest node's id.
    "node_id": {
        "memory_snapshot": ["id", "namespace", "metadata"],
        "similarity_pairs": _MEMBERS,
        "embeddings": ["vector"],
    },
    "cluster_id": {"similarity_pairs": _MEMBERS},
    "action": {"memory_snapshot": ["metadata"], "similarity_pairs": _MEMBERS, "embeddings": ["vector"]},
    "tier": _VALID_EVIDENCE,
    "previous_tier": {"memory_snapshot": ["metadata"]},
    "probability": {"memory_snapshot": ["metadata"], "similarity_pairs": _MEMBERS},
    "confidence": _VALID_EVIDENCE,
    "sources": _VALID_EVIDENCE,
    "new_sources": {"memory_snapshot": ["metadata"], "similarity_pairs": _MEMBERS},
    "contexts": _VALID_EVIDENCE,
    "variability": _VALID_EVIDENCE,
    "cycles": {"memory_snapshot": ["metadata"], "similarity_pairs": _MEMBERS},
    "marked": {"embeddings": ["vector"]},
    "representative": {"memory_snapshot": ["metadata"], "similarity_pairs": ["score"]},
}


# The analyses semantic extraction reads: those whose proposals hide rows (archive, queue, supersede), which the
# volume guard may hold.
_HIDING_SOURCES = [name for name in inputs_of("semantic") if name in NAMES]


@dg.asset(
    deps=inputs_of("semantic"),
    description=(
        "Semantic extraction (seed 003), deterministic: clusters of visible, uncontradicted episodic rows that "
        "state knowledge (not chit-chat) at >= semantic.cluster_similarity_threshold ({config.semantic.cluster_similarity_threshold}, every member to "
        "every other) with >= 2 sources from >= 2 contexts and context variability (distinct conversation/project "
        "pairs / size) >= {config.semantic.context_variability_threshold} become a semantic row (the most informative source's text, derived-from links) or reinforce "
        "the node they match. ICD 203 tiers raw / corroborated / assessed / baseline with dual-axis confidence "
        "(probability, confidence), single-source ceiling {config.semantic.single_source_ceiling}, anti-anchoring after "
        "{config.semantic.stale_threshold_days} days (x{config.semantic.stale_decay_rate} per cycle), "
        "dissent kept on the node, cascade on source loss, semanticCompressed marks. Class auto."
    ),
    **_COMMON,
)
def semantic(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    as_of, wh = as_of_date(context), warehouse.get()
    config = engram_config.for_run(wh)
    # Tonight's collapses and zone moves count already (one night settles what a second would otherwise
    # redo), those the volume guard will hold do not: judged on the proposals of the analyses read here.
    memories, fading = semantic_view(
        wh.read_memories(as_of),
        wh.read_table("retention", as_of),
        wh.read_table("duplicates", as_of),
        proposed_intents(wh, as_of, _HIDING_SOURCES, config, columns=GUARD_COLUMNS),
        config,
    )
    result, computed = semantic_for_day(
        memories,
        wh.read_table("links", as_of),
        wh.read_table("similarity_pairs", as_of),
        stored_vectors(wh, as_of),
        config,
        end_of_day(as_of),
        fading=fading,
        cache_root=wh.root,
    )
    return _finish(
        wh,
        "semantic",
        as_of,
        result,
        SEMANTIC_SCHEMA,
        ["node_id", "namespace", "action", "tier", "confidence", "sources"],
        _SEMANTIC_LINEAGE,
        namespaces_computed=computed,  # the others' inputs were last night's (execution.reuse)
    )


_COMPRESSION_LINEAGE: Lineage = {
    "cluster_id": {"similarity_pairs": _MEMBERS},
    "namespace": {"memory_snapshot": ["namespace"]},
    "summary_id": {"memory_snapshot": ["namespace"], "similarity_pairs": _MEMBERS},
    "member": {"similarity_pairs": _MEMBERS},
    # The representative is the cluster's medoid; the score is a member's cosine to it.
    "representative": {"similarity_pairs": ["score"]},
    "score": {"similarity_pairs": ["score"]},
    "importance": {"memory_snapshot": ["importance"]},
    # This run's decay score, else the row's stored one.
    "decay_score": {"decay_scores": ["score"], "memory_snapshot": ["score"]},
    # The summary takes the medoid's text, then the most distinct member's, until it is full.
    "in_summary": {"memory_snapshot": ["content"], "similarity_pairs": ["score"]},
}


@dg.asset(
    name="compression",
    deps=inputs_of("compression"),
    description=(
        "Compression (seed 001): clusters of related low-value memories (importance <= compression.max_importance, "
        "{config.compression.max_importance}, decay score <= {config.compression.max_score}, >= {config.compression.min_cluster_size} members at "
        ">= {config.compression.similarity_threshold}) become one summary row whose content is an "
        "extractive summary of its members; members are archived with summarized-into links. Pinned, important "
        "and contradicted rows are never compressed. Class gated: applied only after approve."
    ),
    **_COMMON,
)
def compression_asset(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    as_of, wh = as_of_date(context), warehouse.get()
    config = engram_config.for_run(wh)
    result = compression(
        wh.read_memories(as_of),
        wh.read_table("similarity_pairs", as_of),
        wh.read_table("decay_scores", as_of),
        config,
        end_of_day(as_of),
    )
    return _finish(
        wh,
        "compression",
        as_of,
        result,
        COMPRESSION_SCHEMA,
        ["summary_id", "namespace", "members", "content"],
        _COMPRESSION_LINEAGE,
    )


_ASSOCIATIONS_LINEAGE: Lineage = {
    "namespace": {"similarity_pairs": ["namespace"]},
    "src_id": {"similarity_pairs": _MEMBERS},
    "dst_id": {"similarity_pairs": _MEMBERS},
    "score": {"similarity_pairs": ["score"]},
    # Each memory ranks its band pairs by score, then by the other id.
    "src_rank": {"similarity_pairs": ["score", *_MEMBERS]},
    "dst_rank": {"similarity_pairs": ["score", *_MEMBERS]},
}


@dg.asset(
    name="associations",
    deps=inputs_of("associations"),
    description=(
        "Associations (seed 001): pairs related but below the merge band ([similarity.association_threshold, "
        "similarity.merge_threshold) = [{config.similarity.association_threshold}, {config.similarity.merge_threshold})) that are not linked yet get an associated link weighted by "
        "the cosine, at most similarity.association_top_k ({config.similarity.association_top_k}) per memory. Class auto."
    ),
    **_COMMON,
)
def associations_asset(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    as_of, wh = as_of_date(context), warehouse.get()
    config = engram_config.for_run(wh)
    result = associations(
        wh.read_memories(as_of),
        wh.read_table("links", as_of),
        wh.read_table("similarity_pairs", as_of),
        config,
        end_of_day(as_of),
    )
    return _finish(
        wh,
        "associations",
        as_of,
        result,
        ASSOCIATION_SCHEMA,
        ["namespace", "src_id", "dst_id", "score"],
        _ASSOCIATIONS_LINEAGE,
    )


# Only the built edges derive from memories (consecutive rows of a conversation by created_at, then id); the
# boosted and pruned ones come from the links table, which has no declared columns to name.
_CONVERSATION_ORDER = ["id", "created_at", "metadata"]
_TEMPORAL_LINEAGE: Lineage = {
    "namespace": {"memory_snapshot": ["namespace"]},
    "src_id": {"memory_snapshot": _CONVERSATION_ORDER},
    "dst_id": {"memory_snapshot": _CONVERSATION_ORDER},
    "weight_after": {"memory_snapshot": _CONVERSATION_ORDER},
    "distance": {"memory_snapshot": _CONVERSATION_ORDER},
    "conversation_id": {"memory_snapshot": ["metadata"]},
}


@dg.asset(
    deps=inputs_of("temporal"),
    description=(
        "Temporal edges (seed 003): each cycle multiplies temporal link weights by temporal.decay_rate "
        "({config.temporal.decay_rate}), by temporal.traversal_boost ({config.temporal.traversal_boost}) more when traversed since, and prunes "
        "those below {config.temporal.prune_threshold}; for historical "
        "corpora builds the missing edges between consecutive memories of a conversation ({config.temporal.neighbor_k} neighbours, "
        "forward weight {config.temporal.forward_weight}, backward {config.temporal.backward_weight}). Class auto."
    ),
    **_COMMON,
)
def temporal(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    as_of, wh = as_of_date(context), warehouse.get()
    config = engram_config.for_run(wh)
    result = temporal_edges(wh.read_memories(as_of), wh.read_table("links", as_of), config, end_of_day(as_of))
    return _finish(
        wh,
        "temporal",
        as_of,
        result,
        TEMPORAL_SCHEMA,
        ["namespace", "src_id", "dst_id", "action", "weight"],
        _TEMPORAL_LINEAGE,
    )


# The links themselves (namespace, ends, kind) are the links table's; which rule fires depends on whether the
# endpoints exist, in which namespace, and whether both are queued for purge.
_GC_LINEAGE: Lineage = {
    "rule": {"memory_snapshot": ["id", "namespace", "zone"]},
    "reason": {"memory_snapshot": ["id", "namespace", "zone"]},
}


@dg.asset(
    deps=inputs_of("gc"),
    description=(
        "Link garbage collection (seed 001): links whose endpoint no longer exists, self-links, links across "
        "namespaces, links between two rows queued for purge, and duplicate symmetric links are deleted "
        "(audited, revertible). Quarantined rows still exist, so their links are kept. Class auto. Judges only "
        "the links whose verdict can have changed since last night (execution.reuse; metadata links_judged)."
    ),
    **_COMMON,
)
def gc(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    as_of, wh = as_of_date(context), warehouse.get()
    links = wh.read_table("links", as_of)
    result, judged = gc_for_day(
        wh.read_memories(as_of),
        links,
        wh.read_table("quarantine", as_of, columns=["id"]),
        engram_config.for_run(wh),
        end_of_day(as_of),
        written=read_written(wh, as_of),
        cache_root=wh.root,
    )
    context.log.info(
        f"gc: judged {judged:,} of {links.num_rows:,} links, {result.table.num_rows:,} to delete"
    )
    return _finish(
        wh,
        "gc",
        as_of,
        result,
        GC_SCHEMA,
        ["namespace", "src_id", "dst_id", "kind", "finding"],
        _GC_LINEAGE,
        links_judged=judged,  # the others' verdicts were last night's (execution.reuse)
    )
