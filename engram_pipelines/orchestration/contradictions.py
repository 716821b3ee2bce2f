"""Contradictions: same-topic pairs that make different claims, surfaced (flag) or resolved (supersede)."""

import dagster as dg

from engram_pipelines.analyses.contradictions.policy import CONTRADICTION_SCHEMA
from engram_pipelines.core.registry import inputs_of
from engram_pipelines.night.wiring import contradictions_for_day
from engram_pipelines.orchestration.metadata import Lineage, column_lineage, sample_markdown, standard
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, WarehouseResource

# A pair comes from the similarity band (pairs), the structural join on the parsed content, or an explicit
# metadata.contradicts link; the rules read the content (and the explicit links), the creation times say which
# row is the newer.
_PAIR_IDS = {"similarity_pairs": ["left_id", "right_id"], "memory_snapshot": ["id"]}
_CLAIMS = ["content", "metadata"]

_CONTRADICTIONS_LINEAGE: Lineage = {
    "namespace": {"memory_snapshot": ["namespace"]},
    "left_id": _PAIR_IDS,
    "right_id": _PAIR_IDS,
    "newer_id": {"similarity_pairs": ["left_id", "right_id"], "memory_snapshot": ["id", "created_at"]},
    "older_id": {"similarity_pairs": ["left_id", "right_id"], "memory_snapshot": ["id", "created_at"]},
    # Some rules look at one side only (a change indicator in the newer row), so the roles count too.
    "rule": {"memory_snapshot": [*_CLAIMS, "created_at"]},
    "reason": {"memory_snapshot": [*_CLAIMS, "created_at"]},
    "sources": {"similarity_pairs": ["score"], "memory_snapshot": _CLAIMS},
    "score": {"similarity_pairs": ["score"]},
}


@dg.asset(
    partitions_def=as_of_partitions,
    deps=inputs_of("contradictions"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Contradiction candidates from three sources: similar pairs in the band [{config.similarity.contradiction_threshold}, "
        "{config.similarity.contradiction_threshold_max}) "
        "(MEMORY_CONTRADICTION_THRESHOLD[_MAX]); a structural DuckDB join on parsed (namespace, subject, relation) "
        "with differing values, whatever the cosine; explicit metadata.contradicts links. Confirmed by "
        "deterministic rules, in order: negation asymmetry, change indicator in the newer row, polar opposites, "
        "value swap (relational and copular forms), numeric and time values (word lists in "
        "contradiction_rules.yaml). Policy ({config.contradiction.policy} here) flag (auto): both rows marked contradictionWith and a "
        "contradicts link; supersede (gated): the older row is superseded by the newer. Rows of a contradiction "
        "are never merged by the duplicate or consolidation steps."
    ),
)
def contradictions(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    memories = wh.read_table(
        "memories",
        as_of,
        columns=["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"],
    )
    result = contradictions_for_day(
        memories, wh.read_table("similarity_pairs", as_of), config, cache_root=wh.root
    )
    wh.write_table("contradictions", as_of, result.table)
    wh.write_proposals("contradictions", as_of, result.intents)
    context.log.info(f"contradictions: {result.by_rule} found by source {result.found_by_source}")
    return dg.MaterializeResult(
        metadata={
            **standard(CONTRADICTION_SCHEMA, result.table.num_rows),
            "dagster/column_lineage": column_lineage(_CONTRADICTIONS_LINEAGE),
            "policy": config.contradiction.policy,
            "reused_from_last_night": result.figures["reused"],
            "namespaces_computed": result.figures["namespaces_computed"],
            "by_rule": dg.MetadataValue.json(result.by_rule),
            "candidates_by_source": dg.MetadataValue.json(result.candidates_by_source),
            "found_by_source": dg.MetadataValue.json(result.found_by_source),
            "samples_by_rule": dg.MetadataValue.json(result.samples),
            "transitions": result.intents.num_rows,
            "sample": sample_markdown(result.table, ["older_id", "newer_id", "rule", "reason", "sources"]),
        }
    )
