"""A 30-day backfill over the demo corpus: one run, one output partition per day, the live store untouched."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import dagster as dg

from engram_pipelines.demo.loader import load_demo
from engram_pipelines.store import open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import AS_OF


def test_a_thirty_day_backfill_runs_once_and_writes_every_day(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=1_500, seed=3, as_of=AS_OF)
        before = store.query("SELECT id, version FROM memories ORDER BY id")
    from engram_pipelines.orchestration.definitions import build_definitions

    defs = build_definitions(store=url, warehouse=str(tmp_path / "wh"))
    job = defs.resolve_job_def("backfill")
    first, last = AS_OF - dt.timedelta(days=29), AS_OF
    result = job.execute_in_process(
        tags={
            "dagster/asset_partition_range_start": first.isoformat(),
            "dagster/asset_partition_range_end": last.isoformat(),
        },
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
    )
    assert result.success
    materializations = [e for e in result.all_events if e.event_type_value == "ASSET_MATERIALIZATION"]
    assert len({e.event_specific_data.materialization.partition for e in materializations}) == 30
    history = Warehouse(tmp_path / "wh" / "history")
    days = [first + dt.timedelta(days=i) for i in range(30)]
    rows = [history.read_table("decay_scores", day).num_rows for day in days]
    assert all(history.has_table(t, day) for t in ("promotions", "retention") for day in days)
    assert rows == sorted(rows) and rows[0] < rows[-1] <= 1_500, "memories appear from their created_at on"
    con = history.connect()
    per_day = con.execute("SELECT count(DISTINCT as_of) FROM decay_scores").fetchone()[0]
    assert per_day == 30
    with open_store(url) as store:
        assert store.query("SELECT id, version FROM memories ORDER BY id") == before, (
            "the live store is untouched"
        )
    assert dg.BackfillPolicy.single_run() == defs.resolve_assets_def("history").backfill_policy


def test_each_backfilled_day_records_its_own_row_counts(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=500, seed=3, as_of=AS_OF)
    from engram_pipelines.orchestration.definitions import build_definitions

    defs = build_definitions(store=url, warehouse=str(tmp_path / "wh"))
    days = [AS_OF - dt.timedelta(days=i) for i in (2, 1, 0)]
    instance = dg.DagsterInstance.ephemeral()
    result = defs.resolve_job_def("backfill").execute_in_process(
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": days[0].isoformat(),
            "dagster/asset_partition_range_end": days[-1].isoformat(),
        },
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
    )
    assert result.success
    records = instance.fetch_materializations(dg.AssetKey("history"), limit=100).records
    by_day = {r.partition_key: r.asset_materialization.metadata for r in records}
    assert sorted(by_day) == [day.isoformat() for day in days], "one materialisation per day, one run"
    history = Warehouse(tmp_path / "wh" / "history")
    written = {
        day.isoformat(): {
            t: history.read_table(t, day).num_rows for t in ("decay_scores", "promotions", "retention")
        }
        for day in days
    }
    recorded = {
        day: {
            "decay_scores": meta["dagster/row_count"].value,
            "promotions": meta["promotions_rows"].value,
            "retention": meta["retention_rows"].value,
        }
        for day, meta in by_day.items()
    }
    assert recorded == written
    # Days that differ: a count shared by the whole range could not pass the comparison above.
    assert len({rows["decay_scores"] for rows in written.values()}) > 1


def test_a_backfilled_day_proposes_what_the_nightly_proposes(tmp_path: Path):
    """One wiring for both: the same intents for the same day, analysis by analysis. (The backfill chained the
    merge steps by hand and left out the pairs the nightly excludes as contradictions: "Ana likes green tea"
    would have been hidden inside "Ana doesn't like green tea".)"""
    from engram_pipelines.night.backfill import OUTPUT_TABLES, backfill
    from engram_pipelines.orchestration.runner import execute_job
    from tests.support.memories import memory

    yesterday = dt.datetime.combine(
        AS_OF - dt.timedelta(days=1), dt.time(8), tzinfo=dt.UTC
    )  # nothing retires
    texts = [
        "Ana likes green tea",
        "Ana doesn't like green tea",
        "The deploy runs on Fridays after the review",
        "The deploy runs on Fridays after the review",
        "Priya keeps the release notes in the wiki",
    ]
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        store.insert_memories(
            [
                memory(
                    i,
                    content=t,
                    embedding=None,
                    embedding_model=None,
                    created_at=yesterday + dt.timedelta(hours=i),
                )
                for i, t in enumerate(texts)
            ]
            # Old, unread and unimportant: goes stale and is archived. Read often: promoted to LTM.
            + [
                memory(
                    f"old{i}",
                    content=f"a note from the spring, number {i}",
                    created_at=yesterday - dt.timedelta(days=120),
                    importance=0.1,
                )
                for i in range(3)
            ]
            + [
                memory(
                    "read",
                    content="The on-call rota lives in the team calendar",
                    created_at=yesterday - dt.timedelta(days=2),
                    importance=0.7,
                    access_count=6,
                    last_accessed_at=yesterday,
                )
            ]
        )
    night = execute_job("nightly", AS_OF, store=url, warehouse=str(tmp_path / "wh"), config_path=None)
    assert night["success"], night.get("error")
    wh = Warehouse(tmp_path / "wh")
    assert wh.read_table("contradictions", AS_OF).num_rows >= 1

    from engram_pipelines.config.model import Config

    summary = backfill(
        wh.read_memories(AS_OF),
        wh.read_table("links", AS_OF),
        wh.read_table("similarity_pairs", AS_OF),
        [AS_OF],
        Config(),
        Warehouse(tmp_path / "history"),
    )
    replayed = summary.transitions_per_day[AS_OF.isoformat()]
    steps = night["steps"]
    assert (replayed["duplicates"], replayed["near_duplicates"]) == (
        steps["duplicates"]["merged"],
        steps["consolidation"]["merged"],
    )
    assert replayed["duplicates"] == 1  # the deploy twins, and nothing of Ana's
    history = Warehouse(tmp_path / "history")
    for name in OUTPUT_TABLES:
        nightly = wh.read_proposal(AS_OF, name).sort_by([("target_id", "ascending"), ("op", "ascending")])
        again = history.read_proposal(AS_OF, name).sort_by([("target_id", "ascending"), ("op", "ascending")])
        assert again.equals(nightly), name
    ops = {name: set(wh.read_proposal(AS_OF, name)["op"].to_pylist()) for name in OUTPUT_TABLES}
    # Every step of the chain had something to propose.
    assert {"mark_stale"} <= ops["decay_scores"] and ops["promotions"] and {"move_zone"} <= ops["retention"]
    assert {"flag_contradiction"} <= ops["contradictions"] and {"supersede"} <= ops["duplicates"]
