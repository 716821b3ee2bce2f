"""Contradiction candidates from the band, the structural join and explicit links; flag and supersede."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from engram_pipelines.analyses.contradictions.policy import find_contradictions
from engram_pipelines.config.model import Config, ConfigError, load_config
from engram_pipelines.vectors.pairs import PAIR_SCHEMA
from tests.support.lifecycle import days_ago, snapshot


def _pairs(rows):
    return pa.Table.from_pylist(
        [
            {"namespace": "ns1", "left_id": a, "right_id": b, "score": s, "exact_content": False}
            for a, b, s in rows
        ],
        schema=PAIR_SCHEMA,
    )


MEMORIES = [
    {"content": "Alice lives in Paris", "created_at": days_ago(20)},
    {"content": "Alice lives in Berlin", "created_at": days_ago(2)},
    {"content": "My editor is emacs", "created_at": days_ago(10)},
    {"content": "My editor is vim", "created_at": days_ago(1)},
    {"content": "I prefer vim", "created_at": days_ago(5)},
    {"content": "I prefer vim with plugins", "created_at": days_ago(3)},
    {"content": "the build is green", "metadata": {"contradicts": "m7"}, "created_at": days_ago(4)},
    {"content": "release notes are published", "created_at": days_ago(3)},
    {"content": "Alice lives in Rome", "namespace": "ns2", "created_at": days_ago(1)},
]


def test_sources_and_flag_policy():
    memories = snapshot(MEMORIES)
    # Only the editor pair is in the cosine band; Paris/Berlin scores 0.77 with a real model (no pair here).
    result = find_contradictions(memories, _pairs([("m2", "m3", 0.9), ("m4", "m5", 0.93)]), Config())
    found = {(r["older_id"], r["newer_id"]): r for r in result.table.to_pylist()}
    assert set(found) == {("m0", "m1"), ("m2", "m3"), ("m6", "m7")}
    assert found[("m0", "m1")]["sources"] == "structural"
    assert "band" in found[("m2", "m3")]["sources"] and found[("m2", "m3")]["rule"] == "value_swap"
    assert "'emacs' vs 'vim'" in found[("m2", "m3")]["reason"]
    assert found[("m6", "m7")]["sources"] == "explicit"
    assert result.found_by_source["structural"] >= 1 and result.found_by_source["band"] == 1
    ops = sorted((i["target_id"], i["op"], i["review_class"]) for i in result.intents.to_pylist())
    assert ("m0", "flag_contradiction", "auto") in ops and ("m1", "flag_contradiction", "auto") in ops
    assert ("m1|m0|contradicts", "upsert_link", "auto") in ops
    assert not any(target == "m8" or "m8" in target for target, _, _ in ops), "nothing crosses a namespace"


def test_flagged_pairs_propose_nothing_again():
    rows = [dict(r) for r in MEMORIES[:2]]
    rows[0]["metadata"] = {"contradictionWith": ["m1"]}
    rows[1]["metadata"] = {"contradictionWith": ["m0"]}
    result = find_contradictions(snapshot(rows), _pairs([]), Config())
    assert result.table.num_rows == 1 and result.intents.num_rows == 0


def test_supersede_policy_hides_the_older_row_and_is_gated():
    config = Config.model_validate({"contradiction": {"policy": "supersede"}})
    rows = [dict(r) for r in MEMORIES[:4]]
    rows[2]["pinned"] = True
    result = find_contradictions(snapshot(rows), _pairs([("m2", "m3", 0.9)]), config)
    supersedes = [
        (i["target_id"], json.loads(i["params"]))
        for i in result.intents.to_pylist()
        if i["op"] == "supersede"
    ]
    assert supersedes == [("m0", {"by": "m1"})], "the pinned older row m2 is never superseded"
    assert {i["review_class"] for i in result.intents.to_pylist()} == {"gated"}


def test_an_unknown_policy_is_refused_naming_the_setting():
    with pytest.raises(ConfigError, match="contradiction.policy"):
        load_config(env={"MEMORY_CONTRADICTION_POLICY": "delete-both"})


def test_last_nights_result_is_reused_only_while_its_inputs_are_unchanged(tmp_path):
    from engram_pipelines.analyses.contradictions.reuse import contradictions_reusing

    def columns(table: pa.Table) -> pa.Table:
        return table.select(
            ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]
        )

    memories = columns(snapshot(MEMORIES))
    pairs = _pairs([("m2", "m3", 0.9), ("m4", "m5", 0.93)])
    first = contradictions_reusing(memories, pairs, Config(), cache_root=tmp_path)
    again = contradictions_reusing(memories, pairs, Config(), cache_root=tmp_path)
    assert (first.figures["reused"], again.figures["reused"]) == (False, True)
    assert again.table.equals(first.table) and again.intents.equals(first.intents)
    assert (again.by_rule, again.samples, again.candidates_by_source) == (
        first.by_rule,
        first.samples,
        first.candidates_by_source,
    )
    # One memory edited, a pair's score moved, a setting changed: each is computed again, as from scratch.
    edited = [dict(r) for r in MEMORIES]
    edited[3]["content"] = "My editor is emacs"
    for changed_memories, changed_pairs, config in (
        (columns(snapshot(edited)), pairs, Config()),
        (memories, _pairs([("m2", "m3", 0.91), ("m4", "m5", 0.93)]), Config()),
        (memories, pairs, Config.model_validate({"contradiction": {"policy": "supersede"}})),
    ):
        fresh = contradictions_reusing(changed_memories, changed_pairs, config, cache_root=tmp_path)
        scratch = find_contradictions(changed_memories, changed_pairs, config)
        assert fresh.figures["reused"] is False
        assert fresh.table.equals(scratch.table) and fresh.intents.equals(scratch.intents)


def test_a_stale_mark_does_not_recompute_but_an_explicit_link_does(tmp_path):
    from engram_pipelines.analyses.contradictions.reuse import contradictions_reusing

    def columns(rows) -> pa.Table:
        return snapshot(rows).select(
            ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]
        )

    pairs = _pairs([("m2", "m3", 0.9)])
    contradictions_reusing(columns(MEMORIES), pairs, Config(), cache_root=tmp_path)
    marked = [dict(r) for r in MEMORIES]
    marked[4]["metadata"] = {"stale": {"score": 0.29}}  # written by the decay, night after night
    assert contradictions_reusing(columns(marked), pairs, Config(), cache_root=tmp_path).figures["reused"]
    linked = [dict(r) for r in MEMORIES]
    linked[4]["metadata"] = {"contradicts": "m5"}
    result = contradictions_reusing(columns(linked), pairs, Config(), cache_root=tmp_path)
    assert result.figures["reused"] is False and ("m4", "m5") in {
        (r["older_id"], r["newer_id"]) for r in result.table.to_pylist()
    }


def test_a_namespace_whose_inputs_moved_is_computed_again_and_the_others_are_reused(tmp_path):
    """Per namespace: an edit in ns2 recomputes ns2 only, and the result put together equals a computation of
    every namespace (table, intents and figures); a new namespace is computed, one that went is left out."""
    from engram_pipelines.analyses.contradictions.reuse import contradictions_reusing

    def columns(rows) -> pa.Table:
        return snapshot(rows).select(
            ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]
        )

    base = [*MEMORIES, {"content": "Alice lives in Oslo", "namespace": "ns2", "created_at": days_ago(9)}]
    pairs = _pairs([("m2", "m3", 0.9), ("m4", "m5", 0.93)])
    contradictions_reusing(columns(base), pairs, Config(), cache_root=tmp_path)
    edited = [dict(r) for r in base]
    edited[9]["content"] = "Alice lives in Madrid"
    third = [*edited, {"content": "Bob lives in Lima", "namespace": "ns3", "created_at": days_ago(2)}]
    for rows, computed in ((edited, 1), (third, 1), (edited, 0)):
        memories = columns(rows)
        result = contradictions_reusing(memories, pairs, Config(), cache_root=tmp_path)
        scratch = find_contradictions(memories, pairs, Config())
        assert result.figures["namespaces_computed"] == computed
        assert result.figures["reused"] is (computed == 0)
        assert result.table.equals(scratch.table) and result.intents.equals(scratch.intents)
        assert (result.by_rule, result.samples, result.candidates_by_source, result.found_by_source) == (
            scratch.by_rule,
            scratch.samples,
            scratch.candidates_by_source,
            scratch.found_by_source,
        )
    assert any(r["namespace"] == "ns2" for r in result.table.to_pylist()), "ns2's pair was found"


def test_features_looked_up_by_use_give_what_every_feature_of_every_row_gives(tmp_path):
    """With a cache, every row's claim is looked up for the structural join and every feature only of the rows
    in a candidate pair: the result is the one parsing every row whole gives, on a first night (nothing
    cached) and on the next, an edited row new to the cache."""
    pairs = _pairs([("m2", "m3", 0.9), ("m4", "m5", 0.93)])
    edited = [dict(r) for r in MEMORIES]
    edited[1]["content"] = "Alice lives in Madrid"
    for rows in (MEMORIES, edited):
        memories = snapshot(rows)
        cached = find_contradictions(memories, pairs, Config(), cache_root=tmp_path)
        whole = find_contradictions(memories, pairs, Config())
        assert cached.table.num_rows == 3
        assert cached.table.equals(whole.table) and cached.intents.equals(whole.intents)
        assert cached.candidate_counts.equals(whole.candidate_counts)
