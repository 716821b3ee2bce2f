"""What every command shares: the `main` group, the common options, errors a user can fix, output."""

from __future__ import annotations

import datetime as dt
import functools
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import click
from rich.console import Console

from engram_pipelines.config.model import ConfigError, store_url
from engram_pipelines.store import Store, StoreError, open_store

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
