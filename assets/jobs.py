"""Jobs and schedules: `nightly` (auto classes applied) and `consolidate` (gated classes proposed only)."""

from __future__ import annotations

import dagster as dg

from engram_pipelines.config import Config

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


backfill_job = dg.define_asset_job(
    name="backfill",
    selection=dg.AssetSelection.assets("history"),
    description=(
        "Replay the policies over a historical corpus for a range of as-of dates, as one run (launch a backfill "
        "of a partition range from the UI or `dagster job backfill`); writes <warehouse>/history/ only."
    ),
)


def schedules(config: Config) -> list[dg.ScheduleDefinition]:
    on, off = dg.DefaultScheduleStatus.RUNNING, dg.DefaultScheduleStatus.STOPPED
    return [
        dg.build_schedule_from_partitioned_job(
            nightly_job,
            name="nightly_schedule",
            hour_of_day=config.schedules.nightly_hour,
            minute_of_hour=config.schedules.nightly_minute,
            default_status=on if config.schedules.nightly_enabled else off,
            description="Runs `nightly` for the day that just ended (schedules.nightly_hour, 03:00 UTC by default).",
        ),
        dg.build_schedule_from_partitioned_job(
            consolidate_job,
            name="consolidate_schedule",
            hour_of_day=config.schedules.consolidate_hour,
            default_status=on if config.schedules.consolidate_enabled else off,
            description="Proposes the gated change set daily at schedules.consolidate_hour; off unless schedules.consolidate_enabled.",
        ),
    ]
