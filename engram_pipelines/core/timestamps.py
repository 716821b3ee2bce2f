"""Timestamps: always timezone-aware UTC, one text form in SQLite so equality guards compare exactly."""

from __future__ import annotations

import datetime as dt
import functools
from typing import overload

UTC = dt.UTC


class NaiveTimestampError(ValueError):
    """A timestamp without a zone: its instant is unknown, so it is refused rather than guessed."""


def parse_timestamp(value: str | dt.datetime) -> dt.datetime:
    """Parse an ISO-8601 timestamp that carries a zone (`Z` or an offset) and return it in UTC."""
    if isinstance(value, dt.datetime):
        parsed = value
    else:
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        parsed = dt.datetime.fromisoformat(text)
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise NaiveTimestampError(f"timestamp {value!r} has no zone (add 'Z' or an offset like '+02:00')")
    return parsed.astimezone(UTC)


@overload
def format_timestamp(value: dt.datetime) -> str: ...
@overload
def format_timestamp(value: None) -> None: ...
def format_timestamp(value: dt.datetime | None) -> str | None:
    """The store's canonical text form: `YYYY-MM-DDTHH:MM:SS.ffffffZ` (sorts as it compares); None stays None."""
    return None if value is None else _format(value)


@functools.lru_cache(maxsize=65_536)  # a change set stamps the same few instants on millions of rows
def _format(value: dt.datetime) -> str:
    if value.tzinfo is None:
        raise NaiveTimestampError(f"timestamp {value!r} has no zone")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def utc_now() -> dt.datetime:
    return dt.datetime.now(UTC)


def end_of_day(day: dt.date) -> dt.datetime:
    """The as-of instant of a daily partition: the first instant of the next day (exclusive bound)."""
    return dt.datetime.combine(day + dt.timedelta(days=1), dt.time(), tzinfo=UTC)
