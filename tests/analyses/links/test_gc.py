"""Garbage collection of links: orphans, duplicates of symmetric links, purged pairs, self links."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from engram_pipelines.analyses.links.gc import garbage_links
from tests.support.lifecycle import AS_OF, days_ago
from tests.support.world import World, link, ops


def world(*links: dict, rows: list[dict] | None = None) -> World:
    return World(rows if rows is not None else [{"id": i} for i in ("a", "b", "c")], list(links))


def run(w: World, quarantined: pa.Table | None = None):
    result = garbage_links(w.memories(), w.links_table(), AS_OF, quarantined=quarantined)
    return result.table, result.intents


def deleted(w: World, quarantined: pa.Table | None = None) -> list[str]:
    _, intents = run(w, quarantined)
    assert {op for op, _ in ops(intents)} <= {"delete_link"}
    return [t for _, t in ops(intents)]


def test_a_link_whose_endpoint_no_longer_exists_is_deleted():
    w = world(link("a", "gone", "associated"), link("gone", "b", "temporal"), link("a", "b", "associated"))
    result, intents = run(w)
    assert [t for _, t in ops(intents)] == ["a|gone|associated", "gone|b|temporal"]
    assert set(result["rule"].to_pylist()) == {"orphan"}
    assert set(intents["review_class"].to_pylist()) == {"auto"} and set(intents["source"].to_pylist()) == {
        "gc"
    }


def test_a_quarantined_endpoint_exists_and_a_link_newer_than_the_snapshot_is_not_judged():
    w = world(
        link("a", "q1", "associated"),
        link("a", "fresh", "associated", created_at=AS_OF + dt.timedelta(hours=1)),
    )
    assert deleted(w, pa.table({"id": ["q1"]})) == []


def test_a_symmetric_link_stated_both_ways_keeps_the_older():
    w = world(
        link("a", "b", "associated", created_at=days_ago(5)),
        link("b", "a", "associated", created_at=days_ago(9)),
        link("a", "c", "contradicts"),
        link("c", "a", "contradicts"),  # same age: the one from the lower id is kept
    )
    result, intents = run(w)
    assert [t for _, t in ops(intents)] == ["a|b|associated", "c|a|contradicts"]
    assert set(result["rule"].to_pylist()) == {"duplicate"}


def test_directed_kinds_both_ways_are_two_facts():
    w = world(
        link("a", "b", "temporal"), link("b", "a", "temporal", weight=0.5), link("a", "b", "duplicate-of")
    )
    assert deleted(w) == []


def test_a_link_between_two_rows_in_the_purge_queue_is_deleted_but_not_with_one():
    rows = [{"id": "a", "zone": "purge_queue"}, {"id": "b", "zone": "purge_queue"}, {"id": "c"}]
    w = world(link("a", "b", "associated"), link("a", "c", "associated"), rows=rows)
    result, _ = run(w)
    assert result.select(["src_id", "dst_id", "rule"]).to_pylist() == [
        {"src_id": "a", "dst_id": "b", "rule": "purged_pair"}
    ]


def test_self_links_and_cross_namespace_links_are_deleted():
    rows = [{"id": "a"}, {"id": "x", "namespace": "ns2"}, {"id": "y", "namespace": "ns2"}]
    w = world(
        link("a", "a", "associated"), link("a", "x", "associated"), link("x", "y", "associated"), rows=rows
    )
    result, _ = run(w)
    assert {(r["src_id"], r["dst_id"]): r["rule"] for r in result.to_pylist()} == {
        ("a", "a"): "self_link",
        ("a", "x"): "cross_namespace",
        ("x", "y"): "cross_namespace",  # both in ns2, but the link says ns1
    }


def test_a_second_run_on_the_applied_store_proposes_nothing():
    w = world(
        link("a", "gone", "associated"),
        link("a", "b", "associated", created_at=days_ago(5)),
        link("b", "a", "associated", created_at=days_ago(9)),
        link("b", "c", "temporal"),
    )
    _, intents = run(w)
    applied = w.apply(intents, AS_OF)
    assert sorted((x["src_id"], x["dst_id"]) for x in applied.links) == [("b", "a"), ("b", "c")]
    assert run(applied)[1].num_rows == 0


def test_the_same_input_gives_the_same_output():
    w = world(link("a", "gone", "associated"), link("a", "b", "associated"), link("b", "a", "associated"))
    first, second = run(w), run(w)
    assert first[0].equals(second[0]) and first[1].equals(second[1])


def test_the_five_analyses_compose_into_change_sets_that_hold_the_invariants():
    from engram_pipelines.analyses.knowledge.compression import compression
    from engram_pipelines.analyses.knowledge.semantic import semantic_extraction
    from engram_pipelines.analyses.links.associations import associations
    from engram_pipelines.analyses.links.temporal import temporal_edges
    from engram_pipelines.changes.compose import compose
    from engram_pipelines.changes.invariants import (
        crosses_namespace,
        destructive_on_pinned,
        several_writes_per_row,
    )
    from engram_pipelines.config.model import Config
    from tests.support.world import axis, direction, episode

    rows = [episode(f"e{i}", direction(4.0 * i), f"c{i}", importance=0.2, score=0.1) for i in range(3)]
    rows[0]["pinned"] = True
    rows += [episode(f"t{i}", axis(3 + i), "talk", created_at=days_ago(5 - i)) for i in range(3)]
    rows += [
        episode("x0", direction(0.0), "c1", namespace="ns2"),
        episode("x1", direction(40.0), "c2", namespace="ns2"),
    ]
    w = World(rows, [link("e1", "gone", "associated"), link("t0", "t1", "temporal", weight=0.04)])
    memories, links, pairs, vectors = w.memories(), w.links_table(), w.pairs(), w.vectors()
    scores = pa.table({"id": memories["id"], "score": memories["score"]})
    config = Config()
    intents = pa.concat_tables(
        [
            semantic_extraction(memories, links, pairs, vectors, config, AS_OF).intents,
            compression(memories, pairs, scores, config, AS_OF).intents,
            associations(memories, links, pairs, config, AS_OF).intents,
            temporal_edges(memories, links, config, AS_OF).intents,
            garbage_links(memories, links, AS_OF).intents,
        ]
    )
    assert set(intents["source"].to_pylist()) == {"semantic", "associations", "temporal", "gc"}
    sets = compose(intents, memories, as_of=AS_OF.date(), at=AS_OF, job="test")
    for table in sets.values():
        assert not destructive_on_pinned(table, memories)
        assert not crosses_namespace(table, memories)
        assert not several_writes_per_row(table)
