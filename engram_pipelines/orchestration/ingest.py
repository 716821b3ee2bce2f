"""Ingest: the live store snapshotted into one Parquet partition per as-of date."""

import dagster as dg

from engram_pipelines.changes.apply import resume_interrupted
from engram_pipelines.core import records
from engram_pipelines.core.progress import LogProgress
from engram_pipelines.ingest.snapshot import take_snapshot, vectors_dropped_message
from engram_pipelines.orchestration.metadata import sample_markdown, standard
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource


@dg.asset(
    partitions_def=as_of_partitions,
    group_name="ingest",
    kinds={"parquet", "sqlite", "postgres"},
    owners=["team:data-platform"],
    description=(
        "The live memory store exported to Parquet for one as-of date (table `memories`, plus `links`), "
        "streamed in batches and validated with a pandera schema. Invalid rows are not dropped: they go to "
        "`quarantine` with a reason column and are counted here; the blocking check "
        "`snapshot_invalid_fraction` stops the run when too many rows are invalid. Every analysis reads "
        "this snapshot, never the live store. Backfills materialise a range of dates. A change set whose apply "
        "was interrupted (a crash, a killed process) is finished from its ledger before the store is read."
    ),
)
def memory_snapshot(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    context.log.info(f"configuration {config.fingerprint()} frozen for this run")
    as_of = as_of_date(context)
    with store.open() as live:
        # A set whose apply was killed is finished first: a night never reads a half-applied store.
        resumed_sets = resume_interrupted(
            live,
            actor=f"dagster:{context.run.run_id[:8]}",
            batch_size=config.apply.batch_size,
            progress=LogProgress(context.log),
            warehouse_root=warehouse.get().root,
        )
        for resumed in resumed_sets:
            context.log.warning(
                f"finished the interrupted apply of {resumed.change_set_id}: {resumed.as_dict()}"
            )
        result = take_snapshot(
            live,
            warehouse.get(),
            as_of,
            embedding_dim=config.snapshot.embedding_dim,
            batch_size=config.snapshot.batch_size,
            progress=LogProgress(context.log),
            incremental=config.snapshot.incremental and config.execution.reuse,
            full_every_days=config.snapshot.full_every_days,
        )
    if result.mode == "incremental":
        context.log.info(
            f"incremental snapshot: {result.reread} memories read again, {result.deleted} gone, the rest carried "
            "over from the previous snapshot"
        )
    else:
        context.log.info(f"full snapshot: {result.full_reason}")
    context.log.info(
        f"links: {result.links_read} read from the store"
        + (f" (whole: {result.links_full_reason})" if result.links_full_reason else ", the rest carried over")
    )
    context.log.info(
        f"snapshot {as_of}: {result.memories} memories, {result.quarantined} quarantined, {result.links} links"
    )
    if result.vectors_dropped:
        context.log.warning(vectors_dropped_message(result.vectors_dropped, config.snapshot.embedding_dim))
    memories = warehouse.get().read_table(
        "memories", as_of, columns=["id", "namespace", "tier", "kind", "zone"]
    )
    return dg.MaterializeResult(
        metadata={
            **standard(records.memory_schema(config.snapshot.embedding_dim), result.memories),
            "quarantined": result.quarantined,
            "vectors_dropped": result.vectors_dropped,
            "config_fingerprint": config.fingerprint(),
            "snapshot_mode": result.mode,
            "memories_read": result.reread,
            "memories_gone": result.deleted,
            "full_reason": result.full_reason,
            "invalid_fraction": float(result.invalid_fraction),
            "links": result.links,
            "links_read": result.links_read,
            "links_full_reason": result.links_full_reason,
            "resumed_change_sets": dg.MetadataValue.json([r.as_dict() for r in resumed_sets]),
            "namespaces": len(result.namespaces),
            "rows_per_namespace": dg.MetadataValue.json(result.namespaces),
            "quarantine_samples": dg.MetadataValue.json(result.quarantine_samples),
            "sample": sample_markdown(memories, ["id", "namespace", "tier", "kind", "zone"]),
            "path": dg.MetadataValue.path(result.memories_path),
            "quarantine_path": dg.MetadataValue.path(result.quarantine_path),
        }
    )


@dg.asset_check(
    asset=memory_snapshot,
    blocking=True,
    description="Fails the run when the quarantined fraction exceeds snapshot.max_invalid_fraction.",
)
def snapshot_invalid_fraction(
    context: dg.AssetCheckExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.AssetCheckResult:
    limit = engram_config.for_run(warehouse.get()).snapshot.max_invalid_fraction
    wh = warehouse.get()
    as_of = as_of_date(context)
    valid = wh.read_table("memories", as_of, columns=["id"]).num_rows
    invalid = wh.read_table("quarantine", as_of, columns=["id"]).num_rows
    fraction = invalid / (valid + invalid) if valid + invalid else 0.0
    return dg.AssetCheckResult(
        passed=fraction <= limit,
        metadata={"invalid_fraction": fraction, "limit": limit, "quarantined": invalid},
        description=f"{invalid} of {valid + invalid} rows quarantined (limit {limit:.2%})",
    )
