"""The Python API: what the command line does, as typed functions (the CLI's commands call these).

    from engram_pipelines import open_store, run_night, change_sets, approve, apply, pin

    summary = run_night(dt.date(2026, 11, 29), store="sqlite:///data/engram.db", warehouse="data/warehouse")
    with open_store("sqlite:///data/engram.db") as store:
        waiting = [r for r in change_sets(store) if r.status == "proposed" and r.review_class != "auto"]
        approve(store, waiting[0].change_set_id, actor="alice")
        apply(store, waiting[0].change_set_id, actor="alice")
        pin(store, "m-42", actor="alice")

A store argument is a `Store` from `open_store`; URLs and the warehouse default as the command line's do
(`ENGRAM_STORE_URL`, `ENGRAM_WAREHOUSE`, else the embedded SQLite store and `data/warehouse`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import TYPE_CHECKING, Any

import engram_pipelines
from engram_pipelines.changes.apply import ApplyResult as ApplyResult
from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.operator import OperatorError as OperatorError
from engram_pipelines.changes.operator import OperatorResult as OperatorResult
from engram_pipelines.changes.operator import pin as pin
from engram_pipelines.changes.operator import promote as promote
from engram_pipelines.changes.operator import unpin as unpin
from engram_pipelines.changes.revert import RestoreError as RestoreError
from engram_pipelines.changes.revert import RevertResult as RevertResult
from engram_pipelines.changes.revert import (
    approve_change_set,
    restore_memory,
    revert_change_set,
)
from engram_pipelines.changes.revert import revert_night as revert_night
from engram_pipelines.config.model import store_url, warehouse_path
from engram_pipelines.core.progress import Progress
from engram_pipelines.reports.explain import explain_memory
from engram_pipelines.store import ChangeSetRecord as ChangeSetRecord
from engram_pipelines.store import Store as Store
from engram_pipelines.store import open_store as _open_store

__all__ = engram_pipelines.__all__  # the package lists the API's names once

if TYPE_CHECKING:  # the runner imports Dagster when a job runs; the type alone costs nothing
    from engram_pipelines.orchestration.runner import RunSummary


def open_store(url: str | None = None, *, migrate: bool = False) -> Store:
    """The live store at `url` (default: ENGRAM_STORE_URL, else the embedded SQLite store); a context manager.
    With `migrate`, pending schema migrations are applied (what `init` does)."""
    return _open_store(store_url(url), migrate=migrate)


def run_night(
    as_of: dt.date | None = None,
    *,
    job: str = "nightly",
    store: str | None = None,
    warehouse: str | Path | None = None,
    config_path: str | None = None,
) -> RunSummary:
    """Run a job (`nightly` or `consolidate`) in process for one as-of day (default today, UTC); the summary
    `run --json` prints. One run at a time per warehouse (WarehouseBusy names the other)."""
    from engram_pipelines.orchestration.runner import execute_job  # Dagster: imported only when a job runs

    return execute_job(
        job,
        as_of or dt.datetime.now(dt.UTC).date(),
        store=store_url(store),
        warehouse=str(warehouse_path(str(warehouse) if warehouse is not None else None)),
        config_path=config_path,
    )


def change_sets(store: Store) -> list[ChangeSetRecord]:
    """Every stored change set, oldest first (status, review class, counts, where its file is)."""
    return store.list_change_sets()


def approve(store: Store, change_set_id: str, *, actor: str, warehouse: str | Path | None = None) -> None:
    """Approve a proposed set (its file verified against its id first)."""
    approve_change_set(store, change_set_id, actor=actor, warehouse_root=warehouse)


def apply(
    store: Store,
    change_set_id: str,
    *,
    actor: str,
    batch_size: int = 1000,
    progress: Progress | None = None,
    warehouse: str | Path | None = None,
) -> ApplyResult:
    """Apply a set: CAS-guarded batches, audited; a re-run resumes from the ledger. A gated or held set must be
    approved first (ReviewRequired)."""
    return apply_change_set(
        store, change_set_id, actor=actor, batch_size=batch_size, progress=progress, warehouse_root=warehouse
    )


def revert(store: Store, change_set_id: str, *, actor: str) -> RevertResult:
    """Undo an applied set from its audit pre-images; rows and links changed since are skipped and listed."""
    return revert_change_set(store, change_set_id, actor=actor)


def restore(store: Store, memory_id: str, *, actor: str) -> dict[str, Any]:
    """Bring a purged memory back under its original id, in Active."""
    return restore_memory(store, memory_id, actor=actor)


def explain(store: Store, memory_id: str, *, warehouse: str | Path | None = None) -> dict[str, Any]:
    """The memory's state, every change that touched or named it, and its audit rows."""
    return explain_memory(store, memory_id, Path(warehouse) if warehouse is not None else None)
