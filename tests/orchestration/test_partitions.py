"""The as-of partitions start where the data starts: a corpus dated 2023 runs and backfills on its own dates."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from engram_pipelines.orchestration.definitions import build_definitions
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import memory

QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}
FIRST = dt.datetime(2023, 10, 2, 9, tzinfo=dt.UTC)


def corpus_of_2023(url: str) -> None:
    with open_store(url, migrate=True) as store:
        store.insert_memories(
            [
                memory(i, created_at=FIRST + dt.timedelta(days=i), content=f"note {i} of 2023")
                for i in range(60)
            ]
        )


def test_a_corpus_dated_2023_runs_its_nightly_and_a_backfill(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    corpus_of_2023(url)
    defs = build_definitions(store=url, warehouse=str(tmp_path / "wh"))
    partitions = defs.resolve_job_def("nightly").partitions_def
    assert partitions.start.date() == FIRST.date()  # the earliest memory's day, not a fixed 2024-01-01
    summary = execute_job(
        "nightly", dt.date(2023, 12, 31), store=url, warehouse=str(tmp_path / "wh"), config_path=None
    )
    assert summary["success"], summary.get("error")
    assert summary["steps"]["memory_snapshot"]["row_count"] == 60
    first, last = dt.date(2023, 12, 1), dt.date(2023, 12, 5)
    result = defs.resolve_job_def("backfill").execute_in_process(
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
        },
        run_config=QUIET,
    )
    assert result.success
    history = Warehouse(tmp_path / "wh" / "history")
    assert [history.read_table("decay_scores", first + dt.timedelta(days=i)).num_rows for i in range(5)] == [
        60
    ] * 5


def test_a_configured_start_and_an_as_of_before_it(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    corpus_of_2023(url)
    config = tmp_path / "engram.yaml"
    config.write_text("partitions:\n  start: '2023-06-01'\n")
    defs = build_definitions(store=url, warehouse=str(tmp_path / "wh"), config_path=str(config))
    assert defs.resolve_job_def("nightly").partitions_def.start.date() == dt.date(2023, 6, 1)
    with pytest.raises(ValueError, match=r"as-of 2023-05-31 is before the first as-of day 2023-06-01"):
        execute_job(
            "nightly",
            dt.date(2023, 5, 31),
            store=url,
            warehouse=str(tmp_path / "wh"),
            config_path=str(config),
        )
    config.write_text("partitions:\n  start: 'last spring'\n")
    with pytest.raises(Exception, match=r"partitions.start must be 'auto' or an ISO date"):
        build_definitions(store=url, warehouse=str(tmp_path / "wh"), config_path=str(config))


def test_an_empty_or_missing_store_starts_the_partitions_today(tmp_path: Path):
    today = dt.datetime.now(dt.UTC).date()
    missing = build_definitions(store=f"sqlite:///{tmp_path}/none.db", warehouse=str(tmp_path / "wh"))
    assert missing.resolve_job_def("nightly").partitions_def.start.date() == today
    url = f"sqlite:///{tmp_path}/empty.db"
    open_store(url, migrate=True).close()
    empty = build_definitions(store=url, warehouse=str(tmp_path / "wh"))
    assert empty.resolve_job_def("nightly").partitions_def.start.date() == today
