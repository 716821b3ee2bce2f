"""Reviewing what a night proposes and undoing it: `changes list|show`, `approve`, `apply`, `revert`, `restore`,
`explain`."""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.table import Column, Table

from engram_pipelines import api
from engram_pipelines.cli.common import (
    UserError,
    common_options,
    console,
    emit,
    friendly_errors,
    json_option,
    main,
    opened,
    parse_date,
)
from engram_pipelines.cli.runs import waiting_for_review
from engram_pipelines.config.model import load_config, store_url, warehouse_path


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
