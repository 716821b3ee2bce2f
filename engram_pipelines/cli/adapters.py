"""Stores teams already run: `mem0 pull|push|restore` and `langgraph pull|push|restore`."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import click

from engram_pipelines.cli.common import (
    common_options,
    console,
    emit,
    friendly_errors,
    json_option,
    main,
    opened,
)
from engram_pipelines.config.model import load_config


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
