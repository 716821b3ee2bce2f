"""An operator's direct, audited writes (seed 001's context_pin and memory_promote): `pin`, `unpin`, `promote`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from engram_pipelines import api
from engram_pipelines.cli.common import (
    common_options,
    console,
    emit,
    friendly_errors,
    json_option,
    main,
    opened,
)
from engram_pipelines.store import Store


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
