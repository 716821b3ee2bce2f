"""The `engram-pipelines` command line.

Every command takes `--store URL` (else ENGRAM_STORE_URL, else sqlite:///data/engram.db), most take
`--warehouse PATH` and `--config FILE`, and those whose output a machine reads take `--json`.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Column, Table

from engram_pipelines import api
from engram_pipelines.changes.intents import REVIEWED_CLASSES
from engram_pipelines.config.model import ConfigError, load_config, store_url, warehouse_path
from engram_pipelines.store import Store, StoreError, open_store, redact

console = Console(stderr=False, highlight=False)
err_console = Console(stderr=True, highlight=False)


class UserError(click.ClickException):
    """An error the user can fix; printed without a traceback."""

    def show(self, file: Any = None) -> None:
        err_console.print(f"[bold red]error:[/] {self.format_message()}", soft_wrap=True)


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn the library's known errors into one red line that says what to do."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from engram_pipelines.changes.apply import ChangeSetStateError, ReviewRequired
        from engram_pipelines.changes.operator import OperatorError
        from engram_pipelines.changes.registry import ChangeSetNotFound
        from engram_pipelines.changes.revert import RestoreError
        from engram_pipelines.warehouse.tables import WarehouseBusy

        try:
            try:
                return fn(*args, **kwargs)
            except (
                ConfigError,
                StoreError,
                ChangeSetNotFound,
                ReviewRequired,
                ChangeSetStateError,
                RestoreError,
                OperatorError,
                WarehouseBusy,
                FileNotFoundError,
                ValueError,
            ) as exc:
                raise UserError(str(exc)) from None
        except UserError as exc:
            if kwargs.get("as_json"):  # a machine reads stdout: the error is JSON too
                click.echo(json.dumps({"error": exc.format_message()}))
                sys.exit(exc.exit_code)
            raise

    return wrapper


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn = click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        help="YAML config file (default ENGRAM_CONFIG, else ./engram.yaml when present).",
    )(fn)
    fn = click.option("--warehouse", help="Warehouse root (default ENGRAM_WAREHOUSE, else data/warehouse).")(
        fn
    )
    fn = click.option(
        "--store", "store_arg", help="Store URL (default ENGRAM_STORE_URL, else sqlite:///data/engram.db)."
    )(fn)
    return fn


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")(fn)


@contextmanager
def opened(store_arg: str | None, *, migrate: bool = False) -> Iterator[Store]:
    store = open_store(store_url(store_arg), migrate=migrate)
    try:
        yield store
    finally:
        store.close()


def emit(data: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


def parse_date(value: str | None, option: str = "--as-of") -> dt.date:
    if value is None:
        return dt.datetime.now(dt.UTC).date()
    try:
        return dt.date.fromisoformat(value)
    except ValueError:
        raise UserError(f"{option} {value!r} is not a date (use YYYY-MM-DD)") from None


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog="""\b
Examples:
  engram-pipelines demo                       load the demo corpus and run the nightly job
  engram-pipelines import corpus.jsonl --namespace agent:coder
  engram-pipelines run --as-of 2026-11-29     run the nightly job for a date
  engram-pipelines changes list               the stored change sets
  engram-pipelines changes show ID --html review.html
  engram-pipelines approve ID && engram-pipelines apply ID
  engram-pipelines explain MEMORY_ID
""",
)
@click.version_option(package_name="engram-pipelines")
def main() -> None:
    """Maintain an AI-agent memory store: snapshot, analyse, review and apply CAS-guarded change sets."""


@main.command()
@common_options
@json_option
@friendly_errors
def init(store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool) -> None:
    """Create or migrate the store's schema (idempotent).

    \b
    Example:
      engram-pipelines init --store postgresql://engram@127.0.0.1:5432/engram
    """
    load_config(config_path)
    with opened(store_arg, migrate=True) as store:
        version = store.schema_version()
    emit({"store": redact(store_url(store_arg)), "schema_version": version}, as_json)
    if not as_json:
        console.print(f"[green]store ready[/] {redact(store_url(store_arg))} (schema version {version})")


@main.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--namespace", help="Namespace for lines that name none.")
@click.option(
    "--rejects",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where bad lines go (default FILE with the suffix .rejects.jsonl).",
)
@click.option(
    "--format",
    "source_format",
    type=click.Choice(["engram", "mem0"]),
    default="engram",
    show_default=True,
    help="mem0: lines are mem0 memories (memory, user_id/agent_id/run_id, hash, metadata, ...).",
)
@common_options
@json_option
@friendly_errors
def import_(
    file: Path,
    namespace: str | None,
    rejects: Path | None,
    source_format: str,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Import a JSON Lines corpus (one memory per line); bad lines are reported and kept aside.

    \b
    Re-importing the same file changes nothing (ids are given or derived from the content).
    Examples:
      engram-pipelines import history.jsonl --namespace agent:coder --rejects history.rejects.jsonl
      engram-pipelines import mem0-export.jsonl --format mem0
    """
    from engram_pipelines.core.progress import BarProgress
    from engram_pipelines.ingest.load import import_jsonl

    config = load_config(config_path)
    rejects = rejects or file.with_suffix(".rejects.jsonl")
    with opened(store_arg, migrate=True) as store:
        summary = import_jsonl(
            store,
            file,
            default_namespace=namespace,
            embedding_dim=config.snapshot.embedding_dim,
            rejects_path=rejects,
            progress=BarProgress(),
            source_format=source_format,
        )
    emit(summary.as_dict(), as_json)
    if not as_json:
        console.print(
            f"[green]imported[/] {summary.imported} new memories from {summary.lines_read} lines "
            f"({summary.already_present} already present, [red]{summary.rejected_lines} rejected[/])"
        )
        for reject in summary.reject_samples:
            err_console.print(f"  line {reject.line}: [bold]{reject.field}[/]: {reject.reason}")
        if summary.rejected_lines:
            console.print(f"rejected lines written to {rejects}")
    if summary.rejected_lines and not summary.imported and not summary.already_present:
        sys.exit(1)  # every line was bad: a script must not take this for a successful import


@main.command()
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Output file (default stdout).")
@click.option(
    "--format",
    "target_format",
    type=click.Choice(["engram", "mem0"]),
    default="engram",
    show_default=True,
    help="mem0: the memories recall shows, as mem0's Memory.get_all() items.",
)
@common_options
@json_option
@friendly_errors
def export(
    out: Path | None,
    target_format: str,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Export every memory as JSON Lines in the import format, lifecycle state included (a backup).

    \b
    `import` of the file into an empty store brings every row back as it was (archived, purge-queued, stale,
    superseded), except `version`, which restarts at 1. Links, change sets and the audit log are not in it.
    Example:
      engram-pipelines export --out backup.jsonl
    """
    from engram_pipelines.ingest.export import export_jsonl

    config = load_config(config_path)
    dim = config.snapshot.embedding_dim
    with opened(store_arg) as store:  # opened first: a missing store fails before --out is created
        if out is None:
            count = export_jsonl(store, sys.stdout, embedding_dim=dim, target_format=target_format)
        else:
            # UTF-8 whatever the locale: the import reads UTF-8, and the export keeps non-ASCII text as is.
            with out.open("w", encoding="utf-8") as handle:
                count = export_jsonl(store, handle, embedding_dim=dim, target_format=target_format)
    if out is not None:
        emit({"exported": count, "path": str(out)}, as_json)
        if not as_json:
            console.print(f"[green]exported[/] {count} memories to {out}")


@main.command()
@click.option("--size", default=3_000, show_default=True, help="Memories to generate (1k to 1M).")
@click.option("--seed", default=7, show_default=True)
@click.option("--as-of", "as_of", help="As-of date of the corpus and the run (default today, UTC).")
@click.option("--reset", is_flag=True, help="Delete the store and warehouse first.")
@common_options
@json_option
@friendly_errors
def demo(
    size: int,
    seed: int,
    as_of: str | None,
    reset: bool,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Load the demo corpus into the store (when empty) and run the nightly job on it.

    \b
    Example:
      engram-pipelines demo --size 10000 --reset
    """
    from engram_pipelines.demo.loader import load_demo, reset_store

    day = parse_date(as_of)
    url = store_url(store_arg)
    if reset:
        reset_store(url, warehouse_path(warehouse))
    # Keep the demo's run history beside its warehouse so `make ui` shows it.
    home = warehouse_path(warehouse).resolve().parent / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    settings = home / "dagster.yaml"
    if not settings.exists():  # without one Dagster prints a notice on every run; telemetry stays local
        settings.write_text("telemetry:\n  enabled: false\n")
    os.environ.setdefault("DAGSTER_HOME", str(home))
    with opened(store_arg, migrate=True) as store:
        loaded = load_demo(store, size=size, seed=seed, as_of=day)
    if not as_json:
        if loaded:
            console.print(
                f"[green]demo corpus[/] {loaded['memories']} memories, {loaded['links']} links loaded"
            )
        else:
            console.print("store already holds memories: demo corpus not loaded again (use --reset)")
    summary = run_job("nightly", day, store_arg, warehouse, config_path)
    summary["demo"] = loaded
    emit(summary, as_json)
    if not as_json:
        print_summary(summary)


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
) -> dict[str, Any]:
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


def print_summary(summary: dict[str, Any]) -> None:
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
            take_snapshot(store, wh, day, embedding_dim=config.snapshot.embedding_dim, progress=BarProgress())
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


# -- change sets ------------------------------------------------------------------------------------------
@main.group()
def changes() -> None:
    """List and inspect stored change sets."""


@changes.command(name="list")
@click.option("--all", "show_all", is_flag=True, help="Also the empty change sets.")
@common_options
@json_option
@friendly_errors
def changes_list(
    show_all: bool, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Every change set with its status and counts: first those that wait for review, then the rest (empty
    sets only with --all)."""
    with opened(store_arg) as store:
        records = store.list_change_sets()
    waiting = waiting_for_review(records)
    records = waiting + [r for r in records if r not in waiting and (show_all or r.total)]
    rows = [
        {
            "change_set_id": r.change_set_id,
            "status": r.status,
            "review_class": r.review_class,
            "job": r.job,
            "as_of": r.as_of,
            "total": r.total,
            "by_op": r.counts.get("by_op", {}),
            "apply": r.counts.get("apply"),
        }
        for r in records
    ]
    emit(rows, as_json)
    if not as_json:
        # The id is what people copy into approve/apply/revert: never cut or wrapped, whatever the width.
        change_set = Column(
            "change set", no_wrap=True, min_width=max((len(r["change_set_id"]) for r in rows), default=10)
        )
        table = Table(change_set, "status", "class", "as of", "changes", "by op")
        for r in rows:
            colour = {"applied": "green", "proposed": "yellow", "approved": "cyan", "reverted": "magenta"}[
                r["status"]
            ]
            table.add_row(
                r["change_set_id"],
                f"[{colour}]{r['status']}[/]",
                r["review_class"],
                r["as_of"],
                str(r["total"]),
                ", ".join(f"{k} {v}" for k, v in r["by_op"].items()),
            )
        if waiting:
            console.print(
                f"[yellow]{len(waiting)} waiting for review[/] (listed first): "
                "`changes show ID`, then `approve ID` and `apply ID`"
            )
        console.print(table)


@changes.command(name="show")
@click.argument("change_set_id")
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a Markdown review report.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a self-contained HTML review page.",
)
@click.option("--limit", default=50, show_default=True, help="Rows shown in the table.")
@common_options
@json_option
@friendly_errors
def changes_show(
    change_set_id: str,
    markdown_path: Path | None,
    html_path: Path | None,
    limit: int,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """One change set: its changes as a table, JSON, or a review report grouped by cluster.

    \b
    Examples:
      engram-pipelines changes show ID
      engram-pipelines changes show ID --html review.html
    """
    from engram_pipelines.changes.registry import load_change_set
    from engram_pipelines.reports.review import referenced_ids, review_html, review_markdown

    with opened(store_arg) as store:
        record, table = load_change_set(store, change_set_id, warehouse_root=warehouse_path(warehouse))
        ledger = store.ledger(change_set_id)
        rows = table.to_pylist()
        memories = store.read_memories(referenced_ids(rows)) if markdown_path or html_path else {}
    for row in rows:
        row["outcome"] = ledger.get(row["change_id"], ("pending", None))[0]
    if markdown_path:
        markdown_path.write_text(review_markdown(record, rows, memories, store_url(store_arg)))
        console.print(f"review report written to {markdown_path}")
    if html_path:
        html_path.write_text(review_html(record, rows, memories, store_url(store_arg)))
        console.print(f"review page written to {html_path}")
    if as_json:
        emit({"change_set": record.__dict__, "changes": rows}, True)
        return
    console.print(
        f"[bold]{record.change_set_id}[/] {record.status} ({record.review_class}), {record.total} changes, "
        f"as of {record.as_of}"
    )
    table_out = Table(Column("target", no_wrap=True, min_width=36), "namespace", "ops", "outcome", "reason")
    for row in rows[:limit]:
        table_out.add_row(
            row["target_id"], row["namespace"], "+".join(row["ops"]), row["outcome"], row["reason"][:80]
        )
    console.print(table_out)
    if len(rows) > limit:
        console.print(f"... {len(rows) - limit} more (--limit, --json)")


@main.command()
@click.argument("change_set_id")
@click.option("--actor", default=lambda: os.environ.get("USER", "operator"), help="Who approves (audited).")
@common_options
@json_option
@friendly_errors
def approve(
    change_set_id: str,
    actor: str,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Approve a review-gated change set so that `apply` may write it."""
    with opened(store_arg) as store:
        api.approve(store, change_set_id, actor=actor, warehouse=warehouse_path(warehouse))
    emit({"change_set_id": change_set_id, "status": "approved", "by": actor}, as_json)
    if not as_json:
        console.print(
            f"[cyan]approved[/] {change_set_id}; apply it with `engram-pipelines apply {change_set_id}`"
        )


@main.command(name="apply")
@click.argument("change_set_id")
@common_options
@json_option
@friendly_errors
def apply_(
    change_set_id: str, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Apply a change set (CAS-guarded, audited; re-running is a no-op; a crashed run resumes)."""
    from engram_pipelines.core.progress import BarProgress

    config = load_config(config_path)
    with opened(store_arg) as store:
        result = api.apply(
            store,
            change_set_id,
            actor=os.environ.get("USER", "cli"),
            batch_size=config.apply.batch_size,
            progress=BarProgress(),
            warehouse=warehouse_path(warehouse),
        )
    emit(result.as_dict(), as_json)
    if not as_json:
        console.print(
            f"[green]{result.applied} applied[/], [yellow]{result.skipped_concurrent_edit} skipped "
            f"(concurrent edit)[/], {result.ineligible} ineligible of {result.total} "
            f"({'accounted' if result.accounted else '[red]NOT accounted[/]'})"
        )


@main.command()
@click.argument("change_set_id", required=False)
@click.option("--night", help="Revert every applied set of this as-of date (YYYY-MM-DD) as one.")
@click.option(
    "--job", type=click.Choice(["nightly", "consolidate"]), help="With --night: only this job's sets."
)
@common_options
@json_option
@friendly_errors
def revert(
    change_set_id: str | None,
    night: str | None,
    job: str | None,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Undo an applied change set (or a whole night) from its audit pre-images; rows and links changed since
    are skipped and listed.

    \b
    Examples:
      engram-pipelines revert 2026-11-29-nightly-auto-3f2a9c0b1d
      engram-pipelines revert --night 2026-11-29
    """
    if (change_set_id is None) == (night is None):
        raise UserError("name one change set ID, or --night DATE for every applied set of that day")
    actor = os.environ.get("USER", "cli")
    with opened(store_arg) as store:
        if night is not None:
            result = api.revert_night(store, parse_date(night, "--night").isoformat(), job=job, actor=actor)
        else:
            assert change_set_id is not None  # one of the two, checked above
            result = api.revert(store, change_set_id, actor=actor)
    emit(result.as_dict(), as_json)
    if not as_json:
        console.print(f"[magenta]reverted[/] {result.reverted} changes of {result.change_set_id}")
        if result.skipped_edited_since:
            console.print(
                f"[yellow]skipped {len(result.skipped_edited_since)} rows or links changed since:[/] "
                + ", ".join(result.skipped_edited_since[:20])
            )


@main.command()
@click.argument("memory_id")
@common_options
@json_option
@friendly_errors
def restore(
    memory_id: str, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Bring a purged memory back under its original id from its audit pre-image."""
    with opened(store_arg) as store:
        result = api.restore(store, memory_id, actor=os.environ.get("USER", "cli"))
    emit(result, as_json)
    if not as_json:
        console.print(f"[green]restored[/] {memory_id}")


@main.command()
@click.argument("memory_id")
@common_options
@json_option
@friendly_errors
def explain(
    memory_id: str, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Why a memory is in the state it is: its row, every change and audit row that touched it."""
    from engram_pipelines.reports.explain import render_explanation

    with opened(store_arg) as store:
        story = api.explain(store, memory_id, warehouse=warehouse_path(warehouse))
    if not story["exists"] and not story["changes"] and not story["audit"]:
        raise UserError(
            f"no memory {memory_id} in this store, and no change or audit row ever named it (check the id and --store)"
        )
    emit(story, as_json)
    if not as_json:
        console.print(render_explanation(story))


def _adapter_group(
    name: str, summary: str, examples: str, build: Callable[[str, str, str | None], Any]
) -> None:
    """`engram-pipelines NAME pull|push|restore --from URL [--collection C]` for one store adapter."""

    @main.group(name=name, help=f"{summary}\n\n\b\nExamples:\n{examples}")
    def group() -> None:
        pass

    def options(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--history", help="mem0 only: its SQLite history file (pushes recorded there too)."
        )(fn)
        fn = click.option(
            "--collection", default="mem0", show_default=True, help="mem0 only: the collection."
        )(fn)
        fn = click.option("--from", "source", required=True, help="The store's PostgreSQL URL.")(fn)
        return friendly_errors(json_option(common_options(fn)))

    @group.command(
        name="pull", help="Every memory of that store into this one (new inserted, edited updated)."
    )
    @options
    def pull(
        source: str,
        collection: str,
        history: str | None,
        store_arg: str | None,
        warehouse: str | None,
        config_path: str | None,
        as_json: bool,
    ) -> None:
        config = load_config(config_path)
        with opened(store_arg, migrate=True) as store:
            result = build(source, collection, history).pull(
                store, embedding_dim=config.snapshot.embedding_dim
            )
        emit(result.as_dict(), as_json)
        if not as_json:
            console.print(f"[green]pulled[/] {result.as_dict()}")

    @group.command(
        name="push",
        help="Delete there what the nights hid here (audited, restorable); an edit there since the pull stays.",
    )
    @options
    def push(
        source: str,
        collection: str,
        history: str | None,
        store_arg: str | None,
        warehouse: str | None,
        config_path: str | None,
        as_json: bool,
    ) -> None:
        with opened(store_arg) as store:
            result = build(source, collection, history).push(store, actor=os.environ.get("USER", "cli"))
        emit(result.as_dict(), as_json)
        if not as_json:
            console.print(f"[green]pushed[/] {result.as_dict()}")

    @group.command(
        name="restore", help="Put a memory a push deleted back there, as it was (and keep it there)."
    )
    @click.argument("memory_id")
    @options
    def restore(
        memory_id: str,
        source: str,
        collection: str,
        history: str | None,
        store_arg: str | None,
        warehouse: str | None,
        config_path: str | None,
        as_json: bool,
    ) -> None:
        with opened(store_arg) as store:
            done = build(source, collection, history).restore(
                store, memory_id, actor=os.environ.get("USER", "cli")
            )
        emit({"id": memory_id, "restored": done}, as_json)
        if not as_json:
            console.print(f"[green]restored[/] {memory_id}" if done else f"{memory_id} is there already")


def _mem0(url: str, collection: str, history: str | None) -> Any:
    from engram_pipelines.adapters.mem0 import Mem0Collection

    return Mem0Collection(url, collection, history)


def _langgraph(url: str, collection: str, history: str | None) -> Any:
    from engram_pipelines.adapters.langgraph import LangGraphStore

    return LangGraphStore(url)


_adapter_group(
    "mem0",
    "Keep a mem0 store (its pgvector collection): pull its memories in before a night, push the night's hides back.",
    "  engram-pipelines mem0 pull --from postgresql://u:p@db/mem0 --collection mem0\n"
    "  engram-pipelines run && engram-pipelines mem0 push --from postgresql://u:p@db/mem0",
    _mem0,
)
_adapter_group(
    "langgraph",
    "Keep a LangGraph PostgresStore: pull its items in before a night, push the night's hides back.",
    "  engram-pipelines langgraph pull --from postgresql://u:p@db/app\n"
    "  engram-pipelines run && engram-pipelines langgraph push --from postgresql://u:p@db/app",
    _langgraph,
)


def _operator_write(store_arg: str | None, as_json: bool, write: Callable[[Store, str], Any]) -> None:
    actor = os.environ.get("USER", "cli")
    with opened(store_arg) as store:
        result = write(store, actor)
    emit(result.as_dict(), as_json)
    if not as_json:
        done = f"version {result.version}" if result.changed else "already so, nothing written"
        console.print(f"[green]{result.op}[/] {result.id}: {done}")


@main.command()
@click.argument("memory_id")
@common_options
@json_option
@friendly_errors
def pin(
    memory_id: str, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Pin a memory (seed 001's context_pin): exempt from decay and every cleanup, until unpinned.

    \b
    Example:
      engram-pipelines pin 3f2a9c0b-...
    """
    _operator_write(store_arg, as_json, lambda store, actor: api.pin(store, memory_id, actor=actor))


@main.command()
@click.argument("memory_id")
@common_options
@json_option
@friendly_errors
def unpin(
    memory_id: str, store_arg: str | None, warehouse: str | None, config_path: str | None, as_json: bool
) -> None:
    """Unpin a memory: decay and cleanup apply to it again."""
    _operator_write(store_arg, as_json, lambda store, actor: api.unpin(store, memory_id, actor=actor))


@main.command()
@click.argument("memory_id")
@click.option("--importance", type=float, help="Re-weight it too (0 to 1).")
@common_options
@json_option
@friendly_errors
def promote(
    memory_id: str,
    importance: float | None,
    store_arg: str | None,
    warehouse: str | None,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Promote a memory into long-term memory now (seed 001's memory_promote), optionally re-weighted.

    \b
    Example:
      engram-pipelines promote 3f2a9c0b-... --importance 0.9
    """
    _operator_write(
        store_arg,
        as_json,
        lambda store, actor: api.promote(store, memory_id, actor=actor, importance=importance),
    )


if __name__ == "__main__":
    main()
