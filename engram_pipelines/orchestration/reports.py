"""Reports: the health report of each run, as Markdown on the asset's page and as a file."""

import dagster as dg
import pyarrow.compute as pc

from engram_pipelines.changes.registry import read_changes, registered_change_set
from engram_pipelines.orchestration.changes import _job, applied_changes
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource
from engram_pipelines.reports.health import COUNTED_COLUMNS, HealthReport, counts_after_apply, snapshot_counts


@dg.asset(
    partitions_def=as_of_partitions,
    deps=[applied_changes],
    group_name="reports",
    kinds={"duckdb"},
    owners=["team:data-platform"],
    description=(
        "The health report (seed 004): per namespace, counts before (the snapshot) and after (the snapshot with "
        "the memories the applied changes touched read again from the store) by tier, kind, zone, superseded, "
        "stale and contradicted; the run's change sets and apply outcome; recommendations. Written to reports/ "
        "as Markdown and JSON."
    ),
)
def health_report(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    wh = warehouse.get()
    as_of = as_of_date(context)
    pointer = wh.read_run_pointer(as_of, _job(context))
    config = engram_config.for_run(wh)
    snapshot = wh.read_table("memories", as_of, columns=["id", *COUNTED_COLUMNS])
    with store.open() as live:
        changes, applied, touched = {}, {}, []
        for klass, change_set_id in pointer.items():
            record = registered_change_set(live, change_set_id)
            changes[klass] = {"change_set_id": change_set_id, "status": record.status, **record.counts}
            if "apply" in record.counts:
                applied[klass] = record.counts["apply"]
                targets = read_changes(record, ["target_kind", "target_id"])
                touched += targets.filter(pc.equal(targets["target_kind"], "memory"))["target_id"].to_pylist()
        report = HealthReport(
            as_of=as_of,
            before=snapshot_counts(snapshot.drop_columns(["id"])),
            after=counts_after_apply(live, snapshot, touched, embedding_dim=config.snapshot.embedding_dim),
            changes=changes,
            applied=applied,
        )
    markdown = report.markdown()
    # One file per run (kept), and the job's latest under a stable name.
    path = wh.reports_dir(as_of) / f"health-{_job(context)}-{context.run.run_id[:8]}.md"
    path.write_text(markdown)
    (wh.reports_dir(as_of) / f"health-{_job(context)}.md").write_text(markdown)
    after = report.totals("after")
    return dg.MaterializeResult(
        metadata={
            "report": dg.MetadataValue.md(markdown),
            "path": dg.MetadataValue.path(str(path)),
            "what_happened": dg.MetadataValue.json(report.what_happened()),
            "total_after": int(after.get("total", 0)),
            "active_after": int(after.get("active", 0)),
            "stale_after": int(after.get("stale", 0)),
        }
    )
