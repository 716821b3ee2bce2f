"""Semantic extraction on small hand-built vectors; and `World`, an in-memory store the analysis tests share."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engram_pipelines.analyses.knowledge.chitchat import carries_knowledge
from engram_pipelines.analyses.knowledge.clusters import coherent_clusters
from engram_pipelines.analyses.knowledge.nodes import NodeState, node_id_for
from engram_pipelines.analyses.knowledge.semantic import semantic_extraction
from engram_pipelines.config.model import Config
from engram_pipelines.core.timestamps import format_timestamp
from tests.support.lifecycle import AS_OF, days_ago, snapshot
from tests.support.world import DIM, World, axis, direction, episode, link, ops, pairs_for, params_of


# -- semantic helpers ----------------------------------------------------------------------------------------
def run(
    world: World, at: dt.datetime = AS_OF, config: Config | None = None, fading: Sequence[str] = ()
) -> tuple[pa.Table, pa.Table]:
    """The analysis given every vector; every test also holds it equal to the analysis reading the vectors of
    the ids it asks for only (as the night reads them from the warehouse)."""
    results = [
        semantic_extraction(
            world.memories(),
            world.links_table(),
            world.pairs(),
            vectors,
            config or Config(),
            at,
            fading=pa.array(list(fading), pa.string()),
        )
        for vectors in (world.vectors(), _reader(world.vectors(), []))
    ]
    whole, asked = results
    assert whole.table.equals(asked.table) and whole.intents.equals(asked.intents)
    return whole.table, whole.intents


def _reader(vectors: pa.Table, asked: list[str]) -> Callable[[pa.Array], pa.Table]:
    """Reads the vectors of the ids it is given, and records them in `asked`."""

    def read(ids: pa.Array) -> pa.Table:
        asked.extend(ids.to_pylist())
        return vectors.filter(pc.is_in(vectors["id"], value_set=ids))

    return read


def state(**fields: Any) -> dict[str, Any]:
    base = {
        "probability": 0.6,
        "confidence": 0.7,
        "tier": "corroborated",
        "sources": [],
        "lost": [],
        "contexts": 0,
        "variability": 1.0,
        "cycles": 1,
        "cycleAt": format_timestamp(days_ago(5)),
        "reinforcedAt": format_timestamp(days_ago(5)),
        "decayedAt": None,
        "createdAt": format_timestamp(days_ago(40)),
        "representative": "",
        "dissent": [],
    }
    base.update(fields)
    base["contexts"] = base["contexts"] or len(base["sources"])
    base["representative"] = base["representative"] or base["sources"][0]
    return base


def node_row(node_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": node_id,
        "kind": "semantic",
        "tier": "ltm",
        "content": "a known fact",
        "created_at": days_ago(40),
        "metadata": {"semantic": state(**fields)},
    }


def node_state(world_or_intents: World | pa.Table, node_id: str) -> dict[str, Any]:
    if isinstance(world_or_intents, World):
        return world_or_intents.row(node_id)["metadata"]["semantic"]
    for row in world_or_intents.to_pylist():
        if row["target_id"] == node_id and row["op"] == "insert_memory":
            return json.loads(row["params"])["row"]["metadata"]["semantic"]
        if row["target_id"] == node_id and row["op"] == "set_metadata":
            return json.loads(row["params"])["values"]["semantic"]
    raise KeyError(node_id)


def three_close(conversations: tuple[str, str, str], namespace: str = "ns1", prefix: str = "e") -> list[dict]:
    return [
        episode(f"{prefix}{i}", direction(angle), conv, namespace=namespace)
        for i, (angle, conv) in enumerate(zip((0.0, 4.0, 8.0), conversations, strict=True))
    ]


# -- the examples ------------------------------------------------------------------------------------
def test_three_close_memories_from_three_conversations_give_one_corroborated_node():
    world = World(three_close(("c1", "c2", "c3")) + [episode("far", axis(3), "c9")])
    result, intents = run(world)
    node_id = node_id_for("ns1", ["e0", "e1", "e2"])
    assert ops(intents) == [
        ("insert_memory", node_id),
        *sorted(("upsert_link", f"{node_id}|{s}|derived-from") for s in ("e0", "e1", "e2")),
    ]
    row = params_of(intents, "insert_memory", node_id)["row"]
    assert row["kind"] == "semantic" and row["tier"] == "ltm" and row["namespace"] == "ns1"
    assert (
        row["content"] == "The team deploys the billing service from host-eb"
    )  # the medoid (the middle vector)
    assert row["created_at"] == format_timestamp(AS_OF)
    s = row["metadata"]["semantic"]
    assert s["tier"] == "corroborated" and s["sources"] == ["e0", "e1", "e2"] and s["contexts"] == 3
    assert s["cycles"] == 1 and s["representative"] == "e1"
    # The prior for the first source, then one reinforcement per further source.
    assert s["confidence"] == pytest.approx(1 - 0.5 * 0.9**2, abs=1e-6)
    assert s["probability"] == pytest.approx(1 - 0.5 * 0.95**2, abs=1e-6)
    assert result.filter(pa.compute.equal(result["action"], "create")).num_rows == 1
    assert set(intents["review_class"].to_pylist()) == {"auto"} and set(intents["source"].to_pylist()) == {
        "semantic"
    }


def test_the_same_three_from_one_conversation_give_none():
    world = World(three_close(("c1", "c1", "c1")))
    result, intents = run(world)
    assert intents.num_rows == 0
    assert result["action"].to_pylist() == ["reject"]
    assert result["reason"][0].as_py() == "3 memories from one context"


def test_two_from_one_conversation_give_none_though_their_ratio_is_half():
    """2 rows in 1 conversation: variability 0.5 meets the threshold, but repetition needs distinct contexts."""
    world = World(three_close(("c1", "c1", "c2"))[:2])
    result, intents = run(world)
    assert intents.num_rows == 0 and result["action"].to_pylist() == ["reject"]


def test_memories_without_context_metadata_share_one_context():
    rows = [episode(f"e{i}", direction(a), None) for i, a in enumerate((0.0, 4.0, 8.0))]
    _, intents = run(World(rows))
    assert intents.num_rows == 0


def eight_sources_world(new_conversation: str = "c8") -> World:
    sources = [f"s{i}" for i in range(7)]
    rows = [episode(s, direction(2.0 * i), f"c{i}") for i, s in enumerate(sources)]
    rows.append(episode("s7", direction(14.0), new_conversation))
    rows.append(node_row("n1", sources=sources, confidence=0.85, tier="assessed", cycles=3))
    return World(rows, [link("n1", s, "derived-from") for s in sources])


def test_a_node_with_seven_sources_and_confidence_085_becomes_baseline_at_its_eighth():
    world = eight_sources_world()
    result, intents = run(world)
    s = node_state(intents, "n1")
    assert s["sources"] == [f"s{i}" for i in range(8)]
    assert s["confidence"] == pytest.approx(0.85 + 0.15 * 0.1)
    assert s["probability"] == pytest.approx(0.6 + 0.4 * 0.05)
    assert s["tier"] == "baseline" and s["cycles"] == 4 and s["reinforcedAt"] == format_timestamp(AS_OF)
    assert ("upsert_link", "n1|s7|derived-from") in ops(intents)
    row = result.filter(pa.compute.equal(result["node_id"], "n1")).to_pylist()[0]
    assert row["previous_tier"] == "assessed" and row["tier"] == "baseline" and row["new_sources"] == 1
    # A baseline node: its close episodic rows are marked semanticCompressed (a marker, nothing hidden).
    marked = {t for op, t in ops(intents) if op == "set_metadata" and t != "n1"}
    assert marked == {f"s{i}" for i in range(8)}
    mark = params_of(intents, "set_metadata", "s3")["values"]["semanticCompressed"]
    assert mark["node"] == "n1" and mark["score"] >= 0.85


def test_a_node_not_reinforced_for_45_days_loses_confidence_once_per_cycle():
    rows = [episode("a", direction(0), "c1"), episode("b", direction(60, toward=2), "c2")]
    rows.append(
        node_row("n1", sources=["a", "b"], confidence=0.7, reinforcedAt=format_timestamp(days_ago(45)))
    )
    world = World(rows)
    _, intents = run(world)
    assert ops(intents) == [("set_metadata", "n1")]
    s = node_state(intents, "n1")
    assert s["confidence"] == pytest.approx(0.7 * 0.95) and s["decayedAt"] == format_timestamp(AS_OF)
    applied = world.apply(intents, AS_OF)
    assert run(applied)[1].num_rows == 0  # the same cycle again: nothing
    next_day = AS_OF + dt.timedelta(days=1)
    assert node_state(run(applied, next_day)[1], "n1")["confidence"] == pytest.approx(0.7 * 0.95 * 0.95)


def test_a_node_reinforced_29_days_ago_keeps_its_confidence():
    rows = [episode("a", direction(0), "c1"), episode("b", direction(60, toward=2), "c2")]
    rows.append(node_row("n1", sources=["a", "b"], reinforcedAt=format_timestamp(days_ago(29))))
    assert run(World(rows))[1].num_rows == 0


# -- the other rules -----------------------------------------------------------------------------------------
def test_reinforcement_counts_only_new_sources_and_assessed_needs_two_cycles():
    world = World(three_close(("c1", "c2", "c3")))
    _, first = run(world)
    world = world.apply(first, AS_OF)
    node_id = node_id_for("ns1", ["e0", "e1", "e2"])
    assert node_state(world, node_id)["tier"] == "corroborated"
    # Next night a fourth memory from a fourth conversation: a second cycle, four sources, variability 1.
    later = AS_OF + dt.timedelta(days=1)
    world.rows.append(episode("e3", direction(6.0), "c4", created_at=AS_OF))
    _, second = run(world, later)
    s = node_state(second, node_id)
    assert s["sources"] == ["e0", "e1", "e2", "e3"] and s["cycles"] == 2 and s["tier"] == "assessed"
    assert s["confidence"] == pytest.approx(1 - 0.5 * 0.9**3, abs=1e-6)
    assert ("upsert_link", f"{node_id}|e3|derived-from") in ops(second)
    world = world.apply(second, later)
    assert run(world, later)[1].num_rows == 0
    assert run(world, later + dt.timedelta(days=1))[1].num_rows == 0


def test_a_rerun_on_the_applied_store_proposes_nothing_but_time_driven_decay():
    world = World(
        three_close(("c1", "c2", "c3")) + three_close(("c1", "c2", "c3"), namespace="ns2", prefix="f")
    )
    _, intents = run(world)
    assert len([o for o, _ in ops(intents) if o == "insert_memory"]) == 2
    world = world.apply(intents, AS_OF)
    assert run(world)[1].num_rows == 0
    assert run(world, AS_OF + dt.timedelta(days=7))[1].num_rows == 0
    _, stale = run(world, AS_OF + dt.timedelta(days=31))
    assert {op for op, _ in ops(stale)} == {"set_metadata"} and stale.num_rows == 2
    assert all(json.loads(p)["values"]["semantic"]["decayedAt"] for p in stale["params"].to_pylist())


def test_the_same_input_gives_the_same_output():
    world = eight_sources_world()
    first, second = run(world), run(world)
    assert first[0].equals(second[0]) and first[1].equals(second[1])


def test_texts_parsed_on_an_earlier_night_give_what_parsing_gives(tmp_path, monkeypatch):
    """With a cache root each distinct text is parsed once across nights; the result is the parse's."""
    from engram_pipelines.analyses.knowledge import texts

    world = eight_sources_world()
    parsed: list[str] = []
    parse = texts.text_facts
    monkeypatch.setattr(texts, "text_facts", lambda contents: (parsed.extend(contents), parse(contents))[1])

    def cached() -> tuple[pa.Table, pa.Table]:
        result = semantic_extraction(
            world.memories(),
            world.links_table(),
            world.pairs(),
            world.vectors(),
            Config(),
            AS_OF,
            cache_root=tmp_path,
        )
        return result.table, result.intents

    plain, first = run(world), cached()
    assert parsed and first[0].equals(plain[0]) and first[1].equals(plain[1])
    parsed.clear()
    second = cached()
    assert parsed == [] and second[0].equals(plain[0]) and second[1].equals(plain[1])


def test_nothing_crosses_a_namespace():
    rows = three_close(("c1", "c2", "c3"))
    rows += [
        episode("x0", direction(1.0), "c4", namespace="ns2"),
        episode("x1", direction(2.0), "c5", namespace="ns2"),
    ]
    world = World(rows)
    # A pair that claims ns1 but names an ns2 row is ignored (vector_pairs never makes one; a bad input might).
    pairs = pa.concat_tables(
        [
            world.pairs(),
            pa.Table.from_pylist(
                [
                    {
                        "namespace": "ns1",
                        "left_id": "e0",
                        "right_id": "x0",
                        "score": 0.99,
                        "exact_content": False,
                    }
                ],
                schema=world.pairs().schema,
            ),
        ]
    )
    intents = semantic_extraction(
        world.memories(), world.links_table(), pairs, world.vectors(), Config(), AS_OF
    ).intents
    inserts = [
        json.loads(p)["row"]
        for o, p in zip(intents["op"].to_pylist(), intents["params"].to_pylist(), strict=True)
        if o == "insert_memory"
    ]
    by_namespace = {r["namespace"]: r["metadata"]["semantic"]["sources"] for r in inserts}
    assert by_namespace == {"ns1": ["e0", "e1", "e2"], "ns2": ["x0", "x1"]}
    for row in intents.to_pylist():
        params = json.loads(row["params"])
        ids = {row["target_id"].split("|")[0], params.get("dst_id")} - {None}
        assert all(i.startswith("sem-") or {"ns1": "e", "ns2": "x"}[row["namespace"]] == i[0] for i in ids)


def test_replaced_queued_archived_contradicted_and_non_episodic_rows_never_seed_a_node():
    rows = three_close(("c1", "c2", "c3"))
    rows[2]["superseded_by"] = "e0"  # replaced by a row that contradicts it (the `supersede` policy)
    rows.append(episode("q", direction(2.0), "c4", zone="purge_queue"))
    rows.append(episode("k", direction(3.0), "c5", kind="summary"))
    _, intents = run(World(rows, [link("e0", "e2", "contradicts")]))
    assert [o for o, _ in ops(intents)].count("insert_memory") == 1
    assert node_state(intents, node_id_for("ns1", ["e0", "e1"]))["sources"] == ["e0", "e1"]
    # A replaced, archived or disputed fact never becomes knowledge (on real data, nodes revived facts that
    # were already replaced: "Maya lives in Boston" after she moved).
    for change in ({"zone": "archived"}, {"metadata": {"contradictionWith": ["e0"]}}):
        rows = three_close(("c1", "c2", "c3"))
        rows[2].update(change)
        _, intents = run(World(rows))
        assert node_state(intents, node_id_for("ns1", ["e0", "e1"]))["sources"] == ["e0", "e1"], change
    # A row that tonight's retention archives was visible when the night started: it still seeds (the node
    # keeps what fades), unless it is superseded as well.
    rows = three_close(("c1", "c2", "c3"))
    rows[2]["zone"] = "archived"
    _, intents = run(World(rows), fading=["e2"])
    assert node_state(intents, node_id_for("ns1", ["e0", "e1", "e2"]))["sources"] == ["e0", "e1", "e2"]
    # A row merged into its canonical (superseded, not contradicted) still seeds: the canonical holds it, so
    # approving tonight's gated merges before the next run changes no cluster.
    rows = three_close(("c1", "c2", "c3"))
    rows[2]["superseded_by"] = "e0"
    _, intents = run(World(rows))
    assert node_state(intents, node_id_for("ns1", ["e0", "e1", "e2"]))["sources"] == ["e0", "e1", "e2"]


def test_dissent_is_recorded_never_discarded():
    rows = [
        episode("a", direction(0.0), "c1"),
        episode("b", direction(1.0), "c2"),
        episode("c", direction(-1.0), "c3"),
        episode("d", direction(3.0), "c4"),  # close, but says the opposite of a (more central than d)
        episode("e", axis(4), "c5", metadata={"contradictionWith": ["b"]}),  # unrelated vector, contradicts b
    ]
    world = World(rows, [link("d", "a", "contradicts")])
    _, intents = run(world)
    node_id = node_id_for("ns1", ["a", "b", "c"])
    s = node_state(intents, node_id)
    assert s["sources"] == ["a", "b", "c"] and s["representative"] == "a"
    assert [(d["id"], d["reason"]) for d in s["dissent"]] == [
        ("d", f"contradicts a, a source in {_cluster_of(intents, node_id)}"),
        ("e", "contradicts b"),
    ]
    world = world.apply(intents, AS_OF)
    assert run(world)[1].num_rows == 0
    # A new contradiction later is appended; the earlier dissent stays.
    world.rows.append(episode("f", axis(5), "c6", metadata={"contradictionWith": ["c"]}))
    later = AS_OF + dt.timedelta(days=1)
    s = node_state(run(world, later)[1], node_id)
    assert [d["id"] for d in s["dissent"]] == ["d", "e", "f"]


def _cluster_of(intents: pa.Table, node_id: str) -> str:
    return next(r["cluster_id"] for r in intents.to_pylist() if r["target_id"] == node_id)


def test_cascade_scales_confidence_by_valid_over_total_once():
    rows = [episode(s, direction(3.0 * i), f"c{i}") for i, s in enumerate(("s1", "s2", "s3"))]
    rows[2]["superseded_by"] = "s1"  # replaced by a row that contradicts it: its evidence is lost
    rows[2]["metadata"]["contradictionWith"] = ["s1"]
    rows.append(
        node_row("n1", sources=["s1", "s2", "s3", "s4"], confidence=0.8, tier="corroborated")
    )  # s4 purged
    world = World(rows)
    _, intents = run(world)
    s = node_state(intents, "n1")
    assert s["confidence"] == pytest.approx(0.8 * 2 / 4) and s["lost"] == ["s3", "s4"]
    assert s["tier"] == "corroborated" and s["sources"] == ["s1", "s2", "s3", "s4"]
    world = world.apply(intents, AS_OF)
    assert run(world)[1].num_rows == 0
    # One more source lost later: the product stays valid / total (1/4).
    world.row("s2")["zone"] = "purge_queue"
    s = node_state(run(world, AS_OF + dt.timedelta(days=1))[1], "n1")
    assert s["confidence"] == pytest.approx(0.8 / 4) and s["tier"] == "raw"


def test_a_source_merged_into_its_canonical_stays_evidence():
    """A merge hides a row only when its canonical says everything it says: nothing is lost, nothing cascades
    (on real facts, the merges approved after a night made the next run of the same day rewrite 25 nodes)."""
    rows = [episode(s, direction(3.0 * i), f"c{i}") for i, s in enumerate(("s1", "s2", "s3"))]
    rows[2]["superseded_by"] = "s1"
    rows.append(node_row("n1", sources=["s1", "s2", "s3"], confidence=0.8, tier="corroborated"))
    assert run(World(rows))[1].num_rows == 0


def test_single_source_ceiling():
    rows = [episode("a", direction(0), "c1"), node_row("n1", sources=["a"], confidence=0.9, tier="raw")]
    s = node_state(run(World(rows))[1], "n1")
    assert s["confidence"] == 0.6


def test_episodic_rows_close_to_an_assessed_node_are_marked_and_far_ones_not():
    sources = ["s0", "s1", "s2", "s3"]
    rows = [episode(s, direction(2.0 * i), f"c{i}") for i, s in enumerate(sources)]
    rows.append(episode("far", direction(50.0, toward=2), "c9"))  # cos ~0.64: no pair, no mark
    rows.append(episode("done", direction(1.0), "c0", metadata={"semanticCompressed": {"node": "n1"}}))
    known = [*sources, "done"]
    consistent = {"contexts": 4, "variability": 0.8}  # `done` shares c0 with s0
    rows.append(node_row("n1", sources=known, tier="assessed", cycles=2, **consistent))
    _, intents = run(World(rows))
    marked = {t for op, t in ops(intents) if op == "set_metadata"}
    assert marked == set(sources)  # the node itself is unchanged; `done` was marked before
    corroborated = [
        r if r["id"] != "n1" else node_row("n1", sources=known, cycles=1, **consistent) for r in rows
    ]
    assert run(World(corroborated))[1].num_rows == 0


def test_only_the_vectors_the_run_looks_up_are_read():
    sources = ["s0", "s1", "s2", "s3"]
    rows = [episode(s, direction(2.0 * i), f"c{i}") for i, s in enumerate(sources)]
    rows.append(episode("far", direction(50.0, toward=2), "c9"))  # no pair: read only as a row to mark
    rows.append(node_row("n1", sources=sources, tier="assessed", cycles=2, contexts=4, variability=1.0))
    rows.append(episode("alone", direction(7.0), "c1", namespace="ns2"))  # no pair, no node in ns2
    world = World(rows)
    asked: list[str] = []
    result = semantic_extraction(
        world.memories(), world.links_table(), world.pairs(), _reader(world.vectors(), asked), Config(), AS_OF
    )
    assert {"n1", *sources, "far"} <= set(asked) and "alone" not in asked
    assert result.intents.equals(run(world)[1])


def test_pinned_and_block_rows_are_never_hidden():
    rows = three_close(("c1", "c2", "c3"))
    rows[0]["pinned"] = True
    rows.append(episode("blk", direction(2.0), "c7", kind="block"))
    _, intents = run(World(rows))
    assert set(intents["op"].to_pylist()) <= {"insert_memory", "upsert_link", "set_metadata"}


def test_coherent_clusters_never_chain():
    rows = [
        episode("a", direction(0), "c1"),
        episode("b", direction(40), "c2"),
        episode("c", direction(80), "c3"),
    ]
    memories = snapshot(rows, dim=DIM)
    clusters = coherent_clusters(pairs_for(memories), memories.select(["id", "namespace"]), 0.7, prefix="t")
    assert all(not {"a", "c"} <= set(c.members) for c in clusters)


def test_node_state_round_trips():
    value = state(sources=["b", "a"], dissent=[{"id": "x", "reason": "r", "at": "t"}])
    assert NodeState.from_json(value).to_json() == {**value, "sources": ["a", "b"]}


def test_empty_inputs():
    world = World([])
    extracted = semantic_extraction(
        world.memories(), world.links_table(), world.pairs(), world.vectors(), Config(), AS_OF
    )
    assert extracted.table.num_rows == 0 and extracted.intents.num_rows == 0


def test_the_sources_of_a_hidden_node_stay_claimed():
    rows = three_close(("c1", "c2", "c3"))
    node_id = node_id_for("ns1", ["e0", "e1", "e2"])
    rows.append({**node_row(node_id, sources=["e0", "e1", "e2"], reinforcedAt=None), "zone": "archived"})
    assert run(World(rows))[1].num_rows == 0  # neither re-created nor maintained


# -- knowledge, not chit-chat (real dialogue turns: 58% of the nodes built from them were pleasantries) -------
@pytest.mark.parametrize(
    "text",
    [
        "Nate: No problem, Joanna! Always happy to share them with you.",
        "John: Hey Tim",
        "Deborah: Certainly! Here's the confirmation.",
        "James: Thank you, John! Take care and see you soon!",
        "Melanie: Hey Caroline! What's up with you lately? Anything new?",
        "Jolene: Your events are awesome for helping people connect and learn!",
        "Thanks!",
        "Ann: Thanks! Your encouragement means a lot to me. I'm ready to keep pushing for my goals!",
        "Ann: Yeah, it felt great being out there with my team.",
        "Bob advised Ann to stay motivated and keep chasing her dreams.",
        "Bob is supportive of Ann's new career and proud of her progress in the field.",
        "Ann inquires about Bob's travel plans after finishing the big project.",
    ],
)
def test_greetings_thanks_reactions_questions_and_farewells_are_chit_chat(text):
    assert not carries_knowledge(text)


@pytest.mark.parametrize(
    "text",
    [
        "Caroline: I started playing acoustic guitar about five years ago; it helps me express myself.",
        "John: Thanks! The Wolves are my favourite team and I watch every game.",
        "Caroline attended an LGBTQ support group and found the stories inspiring.",
        "Maya lives in Boston.",
        "Bob: Hey Ann, long time no see! Guess what? I finally opened my own bike repair shop downtown!",
        "Found some vintage lenses at the flea market in Lisbon.",
        "Ann is considering asking a colleague named Bob to join her bowling team.",
    ],
)
def test_statements_of_fact_carry_knowledge(text):
    assert carries_knowledge(text)


def test_chit_chat_repeated_in_every_conversation_never_becomes_a_node():
    rows = three_close(("c1", "c2", "c3"))
    for row, text in zip(
        rows, ("John: Hey Tim!", "John: Hey Tim, long time no talk!", "John: Bye, Tim!"), strict=True
    ):
        row["content"] = text
    _, intents = run(World(rows))
    assert intents.num_rows == 0


def test_a_node_carries_the_text_of_its_most_informative_source():
    rows = three_close(("c1", "c2", "c3"))
    rows[0]["content"] = "Maya moved to Denver for a new job at a hospital near her sister"
    rows[1]["content"] = "Maya moved to Denver for a new job"
    rows[2]["content"] = "Maya moved to Denver"
    _, intents = run(World(rows))
    node_id = node_id_for("ns1", ["e0", "e1", "e2"])
    assert params_of(intents, "insert_memory", node_id)["row"]["content"] == rows[0]["content"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Maya's phone number is 617-555-0142.", "Maya's new phone number is 720-555-0199."),
        ("Maya lives in Boston.", "Maya's sister Ana lives in Denver."),
        ("Tom uses vim as his editor.", "Tom switched his editor to VS Code."),
    ],
)
def test_two_related_facts_are_not_a_repetition(first, second):
    """On a hand-made history each of these pairs became a node that revived the replaced value."""
    rows = three_close(("c1", "c2", "c3"))[:2]
    rows[0]["content"], rows[1]["content"] = first, second
    _, intents = run(World(rows))
    assert intents.num_rows == 0


def test_a_paraphrase_in_two_contexts_is_a_repetition():
    rows = three_close(("c1", "c2", "c3"))[:2]
    rows[0]["content"] = "Maya enjoys hiking on weekends."
    rows[1]["content"] = "On weekends Maya likes to go hiking in the hills."
    _, intents = run(World(rows))
    assert [op for op, _ in ops(intents)].count("insert_memory") == 1
