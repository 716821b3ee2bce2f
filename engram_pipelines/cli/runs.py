"""Running the night: `run`, `consolidate`, `preview`, `preview-decay`."""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from engram_pipelines.changes.intents import REVIEWED_CLASSES
from engram_pipelines.cli.common import (
    UserError,
    common_options,
    console,
    emit,
    err_console,
    friendly_errors,
    json_option,
    main,
    opened,
    parse_date,
)
from engram_pipelines.config.model import load_config, store_url, warehouse_path

if TYPE_CHECKING:  # the runner is imported when a job runs: other commands start without Dagster
    from engram_pipelines.orchestration.runner import RunSummary


@main.command()
@click.option("--as-of", "as_of", help="As-of date (default today, UTC).")
@click.option("--job", type=click.Choice(["nightly", "consolidate"]), default="nightly", show_default=True)
@common_options
@json_option
@friendly_errors
def run(
    as_of: str | None,
    job: str,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Run a job in-process for one as-of date and print its summary.

    \b
    Example:
      engram-pipelines run --as-of 2026-11-29 --json
    """
    summary = run_job(job, parse_date(as_of), store_arg, warehouse, config_path)
    emit(summary, as_json)
    if not as_json:
        print_summary(summary)
    if not summary["success"]:
        sys.exit(1)


@main.command()
@click.option("--as-of", "as_of", help="As-of date (default today, UTC).")
@common_options
@json_option
@friendly_errors
def consolidate(
    as_of: str | None, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Propose the review-gated change set (merges, compression, supersede) and write its review report.

    Nothing is merged before `approve` and `apply`.

    \b
    Example:
      engram-pipelines consolidate --store sqlite:///data/engram.db --as-of 2026-11-29
    """
    from engram_pipelines.changes.registry import load_change_set
    from engram_pipelines.reports.review import referenced_ids, review_html, review_markdown
    from engram_pipelines.warehouse.tables import Warehouse

    day = parse_date(as_of)
    summary = run_job("consolidate", day, store_arg, warehouse, config_path)
    if summary["success"]:
        wh = Warehouse(warehouse_path(warehouse)).for_job("consolidate")  # its own tables for the day
        gated = wh.read_run_pointer(day, "consolidate")["gated"]
        clusters = wh.read_table("consolidation", day).to_pylist()
        merge = summary["steps"].get("consolidation", {})
        summary["consolidation"] = {
            "change_set_id": gated,
            "scanned": merge.get("scanned", 0),
            "clusters": merge.get("clusters", 0),
            "merged": merge.get("merged", 0),
            "skipped_concurrent_edit": 0,
            "dry_run": True,
            "per_cluster": clusters,
        }
        with opened(store_arg) as store:
            record, table = load_change_set(store, gated, warehouse_root=warehouse_path(warehouse))
            rows = table.to_pylist()
            memories = store.read_memories(referenced_ids(rows))
        reports = wh.reports_dir(day)
        # Named by the change set they review: a later consolidate with other changes writes its own.
        (reports / f"review-{gated}.md").write_text(
            review_markdown(record, rows, memories, store_url(store_arg))
        )
        page = reports / f"review-{gated}.html"
        if not page.exists():  # the job's change_set step writes it for the sets a page holds
            page.write_text(review_html(record, rows, memories, store_url(store_arg)))
        summary["review_report"] = str(page)
    with opened(store_arg) as store:
        summary["waiting_for_review"] = [
            {"change_set_id": r.change_set_id, "job": r.job, "review_class": r.review_class, "total": r.total}
            for r in waiting_for_review(store.list_change_sets())
            if r.as_of == day.isoformat() and r.job != "consolidate"
        ]
    emit(summary, as_json)
    if not as_json:
        print_summary(summary)
        for pending in summary["waiting_for_review"]:
            console.print(
                f"[yellow]waiting for review[/]: {pending['change_set_id']} ({pending['total']} changes, "
                f"{pending['job']}/{pending['review_class']}): `engram-pipelines changes show "
                f"{pending['change_set_id']}`"
            )
        if "consolidation" in summary:
            c = summary["consolidation"]
            console.print(
                f"[bold]consolidation (dry run)[/]: scanned {c['scanned']}, {c['clusters']} clusters, "
                f"{c['merged']} would merge; review {summary['review_report']}, then "
                f"`engram-pipelines approve {c['change_set_id']}`"
            )
    if not summary["success"]:
        sys.exit(1)


def waiting_for_review(records: list[Any]) -> list[Any]:
    """The proposed, non-empty sets that need a person (gated or held), oldest first."""
    return [r for r in records if r.status == "proposed" and r.review_class in REVIEWED_CLASSES and r.total]


def _known_partition(as_of: dt.date) -> dt.date:
    today = dt.datetime.now(dt.UTC).date()
    if as_of > today:
        raise UserError(f"--as-of {as_of} is in the future: daily partitions run up to today ({today}, UTC)")
    return as_of


def run_job(
    job: str, as_of: dt.date, store_arg: str | None, warehouse: str | None, config_path: str | None
) -> RunSummary:
    from engram_pipelines.orchestration.runner import execute_job

    _known_partition(as_of)
    with opened(store_arg):  # a store behind the schema fails here, naming `init`
        pass
    return execute_job(
        job,
        as_of,
        store=store_url(store_arg),
        warehouse=str(warehouse_path(warehouse)),
        config_path=config_path,
    )


def print_summary(summary: RunSummary) -> None:
    state = "[green]succeeded[/]" if summary["success"] else "[red]failed[/]"
    console.print(f"[bold]{summary['job']}[/] for {summary['as_of']} {state} in {summary['seconds']:.1f}s")
    table = Table(show_header=True, header_style="bold")
    table.add_column("step")
    table.add_column("result")
    held: list[dict[str, Any]] = []
    words: list[str] = []
    for step, info in summary["steps"].items():
        held += info.get("held_for_review") or []
        words += info.get("what_happened") or []
        listed = {k: v for k, v in info.items() if k not in ("held_for_review", "what_happened")}
        table.add_row(step, ", ".join(f"{k}={v}" for k, v in listed.items()))
    console.print(table)
    if words:
        console.print("[bold]tonight[/]: " + "; ".join(w for w in words if not w.endswith(": 0")))
    held_set = summary["steps"].get("change_set", {}).get("held_change_set", "the held set")
    for entry in held:
        console.print(f"[yellow]volume guard:[/] {entry['message']} in {held_set}")
    warnings = summary.get("warnings", {})
    for check, passed in summary.get("checks", {}).items():
        mark = (
            "[green]passed[/]" if passed else "[yellow]warning[/]" if check in warnings else "[red]FAILED[/]"
        )
        console.print(f"  check {check}: {mark}")
    if summary.get("report_path"):
        console.print(f"health report: {summary['report_path']}")
    if summary.get("error"):
        err_console.print(f"[red]{summary['error']}[/]")


@main.command()
@click.option("--as-of", "as_of", help="As-of date (default today, UTC).")
@common_options
@json_option
@friendly_errors
def preview(
    as_of: str | None, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """What tonight's nightly would change, per analysis, namespace and review class. Writes nothing.

    The snapshot and every analysis run into a scratch warehouse that is removed afterwards; no change set is
    stored and nothing is applied (the warehouse's own partitions are left as they are).

    \b
    Example:
      engram-pipelines preview --as-of 2026-11-29
    """
    from engram_pipelines.reports.preview import night_preview
    from engram_pipelines.warehouse.tables import Warehouse

    day = parse_date(as_of)
    with tempfile.TemporaryDirectory(prefix="engram-preview-") as scratch:
        summary = run_job("preview", day, store_arg, scratch, config_path)
        if not summary["success"]:
            raise UserError(f"preview failed: {summary.get('error', 'unknown error')}")
        result = night_preview(Warehouse(Path(scratch)).for_job("preview"), day, load_config(config_path))
    emit(result.as_dict(), as_json)
    if not as_json:
        console.print(
            f"[bold]tonight ({day})[/] would propose, per analysis and review class (nothing written):"
        )
        table = Table("analysis", "auto", "gated", "held")
        for analysis, classes in result.by_analysis().items():
            table.add_row(analysis, *(f"{classes.get(k, 0):,}" for k in ("auto", "gated", "held")))
        console.print(table)
        for entry in result.held:
            console.print(f"[yellow]volume guard:[/] {entry['message']}")
        console.print("per namespace and op: --json")


@main.command(name="preview-decay")
@click.option(
    "--at",
    "at",
    required=True,
    help="The date to project scores to (YYYY-MM-DD; the as-of day itself: tonight).",
)
@click.option("--as-of", "as_of", help="The snapshot to start from (default today; taken if missing).")
@click.option(
    "--out", type=click.Path(file_okay=False, path_type=Path), help="Write preview.md and the chart here."
)
@common_options
@json_option
@friendly_errors
def preview_decay_cmd(
    at: str,
    as_of: str | None,
    out: Path | None,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Project every decay score to a future date: what would go stale, archive or purge. Writes nothing.

    \b
    Example:
      engram-pipelines preview-decay --at 2027-01-01 --out preview/
    """
    from engram_pipelines.core.progress import BarProgress
    from engram_pipelines.core.timestamps import end_of_day
    from engram_pipelines.ingest.snapshot import take_snapshot
    from engram_pipelines.reports.decay_preview import preview_decay, score_distribution_png
    from engram_pipelines.warehouse.tables import Warehouse

    config = load_config(config_path)
    day, target = parse_date(as_of), parse_date(at, "--at")
    wh = Warehouse(warehouse_path(warehouse))
    if not wh.has_table("memories", day):
        with opened(store_arg) as store:
            take_snapshot(
                store,
                wh,
                day,
                embedding_dim=config.snapshot.embedding_dim,
                progress=BarProgress(),
                incremental=config.snapshot.incremental,
                full_every_days=config.snapshot.full_every_days,
            )
    preview = preview_decay(wh.read_memories(day), config, end_of_day(day), end_of_day(target))
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "preview.md").write_text(preview.markdown())
        (out / "score-distribution.png").write_bytes(
            score_distribution_png(preview, config.decay.stale_threshold)
        )
    emit(preview.as_dict(), as_json)
    if not as_json:
        totals = preview.totals()
        console.print(
            f"[bold]decay preview[/] {day} -> {target}: [yellow]{totals['newly_stale']} newly stale[/], "
            f"{totals['would_archive']} would archive, {totals['would_queue_for_purge']} would queue for purge, "
            f"[red]{totals['would_purge']} would purge[/]"
        )
        table = Table("namespace", "rows", "newly stale", "archive", "queue", "purge")
        for row in preview.per_namespace:
            table.add_row(
                row["namespace"],
                *(
                    str(row[k])
                    for k in ("rows", "newly_stale", "would_archive", "would_queue_for_purge", "would_purge")
                ),
            )
        console.print(table)
        if out is not None:
            console.print(f"report and chart written to {out}")
