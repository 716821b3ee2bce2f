"""Temporal edges: cycle decay, traversal boost, pruning, and the missing forward edges of conversations."""

from __future__ import annotations

import datetime as dt

import pytest

from engram_pipelines.analyses.links.temporal import temporal_edges
from engram_pipelines.config.model import Config
from tests.support.lifecycle import AS_OF, days_ago
from tests.support.world import World, link, ops, params_of

NEXT_DAY = AS_OF + dt.timedelta(days=1)


def plain(memory_id: str, conversation: str | None = None, minutes: int = 0, **fields: object) -> dict:
    metadata = {"conversation_id": conversation} if conversation else {}
    return {
        "id": memory_id,
        "metadata": metadata,
        "created_at": days_ago(30) + dt.timedelta(minutes=minutes),
        **fields,
    }


def run(world: World, at: dt.datetime = AS_OF, config: Config | None = None):
    result = temporal_edges(world.memories(), world.links_table(), config or Config(), at)
    return result.table, result.intents


def weights(intents, op: str = "upsert_link") -> dict[str, float]:
    return {t: params_of(intents, op, t)["weight"] for o, t in ops(intents) if o == op and "|" in t}


def two_rows(**link_fields: object) -> World:
    return World([plain("a"), plain("b")], [link("a", "b", "temporal", **link_fields)])


def test_cycles_decay_lazily_time_alone_writes_nothing_until_the_prune():
    # 0.8 x 0.95^1 = 0.76 now: a drift, not a write.
    assert run(two_rows(weight=0.8, updated_at=days_ago(1)))[1].num_rows == 0
    # 0.8 x 0.95^55 = 0.048 < 0.05: pruned after 55 quiet nights, as 55 nightly multiplications would.
    result, intents = run(two_rows(weight=0.8, updated_at=days_ago(55)))
    assert ops(intents) == [("delete_link", "a|b|temporal")] and result["action"].to_pylist() == ["prune"]
    assert run(two_rows(weight=0.8, updated_at=days_ago(54)))[1].num_rows == 0  # 0.8 x 0.95^54 = 0.0501


def test_a_link_traversed_since_the_last_cycle_is_boosted_but_never_above_one():
    world = two_rows(weight=0.8, updated_at=days_ago(2), traversed_at=days_ago(1))
    _, intents = run(world)
    assert weights(intents) == {"a|b|temporal": pytest.approx(0.8 * 0.95**2 * 1.2)}
    assert params_of(intents, "upsert_link", "a|b|temporal")["origin"] == "agent"  # kept
    assert set(intents["review_class"].to_pylist()) == {"auto"}
    world = two_rows(weight=0.95, updated_at=days_ago(2), traversed_at=days_ago(1))
    assert weights(run(world)[1]) == {"a|b|temporal": 1.0}
    world = two_rows(weight=1.0, updated_at=days_ago(2), traversed_at=days_ago(1))
    assert run(world)[1].num_rows == 0  # already at the ceiling: nothing to write
    world = two_rows(weight=0.8, updated_at=days_ago(1), traversed_at=days_ago(2))  # traversed before
    assert run(world)[1].num_rows == 0


def test_a_weight_falling_below_the_prune_threshold_is_deleted():
    result, intents = run(two_rows(weight=0.052, updated_at=days_ago(1)))
    assert ops(intents) == [("delete_link", "a|b|temporal")]
    assert params_of(intents, "delete_link", "a|b|temporal") == {
        "src_id": "a",
        "dst_id": "b",
        "kind": "temporal",
    }
    assert result["action"].to_pylist() == ["prune"]


def test_a_cycle_happens_once_per_as_of_instant():
    world = two_rows(weight=0.8, updated_at=days_ago(1), traversed_at=days_ago(0.5))
    _, intents = run(world)
    applied = world.apply(intents, AS_OF)
    assert run(applied)[1].num_rows == 0  # rerun of the same partition
    assert run(applied, NEXT_DAY)[1].num_rows == 0  # a quiet next night: the weight only drifts


def test_other_kinds_and_links_with_a_missing_endpoint_are_not_cycled():
    world = World(
        [plain("a"), plain("b")],
        [
            link("a", "b", "associated", updated_at=days_ago(1)),
            link("a", "gone", "temporal", updated_at=days_ago(1)),
        ],
    )
    assert run(world)[1].num_rows == 0


def conversation(name: str, size: int, namespace: str = "ns1", prefix: str | None = None) -> list[dict]:
    prefix = prefix or name
    return [plain(f"{prefix}{i}", name, minutes=10 * i, namespace=namespace) for i in range(size)]


def test_missing_forward_edges_are_built_k_neighbours_forward_above_backward():
    world = World(conversation("c", 5) + [plain("loner")])
    result, intents = run(world)
    built = weights(intents)
    forward = {(i, j): built[f"c{i}|c{j}|temporal"] for i in range(5) for j in range(i + 1, min(i + 4, 5))}
    backward = {(i, j): built[f"c{j}|c{i}|temporal"] for i, j in forward}
    assert len(built) == 2 * 9  # 4 + 3 + 2 neighbour pairs within distance 3, both ways
    assert (
        forward[(0, 1)] == 1.0
        and forward[(0, 2)] == 0.5
        and forward[(0, 3)] == pytest.approx(1 / 3, abs=1e-6)
    )
    assert backward[(0, 1)] == 0.5 and backward[(0, 3)] == pytest.approx(0.5 / 3, abs=1e-6)
    assert all(forward[p] > backward[p] for p in forward)
    assert "c0|c4|temporal" not in built  # distance 4 > k
    marked = sorted(t for o, t in ops(intents) if o == "set_metadata")
    assert marked == ["c1", "c2", "c3", "c4"]
    assert params_of(intents, "set_metadata", "c2")["values"]["temporalEdges"]["neighbors"] == 3
    assert set(result["action"].to_pylist()) == {"build"}


def test_existing_edges_are_kept_and_conversations_and_namespaces_never_mix():
    rows = conversation("c", 2) + conversation("d", 2) + conversation("c", 2, namespace="ns2", prefix="x")
    world = World(rows, [link("c0", "c1", "temporal", weight=0.3, updated_at=AS_OF)])
    _, intents = run(world)
    assert sorted(weights(intents)) == [
        "c1|c0|temporal",
        "d0|d1|temporal",
        "d1|d0|temporal",
        "x0|x1|temporal",
        "x1|x0|temporal",
    ]
    assert {r["namespace"] for r in intents.to_pylist() if r["target_id"].startswith("x")} == {"ns2"}


def test_only_live_episodic_rows_take_part_in_the_chain():
    rows = conversation("c", 3)
    rows[1]["zone"] = "archived"
    _, intents = run(World(rows))
    assert sorted(weights(intents)) == ["c0|c2|temporal", "c2|c0|temporal"]


def test_a_wired_memory_is_never_wired_again_so_pruned_edges_stay_pruned():
    world = World(conversation("c", 3))
    _, intents = run(world)
    world = world.apply(intents, AS_OF)
    assert run(world)[1].num_rows == 0  # the same partition again
    # Next night the edges only drift (decay is implicit) and nothing is built again.
    _, next_night = run(world, NEXT_DAY)
    assert next_night.num_rows == 0
    world.links = [x for x in world.links if x["src_id"] != "c2"]  # say c2's edges were pruned
    assert not [t for o, t in ops(run(world, NEXT_DAY)[1]) if o == "set_metadata" or t.startswith("c2|")]


@pytest.mark.parametrize(
    ("weights_by_edge", "pruned"),
    [
        ({("c0", "c1"): 0.052, ("c1", "c0"): 0.5}, "c0|c1|temporal"),  # the forward edge decays away
        ({("c0", "c1"): 0.5, ("c1", "c0"): 0.052}, "c1|c0|temporal"),  # the backward one: matched either way
    ],
)
def test_an_edge_history_made_and_tonight_prunes_is_not_built_again_the_next_night(weights_by_edge, pruned):
    """Both edges of an unwired pair existed (history wired it), tonight one of them decays away: the later
    memory is marked, so the next night does not rebuild what decay removed (the 30k demo rebuilt 31 the same
    day)."""
    world = World(
        conversation("c", 2),
        [
            link(src, dst, "temporal", weight=weight, updated_at=days_ago(1))
            for (src, dst), weight in weights_by_edge.items()
        ],
    )
    result, intents = run(world)
    assert sorted(ops(intents)) == [("delete_link", pruned), ("set_metadata", "c1")]
    assert sorted(result["action"].to_pylist()) == ["mark", "prune"]
    world = world.apply(intents, AS_OF)
    assert run(world)[1].num_rows == 0  # the same day again
    assert pruned not in weights(run(world, NEXT_DAY)[1])  # and the next night


def test_the_nightly_run_after_a_quiet_one_changes_only_time_driven_decay():
    world = World(conversation("c", 4))
    _, first = run(world)
    world = world.apply(first, AS_OF)
    _, second = run(world, NEXT_DAY)
    assert second.num_rows == 0, "time-driven decay is implicit: nothing to write on a quiet night"


def test_the_same_input_gives_the_same_output():
    world = World(conversation("c", 4), [link("c0", "c3", "temporal", weight=0.06, updated_at=days_ago(1))])
    first, second = run(world), run(world)
    assert first[0].equals(second[0]) and first[1].equals(second[1])
