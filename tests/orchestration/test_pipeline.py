"""The nightly job end to end in Dagster (in-process) on the demo corpus, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from engram_pipelines.changes.registry import load_change_set
from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from tests.support.memories import AS_OF
from tests.support.paths import DATA

CHECKS = {
    "snapshot_invalid_fraction",
    "no_destructive_op_on_pinned",
    "nothing_across_namespaces",
    "one_write_per_row",
    "apply_accounting_closes",
    "volume_guard",
}


@pytest.fixture
def demo_store(store_url):
    with open_store(store_url, migrate=True) as store:
        load_demo(store, size=2_000, seed=11, as_of=AS_OF)
    return store_url


def test_nightly_applies_the_auto_transitions_then_a_second_run_emits_none(demo_store, tmp_path: Path):
    warehouse = str(tmp_path / "warehouse")
    first = execute_job("nightly", AS_OF, store=demo_store, warehouse=warehouse, config_path=None)
    assert first["success"], first.get("error")
    assert set(first["checks"]) == CHECKS
    # The demo's first night would archive more than half of each namespace: the volume guard holds those
    # moves for review (a warning, not a failure); every other check passes.
    assert (
        set(first["warnings"]) == {"volume_guard"} and "held for review" in first["warnings"]["volume_guard"]
    )
    assert all(passed for name, passed in first["checks"].items() if name != "volume_guard")
    steps = first["steps"]
    assert steps["memory_snapshot"]["row_count"] == 2_000
    assert steps["change_set"]["auto_changes"] > 0
    assert steps["applied_changes"]["applied"] == steps["change_set"]["auto_changes"]
    assert steps["decay_scores"]["transitions"] > 0 and steps["retention"]["transitions"] > 0
    assert steps["promotions"]["transitions"] > 0
    report = Path(first["report_path"]).read_text()
    assert "Memory health report" in report and "| total |" in report

    second = execute_job("nightly", AS_OF, store=demo_store, warehouse=warehouse, config_path=None)
    assert second["success"]
    assert second["steps"]["change_set"]["auto_changes"] == 0  # the gated set waits for review
    assert second["steps"]["applied_changes"]["total"] == 0


def test_pinned_rows_survive_every_step_of_the_nightly(demo_store, tmp_path: Path):
    with open_store(demo_store) as store:
        pinned = [r[0] for r in store.query("SELECT id FROM memories WHERE pinned = ? ORDER BY id", [True])]
    assert pinned, "the demo corpus plants pinned memories"
    result = execute_job("nightly", AS_OF, store=demo_store, warehouse=str(tmp_path / "wh"), config_path=None)
    assert result["success"]
    with open_store(demo_store) as store:
        rows = store.read_memories(pinned)
    assert len(rows) == len(pinned)
    assert all(r["zone"] == "active" and r["superseded_by"] is None and not r["stale"] for r in rows.values())


def test_a_config_edited_mid_run_does_not_split_the_night(demo_store, tmp_path: Path, monkeypatch):
    """The run's first step freezes the configuration; a later step reads that copy, not the edited file."""
    from engram_pipelines.orchestration import ingest

    config_file = tmp_path / "engram.yaml"
    config_file.write_text("decay:\n  stale_threshold: 0.15\n")
    take_snapshot = ingest.take_snapshot

    def snapshot_then_edit(*args, **kwargs):
        result = take_snapshot(*args, **kwargs)
        # Mid-run, someone switches the lifecycle analyses off.
        config_file.write_text("analyses:\n  decay_scores: {enabled: false}\n  retention: {enabled: false}\n")
        return result

    monkeypatch.setattr(ingest, "take_snapshot", snapshot_then_edit)
    warehouse = tmp_path / "warehouse"
    run = execute_job(
        "nightly", AS_OF, store=demo_store, warehouse=str(warehouse), config_path=str(config_file)
    )
    assert run["success"], run.get("error")
    frozen = yaml.safe_load((warehouse / "runs" / run["run_id"] / "config.yaml").read_text())
    assert frozen["analyses"] == {} and frozen["decay"]["stale_threshold"] == 0.15
    # The change set was composed under the frozen configuration: the lifecycle's transitions are in it.
    assert run["steps"]["decay_scores"]["transitions"] > 0
    assert (
        run["steps"]["change_set"]["config_fingerprint"]
        == run["steps"]["memory_snapshot"]["config_fingerprint"]
    )
    with open_store(demo_store) as store:
        auto = run["steps"]["change_set"]["auto_change_set"]
        sources = set(
            load_change_set(store, auto, ["source"], warehouse_root=warehouse)[1]["source"].to_pylist()
        )
        fingerprints = {rec.config_fingerprint for rec in store.list_change_sets()}
    assert {"decay_scores", "retention"} <= {s for joined in sources for s in joined.split(",")}
    assert fingerprints == {run["steps"]["memory_snapshot"]["config_fingerprint"]}


def test_the_asset_graph_snapshot():
    from engram_pipelines.orchestration.definitions import build_definitions

    defs = build_definitions(store="sqlite:///:memory:", warehouse="/tmp/unused")
    graph = defs.resolve_asset_graph()
    snapshot = {
        key.to_user_string(): {
            "group": graph.get(key).group_name,
            "deps": sorted(k.to_user_string() for k in graph.get(key).parent_keys),
        }
        for key in sorted(graph.get_all_asset_keys(), key=lambda k: k.to_user_string())
    }
    path = DATA / "asset_graph.json"
    if os.environ.get("ENGRAM_UPDATE_SNAPSHOTS"):  # after a deliberate change to the graph
        path.write_text(json.dumps(snapshot, indent=2, sort_keys=True) + "\n")
    expected = json.loads(path.read_text())
    assert snapshot == expected, "asset graph changed; if intended, rerun with ENGRAM_UPDATE_SNAPSHOTS=1"
    checks = {c.name for c in graph.asset_check_keys}
    assert checks == CHECKS


def test_asset_descriptions_state_the_configured_thresholds(tmp_path: Path):
    from engram_pipelines.orchestration.definitions import build_definitions

    config = tmp_path / "engram.yaml"
    config.write_text("similarity:\n  merge_threshold: 0.88\nretention:\n  archive_grace_days: 45\n")
    defs = build_definitions(store="sqlite:///:memory:", warehouse=str(tmp_path), config_path=str(config))
    graph = defs.resolve_asset_graph()
    described = {k.to_user_string(): graph.get(k).description or "" for k in graph.get_all_asset_keys()}
    assert "[0.88, 0.97)" in described["consolidation"]
    assert "(45.0 days)" in described["retention"]
    assert "(0.7, every member" in described["semantic"]  # a default, stated as such
    assert not [name for name, text in described.items() if "{config." in text]


def test_a_second_consolidate_on_the_applied_store_proposes_nothing(demo_store, tmp_path: Path):
    from engram_pipelines.changes.apply import apply_change_set
    from engram_pipelines.changes.revert import approve_change_set

    warehouse = str(tmp_path / "warehouse")
    first = execute_job("consolidate", AS_OF, store=demo_store, warehouse=warehouse, config_path=None)
    assert first["success"] and first["steps"]["consolidation"]["merged"] > 0
    assert "applied_changes" not in first["steps"], "consolidate applies nothing"
    gated = first["steps"]["change_set"]["gated_change_set"]
    with open_store(demo_store) as store:
        assert store.get_change_set(gated).status == "proposed"
        approve_change_set(store, gated, actor="reviewer")
        result = apply_change_set(store, gated)
        assert result.accounted and result.applied > 0
        auto = first["steps"]["change_set"]["auto_change_set"]
        apply_change_set(store, auto)
    second = execute_job("consolidate", AS_OF, store=demo_store, warehouse=warehouse, config_path=None)
    assert second["success"]
    assert second["steps"]["consolidation"]["merged"] == 0
    assert second["steps"]["change_set"]["gated_changes"] == 0


def test_planted_patterns_become_semantic_nodes_and_the_report_shows_it(demo_store, tmp_path: Path):
    from engram_pipelines.demo.corpus import generate

    result = execute_job("nightly", AS_OF, store=demo_store, warehouse=str(tmp_path / "wh"), config_path=None)
    assert result["success"]
    truth = generate(2_000, seed=11, as_of=AS_OF).truth.to_pylist()
    with open_store(demo_store) as store:
        links = store.query("SELECT src_id, dst_id FROM memory_links WHERE kind = ?", ["derived-from"])
    sources_of_a_node = {dst for _, dst in links}
    patterns = [t["ids"] for t in truth if t["kind"] == "semantic_pattern"]
    single = [t["ids"] for t in truth if t["kind"] == "single_conversation_pattern"]
    assert patterns and single
    found = sum(1 for ids in patterns if len(set(ids) & sources_of_a_node) >= 2)
    assert found >= 0.8 * len(patterns), f"{found} of {len(patterns)} planted patterns became semantic nodes"
    assert not any(len(set(ids) & sources_of_a_node) >= 2 for ids in single), (
        "one conversation is one context"
    )
    report = Path(result["report_path"]).read_text()
    assert "semantic nodes and summaries created" in report and "semantic_corroborated" in report


# Every asset whose table derives from upstream tables; memory_snapshot reads the live store, and history and
# health_report publish counts and reports rather than a table.
LINEAGE_ASSETS = {
    "embeddings",
    "decay_scores",
    "promotions",
    "retention",
    "decay_preview",
    "similarity_pairs",
    "contradictions",
    "duplicates",
    "consolidation",
    "semantic",
    "compression",
    "associations",
    "temporal",
    "gc",
    "change_set",
    "applied_changes",
}


def test_column_lineage_names_only_columns_the_upstream_assets_have(tmp_path: Path):
    import dagster as dg

    from engram_pipelines.orchestration.changes import ANALYSIS_SOURCES
    from engram_pipelines.orchestration.definitions import build_definitions

    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=500, seed=11, as_of=AS_OF)
    defs = build_definitions(store=url, warehouse=str(tmp_path / "wh"))
    graph = defs.resolve_asset_graph()
    # Everything but the backfill (a range asset) in one run, so every upstream schema is at hand.
    selection = [key for key in graph.get_all_asset_keys() if key != dg.AssetKey("history")]
    result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
        partition_key=AS_OF.isoformat(),
        asset_selection=selection,
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
    )
    assert result.success
    metadata = {
        event.asset_key.to_user_string(): event.event_specific_data.materialization.metadata
        for event in result.get_asset_materialization_events()
    }
    columns = {
        name: {column.name for column in meta["dagster/column_schema"].schema.columns}
        for name, meta in metadata.items()
        if "dagster/column_schema" in meta
    }
    derived = {name for name in columns if graph.get(dg.AssetKey(name)).parent_keys}
    assert derived == LINEAGE_ASSETS, "an asset with a table and upstreams needs column lineage"

    problems = []
    for name in sorted(LINEAGE_ASSETS):
        if "dagster/column_lineage" not in metadata[name]:
            problems.append(f"{name}: no column lineage")
            continue
        parents = {key.to_user_string() for key in graph.get(dg.AssetKey(name)).parent_keys}
        lineage = metadata[name]["dagster/column_lineage"].column_lineage
        for column, deps in lineage.deps_by_column.items():
            if column not in columns[name]:
                problems.append(f"{name}.{column}: not a column of {name}")
            if not deps:
                problems.append(f"{name}.{column}: derives from nothing")
            for dep in deps:
                upstream = dep.asset_key.to_user_string()
                if upstream not in parents:
                    problems.append(f"{name}.{column}: names {upstream}, which {name} does not depend on")
                elif dep.column_name not in columns.get(upstream, set()):
                    problems.append(
                        f"{name}.{column}: names {upstream}.{dep.column_name}, not a column there"
                    )
    assert not problems, "\n".join(problems)

    change_set = metadata["change_set"]["dagster/column_lineage"].column_lineage
    named = {dep.asset_key.to_user_string() for deps in change_set.deps_by_column.values() for dep in deps}
    assert set(ANALYSIS_SOURCES) <= named, "every analysis's proposals flow into the change set"
    # The shard steps' counts reach the combined asset's page (a fresh warehouse: every namespace compared).
    pairs = metadata["similarity_pairs"]
    assert sum(pairs["rows_by_method"].value.values()) > 0 and pairs["namespaces_reused"].value == 0


def test_the_nightly_schedule_runs_the_utc_day_that_just_ended(tmp_path: Path):
    import datetime as dt

    import dagster as dg

    from engram_pipelines.orchestration.definitions import build_definitions

    config = tmp_path / "engram.yaml"
    config.write_text("partitions:\n  start: '2026-01-01'\n")  # an empty store would start them today
    defs = build_definitions(
        store="sqlite:///:memory:", warehouse=str(tmp_path / "wh"), config_path=str(config)
    )
    for name in ("nightly_schedule", "consolidate_schedule"):
        schedule = defs.resolve_schedule_def(name)
        tick = dt.datetime(2026, 11, 30, 3, 0, tzinfo=dt.UTC)
        with dg.build_schedule_context(
            scheduled_execution_time=tick, repository_def=defs.get_repository_def()
        ) as context:
            (request,) = schedule.evaluate_tick(context).run_requests
        assert request.partition_key == "2026-11-29", name


def test_no_merge_hides_a_row_behind_a_canonical_that_retention_archives(demo_store, tmp_path: Path):
    """Both change sets of one night applied: every row this night superseded leads (through any chain of
    supersedes) to a canonical that is still visible, not to one the same night's retention archived."""
    from engram_pipelines.changes.apply import apply_change_set
    from engram_pipelines.changes.revert import approve_change_set

    def states(store) -> dict[str, tuple[str, str | None]]:
        return {i: (zone, by) for i, zone, by in store.query("SELECT id, zone, superseded_by FROM memories")}

    with open_store(demo_store) as store:
        before = states(store)
    result = execute_job("nightly", AS_OF, store=demo_store, warehouse=str(tmp_path / "wh"), config_path=None)
    assert result["success"] and result["steps"]["retention"]["transitions"] > 0
    gated = result["steps"]["change_set"]["gated_change_set"]
    with open_store(demo_store) as store:
        approve_change_set(store, gated, actor="reviewer")
        assert apply_change_set(store, gated).applied > 0
        after = states(store)
    merged = [i for i, (_, by) in after.items() if by is not None and before[i][1] is None]
    assert merged
    for memory_id in merged:
        canonical = after[memory_id][1]
        while after[canonical][1] is not None:
            canonical = after[canonical][1]
        assert after[canonical][0] == "active", (
            f"{memory_id} is hidden behind {canonical} ({after[canonical][0]})"
        )


def test_damaged_cache_files_are_discarded_and_recomputed(tmp_path: Path):
    """A truncated or garbage cache file (vectors, pairs, contradiction features, merge texts) failed every later
    run."""
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=500, seed=5, as_of=AS_OF)
    warehouse = tmp_path / "wh"
    first = execute_job("nightly", AS_OF, store=url, warehouse=str(warehouse), config_path=None)
    assert first["success"], first.get("error")
    damaged = []
    for cache in ("embedding_cache", "pair_cache", "contradiction_features", "merge_texts"):
        part = sorted((warehouse / cache).rglob("*.parquet"))[0]
        data = part.read_bytes()
        part.write_bytes(data[: len(data) // 2] if cache != "pair_cache" else b"not parquet at all")
        damaged.append(part)
    again = execute_job("nightly", AS_OF, store=url, warehouse=str(warehouse), config_path=None)
    assert again["success"], again.get("error")
    import pyarrow.parquet as pq

    for part in damaged:  # rewritten by the run, or dropped and its contents cached anew
        assert not part.exists() or pq.read_table(part).num_rows >= 0
