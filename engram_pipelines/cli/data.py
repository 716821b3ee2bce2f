"""Getting memories in and out: `init`, `import`, `export`, `demo`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from engram_pipelines.cli.common import (
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
from engram_pipelines.cli.runs import print_summary, run_job
from engram_pipelines.config.model import load_config, store_url, warehouse_path
from engram_pipelines.store import redact


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
@click.option(
    "--text",
    is_flag=True,
    help="Load the texts without their vectors: the nightly embeds every one (what a store without vectors costs).",
)
@common_options
@json_option
@friendly_errors
def demo(
    size: int,
    seed: int,
    as_of: str | None,
    reset: bool,
    text: bool,
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
        loaded = load_demo(store, size=size, seed=seed, as_of=day, vectors=not text)
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
