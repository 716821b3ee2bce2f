"""Associations: related but unlinked pairs below the merge band get `associated` links, top-k per memory."""

from __future__ import annotations

import pyarrow as pa

from engram_pipelines.analyses.links.associations import associations
from engram_pipelines.config.model import Config
from engram_pipelines.vectors.pairs import PAIR_SCHEMA
from tests.support.lifecycle import AS_OF, snapshot
from tests.support.world import World, direction, episode, link, links_table, ops, params_of


def pairs_of(rows: list[tuple[str, str, float]], namespace: str = "ns1") -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"namespace": namespace, "left_id": a, "right_id": b, "score": s, "exact_content": False}
            for a, b, s in rows
        ],
        schema=PAIR_SCHEMA,
    )


def rows(*ids: str, **fields: object) -> list[dict]:
    return [{"id": i, **fields} for i in ids]


def run(memories: pa.Table, pairs: pa.Table, links: list[dict] | None = None, config: Config | None = None):
    result = associations(memories, links_table(links or []), pairs, config or Config(), AS_OF)
    return result.table, result.intents


def test_a_related_unlinked_pair_gets_an_associated_link_with_the_score_as_weight():
    memories = snapshot(rows("a", "b"))
    result, intents = run(memories, pairs_of([("a", "b", 0.78)]))
    assert ops(intents) == [("upsert_link", "a|b|associated")]
    assert params_of(intents, "upsert_link", "a|b|associated") == {
        "src_id": "a",
        "dst_id": "b",
        "kind": "associated",
        "weight": 0.78,
        "origin": "associations",
    }
    assert intents["review_class"].to_pylist() == ["auto"] and intents["source"].to_pylist() == [
        "associations"
    ]
    assert result.to_pylist() == [
        {"namespace": "ns1", "src_id": "a", "dst_id": "b", "score": 0.78, "src_rank": 1, "dst_rank": 1}
    ]


def test_the_band_is_association_threshold_inclusive_to_merge_threshold_exclusive():
    memories = snapshot(rows("a", "b", "c", "d", "e", "f"))
    pairs = pairs_of([("a", "b", 0.70), ("c", "d", 0.85), ("e", "f", 0.6999)])
    assert [t for _, t in ops(run(memories, pairs)[1])] == ["a|b|associated"]
    config = Config.model_validate({"similarity": {"association_threshold": 0.75}})
    assert run(memories, pairs, config=config)[1].num_rows == 0


def test_pairs_linked_either_way_by_any_kind_are_left_alone():
    memories = snapshot(rows("a", "b", "c", "d"))
    pairs = pairs_of([("a", "b", 0.8), ("c", "d", 0.8)])
    linked = [link("b", "a", "temporal"), link("c", "d", "associated", weight=0.8)]
    assert run(memories, pairs, linked)[1].num_rows == 0


def test_only_live_rows_of_the_pairs_namespace_are_associated():
    memories = snapshot(
        rows("a", "b")
        + [
            {"id": "s", "superseded_by": "a"},
            {"id": "z", "zone": "archived"},
            {"id": "x", "namespace": "ns2"},
        ]
    )
    pairs = pairs_of([("a", "s", 0.8), ("a", "z", 0.8), ("a", "x", 0.8), ("a", "b", 0.8)])
    assert [t for _, t in ops(run(memories, pairs)[1])] == ["a|b|associated"]


def test_top_k_per_memory_keeps_a_pair_in_the_top_k_of_either_side():
    memories = snapshot(rows("a", "b", "c"))
    pairs = pairs_of([("a", "b", 0.80), ("a", "c", 0.75), ("b", "c", 0.72)])
    config = Config.model_validate({"similarity": {"association_top_k": 1}})
    # a: b, c; b: a, c; c: a, b. (b, c) is second for both sides: dropped. (a, c) is c's first: kept.
    assert [t for _, t in ops(run(memories, pairs, config=config)[1])] == ["a|b|associated", "a|c|associated"]
    # An existing association uses up its rows' k: with a-b linked, the same pair set gives only a-c.
    linked = [link("a", "b", "associated", weight=0.8)]
    assert [t for _, t in ops(run(memories, pairs, linked, config)[1])] == ["a|c|associated"]


def test_a_hub_pair_survives_only_in_the_top_k_of_one_of_its_rows():
    spokes = [f"s{i}" for i in range(8)]
    memories = snapshot(rows("hub", *spokes))
    # Every spoke has a better neighbour of its own, so of the hub's pairs only the hub's own best is kept.
    pairs = pairs_of(
        [("hub", s, 0.70 + 0.01 * i) for i, s in enumerate(spokes)]
        + [(spokes[i], spokes[i + 1], 0.84) for i in range(0, 8, 2)]
    )
    config = Config.model_validate({"similarity": {"association_top_k": 1}})
    kept = {t for _, t in ops(run(memories, pairs, config=config)[1])}
    assert {t for t in kept if "hub" in t} == {"hub|s7|associated"}
    assert {t for t in kept if "hub" not in t} == {f"s{i}|s{i + 1}|associated" for i in range(0, 8, 2)}


def test_a_second_run_on_the_applied_store_proposes_nothing():
    vectors = [direction(a) for a in (0.0, 40.0, 80.0, 120.0)]  # neighbours at cos 0.766, next ones at 0.17
    world = World([episode(f"m{i}", v, f"c{i}") for i, v in enumerate(vectors)])
    intents = associations(world.memories(), world.links_table(), world.pairs(), Config(), AS_OF).intents
    assert [t for _, t in ops(intents)] == ["m0|m1|associated", "m1|m2|associated", "m2|m3|associated"]
    applied = world.apply(intents, AS_OF)
    again = associations(applied.memories(), applied.links_table(), applied.pairs(), Config(), AS_OF).intents
    assert again.num_rows == 0
    config = Config.model_validate({"similarity": {"association_top_k": 1}})
    first = associations(world.memories(), world.links_table(), world.pairs(), config, AS_OF).intents
    applied = world.apply(first, AS_OF)
    again = associations(applied.memories(), applied.links_table(), applied.pairs(), config, AS_OF).intents
    assert again.num_rows == 0


def test_the_same_input_gives_the_same_output():
    memories = snapshot(rows("a", "b", "c"))
    pairs = pairs_of([("a", "b", 0.80), ("a", "c", 0.75), ("b", "c", 0.72)])
    first, second = run(memories, pairs), run(memories, pairs)
    assert first[0].equals(second[0]) and first[1].equals(second[1])
