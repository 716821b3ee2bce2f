"""Promotion and retention rules on hand-built snapshots."""

from __future__ import annotations

import pyarrow as pa

from engram_pipelines.analyses.lifecycle.decay import decay_scores
from engram_pipelines.analyses.lifecycle.promotion import promotion_intents, promotions
from engram_pipelines.analyses.lifecycle.retention import retention_intents, retention_moves
from engram_pipelines.config.model import Config
from engram_pipelines.core import records
from engram_pipelines.core.timestamps import format_timestamp
from tests.support.lifecycle import AS_OF, days_ago, snapshot


def _links(pairs: list[tuple[str, str, str]]) -> pa.Table:
    rows = [
        {
            "namespace": "ns1",
            "src_id": s,
            "dst_id": d,
            "kind": k,
            "weight": 1.0,
            "origin": "agent",
            "created_at": AS_OF,
            "updated_at": AS_OF,
            "traversed_at": None,
        }
        for s, d, k in pairs
    ]
    return pa.Table.from_pylist(rows, schema=records.LINK_SCHEMA)


def _promote(rows, config=None, links=()):
    config = config or Config()
    memories = snapshot(rows)
    table = promotions(memories, decay_scores(memories, config, AS_OF), _links(list(links)), config)
    return {(r["id"], r["promotion"]): r for r in table.to_pylist()}


def test_stm_to_ltm_needs_access_and_importance():
    got = _promote(
        [
            {"access_count": 3, "importance": 0.5},
            {"access_count": 2, "importance": 0.9},
            {"access_count": 5, "importance": 0.4},
            {"access_count": 5, "importance": 0.9, "tier": "ltm"},
            {"access_count": 5, "importance": 0.9, "superseded_by": "m0"},
        ]
    )
    assert list(got) == [("m0", "tier")]
    assert "accessed 3x" in got[("m0", "tier")]["reason"]


def test_ltm_quota_takes_the_highest_scores_first():
    config = Config.model_validate({"promotion": {"ltm_quota": 2}})
    rows = [
        {"tier": "ltm"},
        {"access_count": 3, "importance": 0.6, "last_accessed_at": days_ago(20)},
        {"access_count": 3, "importance": 0.6, "last_accessed_at": days_ago(1)},
        {"access_count": 3, "importance": 0.6, "last_accessed_at": days_ago(40)},
    ]
    got = _promote(rows, config)
    assert [k[0] for k in got if k[1] == "tier"] == ["m2"]


def test_episodic_to_semantic_rules():
    got = _promote(
        [
            {"access_count": 11, "importance": 0.81, "tier": "ltm"},
            {"access_count": 10, "importance": 0.9, "tier": "ltm"},
            {"tags": ["permanent"], "tier": "ltm"},
            {"tier": "ltm"},
            {"tier": "ltm"},
        ],
        links=[("m3", "m4", "associated"), ("m0", "m4", "derived-from"), ("m1", "m3", "temporal")],
    )
    kinds = sorted(k[0] for k in got if k[1] == "kind")
    assert kinds == ["m0", "m2", "m4"]
    assert "referenced by 2" in got[("m4", "kind")]["reason"]
    assert "tagged permanent" in got[("m2", "kind")]["reason"]
    intents = promotion_intents(pa.Table.from_pylist(list(got.values()))).to_pylist()
    assert {i["op"] for i in intents} == {"promote_kind"}


def _moves(rows, config=None):
    config = config or Config()
    memories = snapshot(rows)
    table = retention_moves(memories, decay_scores(memories, config, AS_OF), config, AS_OF)
    return {r["id"]: r for r in table.to_pylist()}


def test_seed_004s_criteria_are_one_rule_and_a_writers_high_importance_is_kept():
    """On a hand-made history, 63% was archived on a first night; "Tom is lactose intolerant" (importance 0.8)
    on day one, by its decay score alone."""
    got = _moves(
        [
            {
                "created_at": days_ago(58),
                "importance": 0.5,
            },  # never accessed, but not unimportant: no `unused`
            {"created_at": days_ago(58), "importance": 0.8, "content": "Tom is lactose intolerant"},
            {"created_at": days_ago(58), "importance": 0.8, "tags": ["deprecated"]},  # the tag still archives
            {"created_at": days_ago(58), "importance": 0.2},
        ],
        Config.model_validate({"decay": {"policy": "halflife"}}),
    )
    assert {k: v["rule"] for k, v in got.items()} == {
        "m0": "low_score",
        "m2": "deprecated",
        "m3": "low_score",
    }
    got = _moves(
        [{"created_at": days_ago(58), "importance": 0.5}],
        Config.model_validate({"retention": {"archive_score_threshold": 0.0}}),
    )
    assert got == {}  # by age alone: importance 0.5 >= 0.3


def test_a_promotion_wins_over_an_archive_and_restarts_the_clock():
    old = {"created_at": days_ago(58), "importance": 0.2, "tier": "ltm"}
    promoted_today = {**old, "metadata": {"promotion": {"to": "ltm", "at": format_timestamp(days_ago(1))}}}
    config = Config.model_validate({"decay": {"policy": "halflife"}})
    memories = snapshot([old, promoted_today, old])
    scores = decay_scores(memories, config, AS_OF)
    table = retention_moves(memories, scores, config, AS_OF, promoted=pa.array(["m2"]))
    # m1's age runs from its promotion (1 day): neither leg holds; m2 is promoted tonight: never both.
    assert table["id"].to_pylist() == ["m0"]


def test_zone_transitions_and_grace_periods():
    got = _moves(
        [
            {
                "created_at": days_ago(45),
                "access_count": 1,
                "last_accessed_at": days_ago(40),
            },  # low score, old
            {  # unused: old, never accessed, unimportant
                "created_at": days_ago(31),
                "content": "decision on the incident before the release",
                "importance": 0.2,
            },
            {"created_at": days_ago(1), "tags": ["deprecated"]},
            {"zone": "archived", "zone_since": days_ago(31), "created_at": days_ago(90)},
            {"zone": "archived", "zone_since": days_ago(5), "created_at": days_ago(90)},
            {"zone": "purge_queue", "zone_since": days_ago(31), "created_at": days_ago(120)},
            {"created_at": days_ago(2)},
            {
                "zone": "archived",
                "zone_since": days_ago(10),
                "last_accessed_at": days_ago(1),
                "created_at": days_ago(90),
            },
        ]
    )
    assert {k: (v["to_zone"], v["rule"]) for k, v in got.items()} == {
        "m0": ("archived", "low_score"),
        "m1": ("archived", "unused"),
        "m2": ("archived", "deprecated"),
        "m3": ("purge_queue", "archive_grace"),
        "m5": ("purged", "purge_grace"),
        "m7": ("active", "accessed"),
    }
    ops = {
        i["target_id"]: i["op"]
        for i in retention_intents(pa.Table.from_pylist(list(got.values()))).to_pylist()
    }
    assert ops["m5"] == "purge" and ops["m0"] == "move_zone"


def test_per_namespace_grace_periods():
    config = Config.model_validate({"namespaces": {"research": {"retention": {"archive_grace_days": 180}}}})
    got = _moves(
        [
            {"zone": "archived", "zone_since": days_ago(60), "created_at": days_ago(90)},
            {
                "namespace": "research",
                "zone": "archived",
                "zone_since": days_ago(60),
                "created_at": days_ago(90),
            },
        ],
        config,
    )
    assert list(got) == ["m0"]


def test_pinned_blocks_and_superseded_rows_are_exempt():
    got = _moves(
        [
            {"created_at": days_ago(400), "pinned": True, "tags": ["deprecated"]},
            {"created_at": days_ago(400), "kind": "block"},
            {"zone": "purge_queue", "zone_since": days_ago(300), "pinned": True, "created_at": days_ago(400)},
            {"created_at": days_ago(400), "superseded_by": "m0"},
        ]
    )
    assert {k: v["to_zone"] for k, v in got.items()} == {"m2": "active"}


def test_a_canonical_holding_merged_rows_is_not_archived_for_its_age():
    """Retention archived canonicals whose duplicates were already superseded into them: the fact was visible in
    neither row."""
    got = _moves(
        [
            {"created_at": days_ago(58), "importance": 0.2},  # a canonical
            {"created_at": days_ago(58), "importance": 0.2, "superseded_by": "m0"},
            {"created_at": days_ago(58), "importance": 0.2},  # holds nothing: archived
            {"created_at": days_ago(58), "importance": 0.2, "tags": ["deprecated"], "id": "m3"},
            {"created_at": days_ago(58), "superseded_by": "m3", "id": "m4"},
        ],
        Config.model_validate({"decay": {"policy": "halflife"}}),
    )
    assert {k: v["rule"] for k, v in got.items()} == {"m2": "low_score", "m3": "deprecated"}
