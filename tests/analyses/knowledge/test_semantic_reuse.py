"""Semantic extraction reused per namespace: only while a namespace's inputs are last night's and no node falls
due for anti-anchoring, its proposals re-stamped with tonight's instant; the result equals a computation of
every namespace."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.knowledge.semantic import semantic_extraction
from engram_pipelines.analyses.knowledge.semantic_reuse import in_namespace_order, semantic_reusing
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.config.model import Config
from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.warehouse.vector_digests import VectorSource
from tests.analyses.knowledge.test_semantic import node_row, three_close
from tests.support.lifecycle import AS_OF, days_ago
from tests.support.world import World, axis, episode

NOTHING_FADES = pa.array([], pa.string())


def _inputs(world: World) -> tuple[pa.Table, pa.Table, pa.Table, pa.Table]:
    return world.memories(), world.links_table(), world.pairs(), world.vectors()


def _scratch(world: World, at: dt.datetime) -> AnalysisResult:
    result = semantic_extraction(*_inputs(world), Config(), at, fading=NOTHING_FADES)
    return in_namespace_order([result])


def _reusing(world: World, at: dt.datetime, root: Path) -> tuple[AnalysisResult, int]:
    memories, links, pairs, vectors = _inputs(world)
    return semantic_reusing(
        memories, links, pairs, VectorSource.of(vectors), Config(), at, fading=NOTHING_FADES, cache_root=root
    )


def _world(ns2_text: str | None = None) -> World:
    rows = three_close(("c1", "c2", "c3"))  # ns1: a new node, proposed every night until it lands
    ns2 = three_close(
        ("c4", "c4", "c4"), namespace="ns2", prefix="x"
    )  # one context: rejected, nothing proposed
    if ns2_text is not None:
        ns2[1]["content"] = ns2_text
    # ns3: a node reinforced 20 days ago, quiet until its anti-anchoring falls due (30 days idle).
    sources = [episode(f"y{i}", axis(4 + i), f"c{5 + i}", namespace="ns3") for i in range(2)]
    node = node_row("n3", sources=["y0", "y1"], reinforcedAt=format_timestamp(days_ago(20)))
    node["namespace"] = "ns3"
    return World(rows + ns2 + sources + [node])


def _same(result: AnalysisResult, scratch: AnalysisResult) -> bool:
    return result.table.equals(scratch.table) and result.intents.equals(scratch.intents)


def test_a_namespace_is_reused_while_its_inputs_stay_and_nothing_falls_due_its_proposals_restamped(tmp_path):
    world = _world()
    first, computed = _reusing(world, AS_OF, tmp_path)
    assert computed == 3 and _same(first, _scratch(world, AS_OF))
    proposing = set(first.intents["namespace"].to_pylist())
    assert proposing == {"ns1"}, "the fixture: only ns1 proposes"
    assert "ns2" in first.table["namespace"].to_pylist(), "ns2's rejected cluster is in the table"

    next_night = AS_OF + dt.timedelta(days=1)
    again, computed = _reusing(world, next_night, tmp_path)
    assert computed == 0, "nothing moved: ns1's proposal (not landed) is proposed again, re-stamped"
    assert format_timestamp(next_night) in again.intents["params"][0].as_py()
    assert _same(again, _scratch(world, next_night))

    edited = _world(ns2_text="The team moved the billing service to another host")
    moved, computed = _reusing(edited, AS_OF + dt.timedelta(days=2), tmp_path)
    assert computed == 1 and _same(moved, _scratch(edited, AS_OF + dt.timedelta(days=2))), "the edited ns2"

    later = AS_OF + dt.timedelta(days=11)  # n3 idle for 31 days
    due, computed = _reusing(edited, later, tmp_path)
    assert computed == 1 and _same(due, _scratch(edited, later)), "ns3"
    assert "ns3" in due.intents["namespace"].to_pylist(), "the anti-anchoring is proposed"


def test_anti_anchoring_falls_due_only_for_live_nodes_idle_past_the_threshold():
    from engram_pipelines.analyses.knowledge.semantic_reuse import anti_anchoring_due

    def node(node_id: str, namespace: str, reinforced: str, **fields) -> dict:
        row = node_row(node_id, sources=["y0"], reinforcedAt=reinforced)
        return {**row, "namespace": namespace, **fields}

    rows = [
        node("n1", "idle", format_timestamp(days_ago(31))),
        node("n2", "recent", format_timestamp(days_ago(29))),
        node("n3", "archived", format_timestamp(days_ago(90)), zone="archived"),
        node("n4", "garbled", "not a time"),
        episode("y0", axis(1), "c1", namespace="recent"),
    ]
    assert anti_anchoring_due(World(rows).memories(), Config(), AS_OF) == {"idle", "garbled"}


def test_restamping_replaces_the_instant_in_texts_and_lists_of_texts_only():
    from engram_pipelines.analyses.knowledge.semantic_reuse import restamped

    then, when = "2026-11-30T23:59:59.999999Z", "2026-12-01T23:59:59.999999Z"
    table = pa.table(
        {
            "params": [f'{{"at": "{then}"}}', "no instant"],
            "changes": pa.array([[f"at {then}", "tier"], None], pa.list_(pa.string())),
            "sources": [2, 3],
        }
    )
    out = restamped(table, then, when)
    assert out["params"].to_pylist() == [f'{{"at": "{when}"}}', "no instant"]
    assert out["changes"].to_pylist() == [[f"at {when}", "tier"], None]
    assert out["sources"].equals(table["sources"]) and out.schema == table.schema
