"""Decay policies against hand-computed values, stale marks as transitions only, pins and blocks."""

from __future__ import annotations

import math

import pytest
import yaml

from engram_pipelines.analyses.lifecycle.decay import decay_intents, decay_scores
from engram_pipelines.config.model import Config, ConfigError, load_config
from tests.support.lifecycle import AS_OF, days_ago, snapshot
from tests.support.paths import REPO


def scores_of(rows, config=None):
    table = decay_scores(snapshot(rows), config or Config(), AS_OF)
    return {r["id"]: r for r in table.to_pylist()}


@pytest.mark.parametrize(("age", "expected"), [(0, 0.35), (7, 0.2475), (14, 0.175), (30, 0.0793)])
def test_engram_plain_note(age, expected):
    got = scores_of([{"created_at": days_ago(age)}])["m0"]
    assert got["score"] == pytest.approx(expected, abs=5e-5)
    assert got["policy"] == "engram" and got["age_days"] == pytest.approx(age)


def test_engram_age_runs_from_the_last_access_and_access_boosts():
    got = scores_of([{"created_at": days_ago(100), "last_accessed_at": days_ago(14), "access_count": 3}])[
        "m0"
    ]
    assert got["score"] == pytest.approx((0.35 + 0.04 * math.log2(4)) * 0.5)


def test_engram_cues_tags_and_cap():
    rows = [
        {"content": "We decided to ship; the incident is resolved before the release deadline"},
        {"content": "plain", "tags": ["critical"]},
        {"content": "plain", "access_count": 10_000},
        {"content": "terror and debugging are not cue words"},
    ]
    got = scores_of(rows)
    assert got["m0"]["score"] == pytest.approx(0.35 + 0.18 + 0.12 + 0.10)
    assert got["m1"]["score"] == pytest.approx(0.35 + 0.08)
    assert got["m2"]["score"] == pytest.approx(0.35 + 0.25)
    assert got["m3"]["score"] == pytest.approx(0.35)


def test_each_cue_rule_alone_in_any_case():
    # Contents pass one gate regex over every cue word first; each rule must still count on its own.
    rows = [{"content": "DECISION made"}, {"content": "an Errors list"}, {"content": "the Launch"}]
    got = scores_of(rows)
    assert [got[f"m{i}"]["score"] for i in range(3)] == pytest.approx([0.35 + 0.18, 0.35 + 0.12, 0.35 + 0.10])


@pytest.mark.parametrize("words", [[], ["release", " "]])
def test_a_blank_or_empty_cue_rule_is_refused_naming_the_setting(tmp_path, words):
    # A blank word would match at every word start and add the rule's weight to every row.
    path = tmp_path / "engram.yaml"
    path.write_text(yaml.safe_dump({"decay": {"engram": {"cues": [{"words": words, "weight": 0.1}]}}}))
    with pytest.raises(ConfigError, match="decay.engram.cues.0.words"):
        load_config(path, env={})


def test_pinned_rows_keep_the_floor_and_are_never_stale():
    got = scores_of([{"created_at": days_ago(400), "pinned": True, "stale": True}])["m0"]
    assert got["score"] >= 0.9 and not got["stale_after"] and got["outcome"] == "pinned"


def test_blocks_live_outside_decay():
    got = scores_of([{"kind": "block", "created_at": days_ago(400)}])["m0"]
    assert got["score"] is None and got["policy"] == "exempt" and not got["stale_after"]


def test_halflife_policy():
    config = Config.model_validate({"decay": {"policy": "halflife", "halflife": {"half_life_hours": 24}}})
    got = scores_of([{"importance": 0.8, "created_at": days_ago(2)}], config)["m0"]
    assert got["score"] == pytest.approx(0.2)


def test_ebbinghaus_policy_floor_bonus_and_kinds():
    config = Config.model_validate({"decay": {"policy": "ebbinghaus"}})
    rows = [
        {"importance": 0.8, "created_at": days_ago(7)},
        {"importance": 0.9, "created_at": days_ago(90)},
        {"importance": 0.5, "created_at": days_ago(7), "access_count": 9},
        {"importance": 0.6, "created_at": days_ago(30), "kind": "semantic"},
    ]
    got = scores_of(rows, config)
    assert got["m0"]["score"] == pytest.approx(0.4)
    assert got["m1"]["score"] == pytest.approx(0.09)
    assert got["m2"]["score"] == pytest.approx(0.5 * 0.5 * (1 + 1 * 0.5))
    assert got["m3"]["score"] == pytest.approx(0.3)
    assert got["m0"]["review_interval_days"] == pytest.approx(-math.log(0.3 / 0.4) / (math.log(2) / 7))


def test_ebbinghaus_infinite_or_non_positive_half_life_never_decays():
    config = Config.model_validate(
        {
            "decay": {
                "policy": "ebbinghaus",
                "ebbinghaus": {"kind_half_life_days": {"episodic": math.inf, "semantic": 0}},
            }
        }
    )
    got = scores_of(
        [
            {"importance": 0.7, "created_at": days_ago(500)},
            {"importance": 0.7, "created_at": days_ago(500), "kind": "semantic"},
        ],
        config,
    )
    assert got["m0"]["score"] == pytest.approx(0.7) and got["m1"]["score"] == pytest.approx(0.7)


def test_policy_per_kind_and_per_namespace():
    config = Config.model_validate(
        {
            "decay": {"kind_policy": {"semantic": "ebbinghaus"}},
            "namespaces": {"fast:*": {"decay": {"engram": {"half_life_days": 1}}}},
        }
    )
    rows = [
        {"kind": "semantic", "importance": 0.8, "created_at": days_ago(30)},
        {"namespace": "fast:coder", "created_at": days_ago(1)},
        {"created_at": days_ago(1)},
    ]
    got = scores_of(rows, config)
    assert got["m0"]["policy"] == "ebbinghaus" and got["m0"]["score"] == pytest.approx(0.4)
    assert got["m1"]["score"] == pytest.approx(0.175)
    assert got["m2"]["score"] == pytest.approx(0.35 * 0.5 ** (1 / 14))


def test_only_transitions_become_intents():
    rows = [
        {"created_at": days_ago(30)},  # becomes stale
        {"created_at": days_ago(30), "stale": True},  # stays stale: no write
        {"created_at": days_ago(0), "stale": True},  # recovered: the mark is lifted
        {"created_at": days_ago(0)},  # fine: no write
    ]
    intents = decay_intents(decay_scores(snapshot(rows), Config(), AS_OF)).to_pylist()
    assert [(i["target_id"], i["op"]) for i in intents] == [("m0", "mark_stale"), ("m2", "clear_stale")]
    assert "stale threshold 0.3" in intents[0]["reason"]


def test_each_row_gets_its_outcomes_reason_and_a_transition_its_own_numbers():
    rows = [
        {"created_at": days_ago(0)},
        {"created_at": days_ago(30)},  # becomes stale
        {"created_at": days_ago(30), "stale": True},
        {"created_at": days_ago(0), "stale": True},  # recovered
        {"created_at": days_ago(60)},  # becomes stale, older
        {"created_at": days_ago(1), "kind": "block"},
    ]
    got = scores_of(rows)
    assert [got[f"m{i}"]["reasons"] for i in (0, 2, 5)] == ["score >= 0.3", "score < 0.3", "block"]
    assert got["m1"]["reasons"] == "engram score 0.0793 after 30.0 days < stale threshold 0.3"
    assert got["m3"]["reasons"] == "engram score 0.35 after 0.0 days >= stale threshold 0.3"
    assert got["m4"]["reasons"] == "engram score 0.0179 after 60.0 days < stale threshold 0.3"
    assert [got[f"m{i}"]["outcome"] for i in range(6)] == [
        "ok",
        "became_stale",
        "stale",
        "recovered",
        "became_stale",
        "exempt",
    ]


def test_seed_environment_variables_override_the_file(tmp_path):
    path = tmp_path / "engram.yaml"
    path.write_text("decay:\n  engram:\n    half_life_days: 3\n  stale_threshold: 0.2\n")
    config = load_config(path, env={"MEMORY_IMPORTANCE_HALF_LIFE_DAYS": "7"})
    assert config.decay.engram.half_life_days == 7 and config.decay.stale_threshold == 0.2


def test_decay_preview_projects_without_writing(tmp_path):
    import datetime as dt

    from engram_pipelines.reports.decay_preview import preview_decay, score_distribution_png

    rows = [
        {"created_at": days_ago(2), "access_count": 1, "last_accessed_at": days_ago(1)},
        {"created_at": days_ago(10)},
        {"created_at": days_ago(2), "pinned": True},
        {"zone": "purge_queue", "zone_since": days_ago(20), "created_at": days_ago(90)},
    ]
    preview = preview_decay(snapshot(rows), Config(), AS_OF, AS_OF + dt.timedelta(days=30))
    totals = preview.totals()
    assert totals == {"newly_stale": 3, "would_archive": 2, "would_queue_for_purge": 0, "would_purge": 1}
    assert {r["id"] for r in preview.falling_off} == {"m0", "m1", "m3"}
    assert "m2" not in preview.markdown()
    png = score_distribution_png(preview, 0.3)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    # A preview for the snapshot's own day shows tonight's marks (counted against the store's mark: m1 is not
    # marked yet, tonight marks it); a date before it is refused.
    tonight = preview_decay(snapshot(rows), Config(), AS_OF, AS_OF).totals()
    assert tonight["newly_stale"] == 2 and tonight["would_purge"] == 0  # m3 has 10 more days of grace
    with pytest.raises(ValueError, match="must not be before"):
        preview_decay(snapshot(rows), Config(), AS_OF, AS_OF - dt.timedelta(days=1))


def test_the_configuration_reference_is_current():

    from engram_pipelines.config.reference import render

    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == render(), "run: .venv/bin/python -m engram_pipelines.config.reference"


# The cue cache: the same scores as computing every boost, reused across nights, never stale.

_CUE_ROWS = [
    {"content": "We decided to ship; the incident is resolved before the release deadline"},
    {"content": "a plain note", "tags": ["critical"]},
    {"content": "Bug in the uploader", "created_at": days_ago(3), "access_count": 4},
    {"content": "terror and debugging are not cue words", "namespace": "fast:coder"},
    {"kind": "block", "content": "a decided block"},
]


def _by_id(table):
    return {r["id"]: r for r in table.to_pylist()}


@pytest.mark.parametrize(
    "config",
    [
        Config(),
        Config.model_validate(
            {
                "decay": {"kind_policy": {"semantic": "ebbinghaus"}},
                "namespaces": {"fast:*": {"decay": {"engram": {"half_life_days": 1}}}},
            }
        ),
    ],
)
def test_cue_cache_gives_the_uncached_scores_cold_and_warm(tmp_path, config):
    from engram_pipelines.analyses.lifecycle.decay import CueCache

    memories = snapshot(_CUE_ROWS)
    uncached = decay_scores(memories, config, AS_OF)
    cache = CueCache(tmp_path / "cues")
    cold = decay_scores(memories, config, AS_OF, cue_cache=cache)
    assert list(cache.root.glob("*/*.parquet")), "the first night fills the cache"
    warm = decay_scores(memories, config, AS_OF, cue_cache=cache)
    assert cold.equals(uncached) and warm.equals(uncached)  # same rows, same order, same values
    assert len(list(cache.root.glob("*/*.parquet"))) == 1, "a night without misses writes nothing"


def test_cue_cache_is_used_and_recomputes_edited_contents(tmp_path):
    """Fails if the cache is ignored (a planted boost must show) or stale (an edited content must be redone)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engram_pipelines.analyses.lifecycle.decay import CueCache

    cache = CueCache(tmp_path / "cues")
    memories = snapshot(_CUE_ROWS[:3])
    decay_scores(memories, Config(), AS_OF, cue_cache=cache)
    (part,) = cache.root.glob("*/*.parquet")
    planted = pq.read_table(part)
    planted = planted.set_column(2, "cue", pa.array([0.5] * planted.num_rows))
    pq.write_table(planted, part)  # every cached boost now says 0.5: a lookup must return it
    got = _by_id(decay_scores(memories, Config(), AS_OF, cue_cache=cache))
    assert got["m1"]["score"] == pytest.approx(0.35 + 0.5 + 0.08)  # plain note, critical tag: cached 0.5 used

    edited = snapshot(
        [_CUE_ROWS[0], {"content": "a plain note, decided", "tags": ["critical"]}, _CUE_ROWS[2]]
    )
    got = _by_id(decay_scores(edited, Config(), AS_OF, cue_cache=cache))
    assert got["m1"]["score"] == pytest.approx(0.35 + 0.18 + 0.08)  # edited: the regexes ran again
    assert got["m0"]["score"] == pytest.approx(0.35 + 0.5)  # unchanged: still the planted boost


def test_cue_cache_a_changed_cue_config_recomputes(tmp_path):
    from engram_pipelines.analyses.lifecycle.decay import CueCache

    cache = CueCache(tmp_path / "cues")
    memories = snapshot([{"content": "a plain note about tulips"}])
    decay_scores(memories, Config(), AS_OF, cue_cache=cache)
    tulips = Config.model_validate({"decay": {"engram": {"cues": [{"words": ["tulip"], "weight": 0.2}]}}})
    got = _by_id(decay_scores(memories, tulips, AS_OF, cue_cache=cache))
    assert got["m0"]["score"] == pytest.approx(0.55)
    assert len(list(cache.root.iterdir())) == 2  # one directory per cue fingerprint


def test_cue_cache_compacts_dead_entries(tmp_path):
    from engram_pipelines.analyses.lifecycle.decay import CueCache

    cache = CueCache(tmp_path / "cues")
    cache.MAX_PARTS = 3
    for night in range(5):  # every night edits every content: all entries of the night before die
        memories = snapshot([{"content": f"note {night} {i}"} for i in range(4)])
        uncached = decay_scores(memories, Config(), AS_OF)
        assert decay_scores(memories, Config(), AS_OF, cue_cache=cache).equals(uncached)
        assert len(list(cache.root.glob("*/*.parquet"))) <= cache.MAX_PARTS


def test_cue_cache_entries_held_twice_change_nothing(tmp_path):
    """Two nights writing the same misses leave an entry twice: still one row per memory, the same scores."""
    import shutil

    import pyarrow.parquet as pq

    from engram_pipelines.analyses.lifecycle.decay import CueCache

    cache = CueCache(tmp_path / "cues")
    memories = snapshot(_CUE_ROWS)
    uncached = decay_scores(memories, Config(), AS_OF)
    decay_scores(memories, Config(), AS_OF, cue_cache=cache)
    (part,) = cache.root.glob("*/*.parquet")
    shutil.copy(part, part.with_name("part-copy.parquet"))
    assert decay_scores(memories, Config(), AS_OF, cue_cache=cache).equals(uncached)
    cache.MAX_PARTS = 1  # compact: the duplicates are dropped
    assert decay_scores(memories, Config(), AS_OF, cue_cache=cache).equals(uncached)
    (compacted,) = cache.root.glob("*/*.parquet")
    assert pq.read_table(compacted).num_rows == len(_CUE_ROWS)  # one entry per memory, the copy's dropped


def test_inline_bars_stay_under_the_ui_s_inline_limit_and_scale_to_the_largest():
    import numpy as np

    from engram_pipelines.reports.plots import INLINE_LIMIT, inline_bars, score_bands

    table = inline_bars({f"op_{i}": 1000 - i * 70 for i in range(14)}, width=10)
    rows = table.splitlines()
    assert len(table) < INLINE_LIMIT and rows[2].endswith("██████████ |") and rows[-1] == "| + 2 more | | |"
    assert inline_bars({"a": 0, "b": 3})  # a zero draws nothing, a small value a sliver
    bands = score_bands(np.array([0.05, 0.15, 0.15, float("nan"), 1.0]))
    assert (bands["0.0-0.1"], bands["0.1-0.2"], bands["0.9-1.0"], sum(bands.values())) == (1, 2, 1, 4)
