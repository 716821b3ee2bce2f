"""Jobs and schedules: `nightly` (auto classes applied) and `consolidate` (gated classes proposed only)."""

from __future__ import annotations

import datetime as dt

import dagster as dg

from engram_pipelines.config.model import Config

nightly_job = dg.define_asset_job(
    name="nightly",
    # The decay preview is a report run on demand and `history` is for backfills: neither is a nightly step.
    selection=dg.AssetSelection.groups("ingest", "analysis", "changes", "apply", "reports")
    - dg.AssetSelection.assets("decay_preview", "history"),
    description=(
        "Snapshot the live store, run every analysis, compose the auto and gated change sets, apply the auto "
        "set (CAS-guarded, audited) and write the health report. Gated changes wait for `approve`."
    ),
)

consolidate_job = dg.define_asset_job(
    name="consolidate",
    selection=dg.AssetSelection.groups("ingest", "analysis", "changes") - dg.AssetSelection.assets("history"),
    description=(
        "Propose the review-gated change set (near-duplicate merges, compression, supersede) with its review "
        "report, and apply nothing: `engram-pipelines approve` then `apply` does that. Its schedule is off by "
        "default (seed 000: a scheduled merge runs without review)."
    ),
)


preview_job = dg.define_asset_job(
    name="preview",
    selection=dg.AssetSelection.groups("ingest", "analysis")
    - dg.AssetSelection.assets("decay_preview", "history"),
    description=(
        "What tonight's nightly would do: the snapshot and every analysis, into a scratch warehouse; no change "
        "set is stored and nothing is applied (`engram-pipelines preview`)."
    ),
)

backfill_job = dg.define_asset_job(
    name="backfill",
    selection=dg.AssetSelection.assets("history"),
    description=(
        "Replay the policies over a historical corpus for a range of as-of dates, as one run (launch a backfill "
        "of a partition range from the UI or `dagster job backfill`); writes <warehouse>/history/ only."
    ),
)


def _day_that_just_ended(
    job: dg.UnresolvedAssetJobDefinition, name: str, hour: int, minute: int, status, description: str
) -> dg.ScheduleDefinition:
    """Runs `job` daily at hour:minute UTC for the partition of the UTC day before the tick.

    Not `build_schedule_from_partitioned_job`: with `end_offset=1` (today is a valid partition, so `run` can
    default to it) that picks today's partition, and a 03:00 run would process a day three hours old."""

    @dg.schedule(
        name=name,
        job=job,
        cron_schedule=f"{minute} {hour} * * *",
        execution_timezone="UTC",
        default_status=status,
        description=description,
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest:
        day = (context.scheduled_execution_time.astimezone(dt.UTC) - dt.timedelta(days=1)).date()
        return dg.RunRequest(run_key=day.isoformat(), partition_key=day.isoformat())

    return _schedule


def schedules(config: Config) -> list[dg.ScheduleDefinition]:
    on, off = dg.DefaultScheduleStatus.RUNNING, dg.DefaultScheduleStatus.STOPPED
    return [
        _day_that_just_ended(
            nightly_job,
            "nightly_schedule",
            config.schedules.nightly_hour,
            config.schedules.nightly_minute,
            on if config.schedules.nightly_enabled else off,
            "Runs `nightly` for the UTC day that just ended (schedules.nightly_hour, 03:00 UTC by default).",
        ),
        _day_that_just_ended(
            consolidate_job,
            "consolidate_schedule",
            config.schedules.consolidate_hour,
            0,
            on if config.schedules.consolidate_enabled else off,
            "Proposes the gated change set daily at schedules.consolidate_hour for the day that just ended; off "
            "unless schedules.consolidate_enabled.",
        ),
    ]
