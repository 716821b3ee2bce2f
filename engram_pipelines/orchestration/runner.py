"""Run a Dagster job of the code location in-process and summarise it for the command line.

The job comes from the package's own definitions factory (`engram_pipelines.orchestration`), never from a
workspace.yaml in the current folder (that may be another team's code). The command line and the Python API
import this module only when they run a job, so their other commands start without Dagster.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from engram_pipelines.warehouse.tables import run_lock

DEFINITIONS_MODULE = "engram_pipelines.orchestration.definitions"

# Metadata keys worth a line in the command-line summary, per step.
_SUMMARY_KEYS = (
    "dagster/row_count",
    "config_fingerprint",
    "snapshot_mode",
    "namespaces_reused",
    "namespaces_updated",
    "namespaces_computed",
    "reused_from_last_night",
    "quarantined",
    "links",
    "namespaces",
    "auto_changes",
    "gated_changes",
    "held_for_review",
    "what_happened",
    "held_changes",
    "held_change_set",
    "auto_change_set",
    "gated_change_set",
    "total",
    "applied",
    "skipped_concurrent_edit",
    "ineligible",
    "transitions",
    "scanned",
    "clusters",
    "merged",
    "dry_run",
    "embedded",
    "cached",
    "stale",
    "total_after",
    "active_after",
    "stale_after",
    "path",
)


class RunSummary(TypedDict):
    """What a job run reports (`run --json` prints it; the API and the tests read it)."""

    job: str
    as_of: str  # ISO date
    run_id: str
    success: bool
    seconds: float
    steps: dict[str, dict[str, Any]]  # asset -> its summary metadata (row_count, config_fingerprint, ...)
    checks: dict[str, bool]  # asset check -> passed
    processes: int  # 1 in process; more on local processes or Dask workers
    warnings: NotRequired[dict[str, str]]  # checks that warned, with their description
    step_seconds: NotRequired[dict[str, float]]
    error: NotRequired[str]  # the first failed step, and why
    report_path: NotRequired[str]  # the health report
    # What the command line adds: `demo`, the corpus loaded; `consolidate`, the merge summary, the review page and
    # the sets that wait for review.
    demo: NotRequired[dict[str, int] | None]
    consolidation: NotRequired[dict[str, Any]]
    review_report: NotRequired[str]
    waiting_for_review: NotRequired[list[dict[str, Any]]]


def execute_job(
    job: str, as_of: dt.date, *, store: str, warehouse: str, config_path: str | None, log_level: str = "INFO"
) -> RunSummary:
    with run_lock(Path(warehouse), job, as_of):
        return _execute_job(
            job, as_of, store=store, warehouse=warehouse, config_path=config_path, log_level=log_level
        )


def _execute_job(
    job: str, as_of: dt.date, *, store: str, warehouse: str, config_path: str | None, log_level: str
) -> RunSummary:
    import dagster as dg

    module = DEFINITIONS_MODULE
    location = importlib.import_module(module)
    defs = location.build_definitions(store=store, warehouse=warehouse, config_path=config_path)
    job_def = defs.resolve_job_def(job)
    first = job_def.partitions_def.start.date() if job_def.partitions_def is not None else None
    if first is not None and as_of < first:
        raise ValueError(
            f"as-of {as_of} is before the first as-of day {first} (the earliest memory's day, or "
            "`partitions.start` in the config): nothing in the store existed then"
        )
    started = time.perf_counter()
    # INFO keeps the steps' progress lines on the terminal without Dagster's per-event debug lines.
    run_config = {"loggers": {"console": {"config": {"log_level": log_level}}}}
    if job_def.executor_def.name == "in_process":
        instance = (
            dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else dg.DagsterInstance.ephemeral()
        )
        result = job_def.execute_in_process(
            partition_key=as_of.isoformat(), instance=instance, raise_on_error=False, run_config=run_config
        )
    else:
        result = _execute_out_of_process(job, as_of, module, (store, warehouse, config_path), run_config)
    summary: RunSummary = {
        "job": job,
        "as_of": as_of.isoformat(),
        "run_id": result.run_id,
        "success": result.success,
        "seconds": round(time.perf_counter() - started, 2),
        "steps": {},
        "checks": {},
        "processes": 0,
    }
    step_processes: set[int | None] = set()
    for event in result.all_events:
        if event.event_type_value == "ASSET_MATERIALIZATION":
            materialization = event.event_specific_data.materialization
            name = materialization.asset_key.to_user_string()
            meta = {k: _plain(v) for k, v in materialization.metadata.items() if k in _SUMMARY_KEYS}
            summary["steps"][name] = {k.removeprefix("dagster/"): v for k, v in meta.items() if k != "path"}
            if name == "health_report" and "path" in meta:
                summary["report_path"] = meta["path"]
        elif event.event_type_value == "ASSET_CHECK_EVALUATION":
            evaluation = event.event_specific_data
            summary["checks"][evaluation.check_name] = bool(evaluation.passed)
            if not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN:
                summary.setdefault("warnings", {})[evaluation.check_name] = evaluation.description or ""
        elif event.event_type_value == "STEP_START":
            step_processes.add(event.pid)
        elif event.event_type_value == "STEP_SUCCESS":
            summary.setdefault("step_seconds", {})[event.step_key] = round(
                event.event_specific_data.duration_ms / 1000.0, 3
            )
        elif event.event_type_value == "STEP_FAILURE" and "error" not in summary:
            error = event.event_specific_data.error
            summary["error"] = (
                f"step {event.step_key} failed: {error.message.strip() if error else 'unknown error'}"
            )
    summary["processes"] = len(step_processes)
    return summary


def _execute_out_of_process(
    job: str,
    as_of: dt.date,
    module: str,
    location_args: tuple[str, str, str | None],
    run_config: dict[str, Any],
) -> Any:
    """Runs the job on its executor (local processes or Dask): steps rebuild it with `job_for(job, ...)`."""
    import dagster as dg

    args: tuple[Any, ...] = (job, *location_args)
    recon = dg.build_reconstructable_job(module, "job_for", reconstructable_args=args)
    tags = {"dagster/partition": as_of.isoformat()}
    with contextlib.ExitStack() as stack:
        if os.environ.get("DAGSTER_HOME"):
            instance = stack.enter_context(dg.DagsterInstance.get())
        else:
            home = stack.enter_context(tempfile.TemporaryDirectory(prefix="engram-dagster-"))
            instance = stack.enter_context(dg.DagsterInstance.local_temp(home))
        with dg.execute_job(recon, instance, run_config, tags=tags) as result:
            return _Finished(result)


class _Finished:
    """What the summary reads of a run, kept after its instance closes."""

    def __init__(self, result: Any) -> None:
        self.run_id = result.run_id
        self.success = result.success
        self.all_events = list(result.all_events)


def _plain(value: Any) -> Any:
    inner = getattr(value, "value", value)
    return inner if isinstance(inner, (int, float, str, bool, list, dict)) or inner is None else str(inner)
