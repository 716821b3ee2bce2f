"""Compression: clusters of related low-importance memories become one gated extractive summary."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from engram_pipelines.analyses.knowledge.clusters import coherent_clusters
from engram_pipelines.analyses.knowledge.compression import (
    SUMMARY_MAX_CHARS,
    compression,
    eligible_rows,
    extractive_summary,
    settled_clusters,
    summary_id_for,
)
from engram_pipelines.config.model import Config
from tests.support.lifecycle import AS_OF
from tests.support.world import World, axis, direction, episode, ops, params_of


def low(memory_id: str, degrees: float, content: str | None = None, **fields: Any) -> dict[str, Any]:
    """A low-importance memory (importance 0.2, stored score 0.1) at `degrees` in the e0-e1 plane."""
    row = episode(memory_id, direction(degrees), None, importance=0.2, score=0.1, **fields)
    if content is not None:
        row["content"] = content
    return row


def scores_of(world: World, overrides: dict[str, float] | None = None) -> pa.Table:
    """A decay_scores-like table: every row's stored score unless overridden."""
    memories = world.memories()
    values = dict(zip(memories["id"].to_pylist(), memories["score"].to_pylist(), strict=True))
    values.update(overrides or {})
    return pa.table({"id": list(values), "score": pa.array(list(values.values()), pa.float64())})


def run(
    world: World, config: Config | None = None, scores: pa.Table | None = None
) -> tuple[pa.Table, pa.Table]:
    result = compression(
        world.memories(),
        world.pairs(),
        scores if scores is not None else scores_of(world),
        config or Config(),
        AS_OF,
    )
    return result.table, result.intents


def refactor_world() -> World:
    return World(
        [
            low("r0", 0.0, "Renamed the parser module"),
            low("r1", 5.0, "Moved the parser tests"),
            low("r2", 10.0, "Fixed an import in the parser"),
            low("other", 0.0, "unrelated", **{"embedding": axis(4)}),
        ]
    )


def test_a_cluster_of_low_importance_memories_becomes_one_gated_summary():
    result, intents = run(refactor_world())
    summary_id = summary_id_for("ns1", ["r0", "r1", "r2"])
    members = ["r0", "r1", "r2"]
    assert ops(intents) == sorted(
        [("insert_memory", summary_id)]
        + [("move_zone", m) for m in members]
        + [("upsert_link", f"{m}|{summary_id}|summarized-into") for m in members]
    )
    assert set(intents["review_class"].to_pylist()) == {"gated"}
    assert set(intents["source"].to_pylist()) == {"compression"}
    row = params_of(intents, "insert_memory", summary_id)["row"]
    assert row["kind"] == "summary" and row["importance"] == 0.2 and row["namespace"] == "ns1"
    # The medoid (the middle vector) first, then the most distinct member, then the rest.
    assert (
        row["content"] == "Moved the parser tests. Renamed the parser module. Fixed an import in the parser."
    )
    assert row["metadata"]["summary"]["members"] == members
    assert params_of(intents, "move_zone", "r0") == {"from": "active", "to": "archived"}
    link = params_of(intents, "upsert_link", f"r1|{summary_id}|summarized-into")
    assert link["kind"] == "summarized-into" and link["weight"] == 1.0
    assert sorted(result["member"].to_pylist()) == members
    assert result.filter(pa.compute.field("representative")).column("member").to_pylist() == ["r1"]


def test_high_importance_and_pinned_rows_are_never_compressed():
    world = refactor_world()
    world.row("r0")["importance"] = 0.9
    _, intents = run(world)
    assert intents.num_rows == 0  # two left: below min_cluster_size
    world = refactor_world()
    world.row("r2")["pinned"] = True
    assert run(world)[1].num_rows == 0
    world = refactor_world()
    world.rows.append(low("r3", 7.0, pinned=True))
    _, intents = run(world)
    assert "r3" not in intents["target_id"].to_pylist()


def test_a_high_decay_score_or_a_missing_one_is_not_eligible():
    world = refactor_world()
    assert run(world, scores=scores_of(world, {"r1": 0.8}))[1].num_rows == 0
    world.row("r2")["score"] = None
    assert (
        run(world, scores=pa.table({"id": pa.array([], pa.string()), "score": pa.array([], pa.float64())}))[
            1
        ].num_rows
        == 0
    )


def test_contradicted_superseded_and_archived_rows_are_not_compressed():
    for change in ({"metadata": {"contradictionWith": ["x"]}}, {"superseded_by": "r0"}, {"zone": "archived"}):
        world = refactor_world()
        world.row("r2").update(change)
        assert run(world)[1].num_rows == 0, change


def test_thresholds_come_from_config():
    world = refactor_world()
    config = Config.model_validate({"compression": {"min_cluster_size": 4}})
    assert run(world, config)[1].num_rows == 0
    config = Config.model_validate({"compression": {"similarity_threshold": 0.999}})
    assert run(world, config)[1].num_rows == 0
    config = Config.model_validate({"compression": {"max_importance": 0.1}})
    assert run(world, config)[1].num_rows == 0


def test_nothing_crosses_a_namespace():
    world = World(
        [low("a0", 0.0), low("a1", 3.0), low("b0", 6.0, namespace="ns2"), low("b1", 9.0, namespace="ns2")]
    )
    assert run(world)[1].num_rows == 0
    config = Config.model_validate({"compression": {"min_cluster_size": 2}})
    _, intents = run(world, config)
    inserts = {
        json.loads(p)["row"]["namespace"]: json.loads(p)["row"]["metadata"]["summary"]["members"]
        for o, p in zip(intents["op"].to_pylist(), intents["params"].to_pylist(), strict=True)
        if o == "insert_memory"
    }
    assert inserts == {"ns1": ["a0", "a1"], "ns2": ["b0", "b1"]}


def test_a_second_run_on_the_applied_store_proposes_nothing():
    world = refactor_world()
    _, intents = run(world)
    applied = world.apply(intents, AS_OF)
    assert {r["id"]: r["zone"] for r in applied.rows if r["id"].startswith("r")} == dict.fromkeys(
        ["r0", "r1", "r2"], "archived"
    )
    assert len(applied.links) == 3
    assert run(applied)[1].num_rows == 0


def test_the_same_input_gives_the_same_output():
    world = refactor_world()
    first, second = run(world), run(world)
    assert first[0].equals(second[0]) and first[1].equals(second[1])


def test_extractive_summary_skips_repeats_and_stops_at_the_cap():
    text, included = extractive_summary(["Alpha  beta", "alpha beta.", "Gamma!", "Delta"], 100)
    assert text == "Alpha beta. Gamma! Delta." and included == [0, 2, 3]
    text, included = extractive_summary(["a" * 30, "b" * 30], 40)
    assert text == "a" * 30 + "." and included == [0]
    text, _ = extractive_summary(["x" * (SUMMARY_MAX_CHARS + 50)], SUMMARY_MAX_CHARS)
    assert len(text) == SUMMARY_MAX_CHARS and text.endswith("…")


def test_clusters_settle_in_one_run_on_a_random_corpus():
    rng = np.random.default_rng(2)  # a corpus where one greedy pass leaves a cluster for the next night
    rows = []
    for i in range(120):
        v = rng.standard_normal(8) * np.array([1, 1, 1] + [0.15] * 5)
        rows.append(episode(f"m{i:03d}", (v / np.linalg.norm(v)).tolist(), None, importance=0.2, score=0.1))
    world = World(rows)
    cfg = Config().compression
    eligible = eligible_rows(world.memories(), scores_of(world), cfg)
    one_pass = [
        c
        for c in coherent_clusters(world.pairs(), eligible, cfg.similarity_threshold, prefix="sum")
        if len(c.members) >= cfg.min_cluster_size
    ]
    assert len(settled_clusters(world.pairs(), eligible, cfg)) > len(one_pass)
    _, intents = run(world)
    assert run(world.apply(intents, AS_OF))[1].num_rows == 0
