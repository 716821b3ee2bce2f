"""Daily as-of partitions: one partition is the state of the store as of the end of that day (UTC)."""

from __future__ import annotations

import datetime as dt

import dagster as dg

AS_OF_START = "2024-01-01"

# end_offset=1 makes today a valid partition: `run` defaults to today's as-of.
as_of_partitions = dg.DailyPartitionsDefinition(start_date=AS_OF_START, end_offset=1, timezone="UTC")


def as_of_date(
    context: dg.AssetExecutionContext | dg.AssetCheckExecutionContext | dg.OpExecutionContext,
) -> dt.date:
    return dt.date.fromisoformat(context.partition_key)
