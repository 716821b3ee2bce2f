"""Daily as-of partitions: one partition is the state of the store as of the end of that day (UTC).

The asset decorators need a partitions definition when their module is imported; `build_definitions` replaces
it on every asset with `daily_from(first_as_of_day(...))`, so the partitions start where the data starts
(`partitions.start`: a date, or `auto`, the day of the store's earliest `created_at`).
"""

from __future__ import annotations

import datetime as dt
import logging

import dagster as dg

from engram_pipelines.config.model import Config
from engram_pipelines.store import MigrationRequired, StoreError, open_store

_log = logging.getLogger(__name__)


def daily_from(start: dt.date) -> dg.DailyPartitionsDefinition:
    # end_offset=1 makes today a valid partition: `run` defaults to today's as-of.
    return dg.DailyPartitionsDefinition(start_date=start.isoformat(), end_offset=1, timezone="UTC")


# What the decorators see at import; never what a code location serves (`with_partitions`).
as_of_partitions = daily_from(dt.date(2024, 1, 1))


def first_as_of_day(config: Config, store_url: str) -> dt.date:
    """`partitions.start` when it is a date; else the day of the store's earliest memory, or today when the
    store is empty or cannot be read (the code location still loads; the reason is logged)."""
    if config.partitions.start != "auto":
        return dt.date.fromisoformat(config.partitions.start)
    today = dt.datetime.now(dt.UTC).date()
    try:
        with open_store(store_url) as store:
            earliest = store.earliest_created_at()
    except MigrationRequired as exc:  # not created yet (`init`), or behind the schema: nothing to run anyway
        _log.info("partitions start today (%s): %s", today, exc)
        return today
    except (StoreError, OSError) as exc:
        _log.warning("partitions start today (%s): the store could not be read: %s", today, exc)
        return today
    return min(earliest.astimezone(dt.UTC).date(), today) if earliest is not None else today


def with_partitions(
    assets: list[dg.AssetsDefinition], partitions_def: dg.PartitionsDefinition
) -> list[dg.AssetsDefinition]:
    """Every partitioned asset of `assets` on `partitions_def` instead of the import-time placeholder."""
    return [
        a.map_asset_specs(lambda spec: spec.replace_attributes(partitions_def=partitions_def))
        if a.partitions_def is not None
        else a
        for a in assets
    ]


def as_of_date(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> dt.date:
    return dt.date.fromisoformat(context.partition_key)
