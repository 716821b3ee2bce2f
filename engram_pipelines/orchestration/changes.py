"""Changes: every analysis's proposals composed into stored change sets, and the apply of the auto class."""

import dagster as dg
import pyarrow as pa

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.compose import CHANGE_SCHEMA
from engram_pipelines.changes.invariants import (
    crosses_namespace,
    destructive_on_pinned,
    several_writes_per_row,
)
from engram_pipelines.changes.propose import propose_change_sets
from engram_pipelines.changes.registry import (
    find_change_set,
    load_change_set,
    read_head,
    registered_change_set,
)
from engram_pipelines.changes.revert import approve_change_set
from engram_pipelines.core import records
from engram_pipelines.core.progress import LogProgress
from engram_pipelines.core.registry import ANALYSES, NAMES
from engram_pipelines.orchestration.metadata import (
    Lineage,
    column_lineage,
    column_schema,
    sample_markdown,
    standard,
)
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource
from engram_pipelines.reports.plots import changes_by_op, inline_bars, markdown_image, top_keys
from engram_pipelines.reports.review import write_review_page
from engram_pipelines.store import ChangeSetRecord

# The analyses whose proposals the change set gathers; each is an asset of the same name.
ANALYSIS_SOURCES: list[str] = list(NAMES)

# Each analysis's proposals: the columns naming the rows they target, and those holding the values they write.
_PROPOSAL_TARGETS = {a.name: list(a.targets) for a in ANALYSES}
_PROPOSAL_VALUES = {a.name: list(a.values) for a in ANALYSES}

# A patch is the difference between the row as the snapshot has it and the row once its intents are folded in;
# inserted rows (semantic nodes, summaries) copy their sources' content and importance.
_PATCHED = [*records.WRITABLE_COLUMNS, "content", "importance"]

_CHANGE_SET_LINEAGE: Lineage = {
    "target_id": _PROPOSAL_TARGETS,
    "patch": {"memory_snapshot": _PATCHED, **_PROPOSAL_VALUES},
    # The CAS guards: the row as the decision saw it.
    "expected_version": {"memory_snapshot": ["version"]},
    "guard_access_count": {"memory_snapshot": ["access_count"]},
    "guard_last_accessed_at": {"memory_snapshot": ["last_accessed_at"]},
    "guard_pinned": {"memory_snapshot": ["pinned"]},
    "guard_content_sha": {"memory_snapshot": ["content"]},
}


def _job(context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext) -> str:
    name = context.run.job_name
    return "nightly" if name.startswith("__") else name


@dg.asset(
    partitions_def=as_of_partitions,
    deps=["memory_snapshot", *ANALYSIS_SOURCES],
    group_name="changes",
    kinds={"parquet", "duckdb"},
    owners=["team:data-platform"],
    description=(
        "The analyses' proposals composed into change sets: one CAS-guarded write per row, only transitions, "
        "content-addressed (the same snapshot and config give the same change set). Three sets per run: "
        "`auto` (applied by the nightly job), `gated` (merges, compression, supersede: applied only after "
        "`engram-pipelines approve`) and `held` (what the volume guard held back: a night that would hide more "
        "than review.max_hidden_fraction of a namespace). The analysis switches (config `analyses`) apply here. "
        "Stored as Parquet under change_sets/ and registered in the store."
    ),
)
def change_set(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    with store.open() as live:
        sets, held = propose_change_sets(
            live,
            wh,
            as_of,
            job=_job(context),
            sources=ANALYSIS_SOURCES,
            config=config,
        )
        history = live.list_change_sets()
        # What waits for a person, as a page to read before deciding (job `review` in the launchpad).
        pages = {
            klass: page
            for klass in ("gated", "held")
            if (page := write_review_page(live, sets[klass].record, wh.reports_dir(as_of), store.url))
            is not None
        }
    registered = {klass: proposed.record for klass, proposed in sets.items()}
    wh.write_run_pointer(
        as_of, _job(context), {klass: rec.change_set_id for klass, rec in registered.items()}
    )
    for klass, record in registered.items():
        context.log.info(
            f"{klass} change set {record.change_set_id}: {record.total} changes {record.counts['by_op']}"
        )
    if held:
        # One event, a line per namespace: an event each was 1.4 s of a 1M night that held 396 namespaces.
        context.log.warning(
            f"volume guard: {len(held)} namespace(s) held for review in {registered['held'].change_set_id}:\n"
            + "\n".join(entry["message"] for entry in held)
        )
    # The sets are in their files, not in memory (`changes.spool`): the page shows their first rows.
    head = pa.concat_tables([read_head(rec, _SAMPLED, _SAMPLE_ROWS) for rec in registered.values()]).slice(
        0, _SAMPLE_ROWS
    )
    by_namespace: dict[str, dict[str, int]] = {}
    for proposed in sets.values():
        for namespace, ops in proposed.by_namespace_op.items():
            merged = by_namespace.setdefault(namespace, {})
            for op, n in ops.items():
                merged[op] = merged.get(op, 0) + n
    return dg.MaterializeResult(
        metadata={
            **standard(CHANGE_SCHEMA, sum(rec.total for rec in registered.values())),
            "dagster/column_lineage": column_lineage(_CHANGE_SET_LINEAGE),
            "config_fingerprint": config.fingerprint(),
            **{f"{klass}_change_set": rec.change_set_id for klass, rec in registered.items()},
            **{f"{klass}_changes": rec.total for klass, rec in registered.items()},
            "held_for_review": dg.MetadataValue.json(held),
            **{f"review_page_{klass}": dg.MetadataValue.path(str(page)) for klass, page in pages.items()},
            "how_to_decide": dg.MetadataValue.md(_how_to_decide(registered)),
            "by_op": dg.MetadataValue.json({k: rec.counts["by_op"] for k, rec in registered.items()}),
            "sample": sample_markdown(head, _SAMPLED),
            "changes_by_op_inline": dg.MetadataValue.md(inline_bars(_total_by_op(registered))),
            "changes_by_namespace": dg.MetadataValue.md(
                markdown_image(
                    changes_by_op(top_keys(by_namespace, 20), "Changes by op, top namespaces"),
                    "by namespace",
                )
            ),
            "changes_over_time": dg.MetadataValue.md(
                markdown_image(
                    changes_by_op(_ops_over_time(history), "Changes by op, per as-of date"), "over time"
                )
            ),
        }
    )


_SAMPLED = ["review_class", "namespace", "target_id", "op", "reason"]
_SAMPLE_ROWS = 10


def _total_by_op(records: dict[str, ChangeSetRecord]) -> dict[str, int]:
    """Changes per op over the night's sets, largest first."""
    total: dict[str, int] = {}
    for record in records.values():
        for op, n in record.counts.get("by_op", {}).items():
            total[op] = total.get(op, 0) + int(n)
    return dict(sorted(total.items(), key=lambda kv: (-kv[1], kv[0])))


def _how_to_decide(records: dict[str, ChangeSetRecord]) -> str:
    waiting = [
        (f"{klass} ({rec.total} changes)", rec.change_set_id)
        for klass, rec in records.items()
        if klass != "auto" and rec.total
    ]
    # Held changes that wait in an earlier night's set (changes/waiting.py) wait for the same decision.
    waiting += [
        (f"held on an earlier night ({n} of its changes still wait)", change_set_id)
        for change_set_id, n in records["held"].counts.get("waiting_in", {}).items()
    ]
    if not waiting:
        return "Nothing waits for review tonight."
    lines = ["Read the review page (`review_page_*`), then launch the job **review** with this config:", ""]
    for label, change_set_id in waiting:
        lines += [
            f"{label}:",
            "```yaml",
            f"ops:\n  review_change_set:\n    config:\n      change_set_id: {change_set_id}",
            "      action: approve_and_apply\n      actor: your-name",
            "```",
        ]
    return "\n".join(lines)


def _ops_over_time(records) -> dict[str, dict[str, int]]:
    """Every stored change set's ops per as-of date, from the store's change_sets registry."""
    out: dict[str, dict[str, int]] = {}
    for record in records:
        for op, n in record.counts.get("by_op", {}).items():
            out.setdefault(record.as_of, {})[op] = out.setdefault(record.as_of, {}).get(op, 0) + int(n)
    return out


# What the invariant checks read of a change set (not its reasons, evidence or intents: most of its bytes).
_CHECKED = ["change_id", "namespace", "target_kind", "target_id", "op", "ops", "patch", "destructive"]


def _tables(context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource):
    wh = warehouse.get()
    as_of = as_of_date(context)
    pointer = wh.read_run_pointer(as_of, _job(context))
    with store.open() as live:
        changes = [
            load_change_set(live, change_set_id, _CHECKED, warehouse_root=wh.root)[1]
            for change_set_id in pointer.values()
        ]
    return changes, wh.read_table("memories", as_of, columns=["id", "namespace", "pinned", "kind"])


def _result(violations: list[dict[str, str]], what: str) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        passed=not violations,
        metadata={"violations": len(violations), "samples": dg.MetadataValue.json(violations[:20])},
        description=f"{len(violations)} {what}" if violations else f"no {what}",
    )


# The live store's memory columns an apply may write. A write is the change's patch, or, when the row moved on
# since the snapshot, its intents folded again into the fresh row.
_WRITTEN = pa.schema([f for f in records.MEMORY_FIELDS if f.name in records.WRITABLE_COLUMNS])
_APPLIED_LINEAGE: Lineage = {name: {"change_set": ["patch", "intents"]} for name in _WRITTEN.names}


@dg.asset(
    partitions_def=as_of_partitions,
    deps=[change_set],
    group_name="apply",
    kinds={"sqlite", "postgres"},
    owners=["team:data-platform"],
    description=(
        "The `auto` change set applied to the live store: batched transactions, each write guarded by the "
        "row's version and the access/pin evidence it was decided on; a miss is re-read, re-checked and "
        "retried once, then skipped (`skipped_concurrent_edit`). Every write leaves an audit pre-image and a "
        "ledger row, so a re-run is a no-op and `engram-pipelines revert` undoes it. One apply runs at a time "
        "per store, whoever starts it: the store holds an apply lock (an advisory lock on PostgreSQL, a file "
        "lock beside the SQLite file), released if the holder dies. Gated sets are applied here only when "
        "review.auto_approve_gated is set. Columns: those of the live store's memories that an apply writes."
    ),
)
def applied_changes(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    wh = warehouse.get()
    pointer = wh.read_run_pointer(as_of_date(context), _job(context))
    results = {}
    with store.open() as live:
        for klass in ("auto", "gated", "held"):
            change_set_id = pointer[klass]
            if klass != "auto":
                record = find_change_set(live, change_set_id, wh.root)
                # What the volume guard held waits for a person, whatever review.auto_approve_gated says.
                if klass == "held" or not config.review.auto_approve_gated or record.status != "proposed":
                    context.log.info(
                        f"gated change set {change_set_id} waits for review ({record.total} changes)"
                    )
                    continue
                approve_change_set(
                    live, change_set_id, actor="config:review.auto_approve_gated", warehouse_root=wh.root
                )
            result = apply_change_set(
                live,
                change_set_id,
                actor=f"dagster:{context.run.run_id[:8]}",
                batch_size=config.apply.batch_size,
                progress=LogProgress(context.log),
                warehouse_root=wh.root,
            )
            results[klass] = result.as_dict()
            context.log.info(f"applied {change_set_id}: {result.as_dict()}")
    auto = results["auto"]
    return dg.MaterializeResult(
        metadata={
            "dagster/column_schema": column_schema(_WRITTEN),
            "dagster/column_lineage": column_lineage(_APPLIED_LINEAGE),
            "change_set": auto["change_set_id"],
            "total": auto["total"],
            "applied": auto["applied"],
            "skipped_concurrent_edit": auto["skipped_concurrent_edit"],
            "ineligible": auto["ineligible"],
            "accounted": auto["accounted"],
            "changes_per_second": auto["changes_per_second"] or 0.0,
            "results": dg.MetadataValue.json(results),
        }
    )


def asset_checks(partitions_def: dg.PartitionsDefinition) -> list[dg.AssetChecksDefinition]:
    """The change sets' and the apply's checks, on the code location's partitions (`build_definitions`): a
    check's partitions are fixed when it is decorated, so they are made here rather than at import."""

    @dg.asset_check(
        asset=change_set,
        blocking=True,
        partitions_def=partitions_def,
        description="No change hides or deletes a pinned row or a block.",
    )
    def no_destructive_op_on_pinned(
        context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        changes, memories = _tables(context, store, warehouse)
        return _result(
            [v for t in changes for v in destructive_on_pinned(t, memories)], "destructive ops on pinned rows"
        )

    @dg.asset_check(
        asset=change_set,
        blocking=True,
        partitions_def=partitions_def,
        description="No change, link or reference crosses a namespace.",
    )
    def nothing_across_namespaces(
        context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        changes, memories = _tables(context, store, warehouse)
        return _result(
            [v for t in changes for v in crosses_namespace(t, memories)], "cross-namespace references"
        )

    @dg.asset_check(
        asset=change_set,
        blocking=True,
        partitions_def=partitions_def,
        description="Each row is written at most once per change set.",
    )
    def one_write_per_row(
        context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        changes, _ = _tables(context, store, warehouse)
        return _result([v for t in changes for v in several_writes_per_row(t)], "rows written more than once")

    @dg.asset_check(
        asset=applied_changes,
        blocking=True,
        partitions_def=partitions_def,
        description="applied + skipped_concurrent_edit + ineligible = total, from the ledger.",
    )
    def apply_accounting_closes(
        context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        wh = warehouse.get()
        pointer = wh.read_run_pointer(as_of_date(context), _job(context))
        with store.open() as live:
            record, table = load_change_set(live, pointer["auto"], ["change_id"], warehouse_root=wh.root)
            ledger = live.ledger(record.change_set_id)
        outcomes: dict[str, int] = {}
        for change_id in table.column("change_id").to_pylist():
            outcome = ledger.get(change_id, ("missing", None))[0]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
        closed = (
            sum(outcomes.get(k, 0) for k in ("applied", "skipped_concurrent_edit", "ineligible"))
            == table.num_rows
        )
        return dg.AssetCheckResult(
            passed=closed,
            metadata={"total": table.num_rows, **{k: v for k, v in outcomes.items()}},
            description=f"outcomes {outcomes} for {table.num_rows} changes",
        )

    @dg.asset_check(
        asset=change_set,
        blocking=False,
        partitions_def=partitions_def,
        description=(
            "The volume guard: warns when a namespace's auto changes would have hidden more than "
            "review.max_hidden_fraction of its visible memories (or the night passed review.max_auto_changes) "
            "and were moved to the night's `held` change set, which waits for review."
        ),
    )
    def volume_guard(
        context: dg.AssetCheckExecutionContext, store: StoreResource, warehouse: WarehouseResource
    ) -> dg.AssetCheckResult:
        pointer = warehouse.get().read_run_pointer(as_of_date(context), _job(context))
        with store.open() as live:
            record = registered_change_set(live, pointer["held"])
        held = record.counts.get("held_for_review", [])
        return dg.AssetCheckResult(
            passed=not held,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "held_for_review": dg.MetadataValue.json(held),
                "held_change_set": record.change_set_id,
            },
            description="; ".join(h["message"] for h in held) if held else "nothing held for review",
        )

    return [
        no_destructive_op_on_pinned,
        nothing_across_namespaces,
        one_write_per_row,
        apply_accounting_closes,
        volume_guard,
    ]
