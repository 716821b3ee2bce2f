"""Retention judged from due dates equals retention judged on every row, night after night; the decay score's
decline rate bounds its fall."""

from __future__ import annotations

import datetime as dt
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engram_pipelines.analyses.lifecycle.decay import decay_scores
from engram_pipelines.analyses.lifecycle.retention import retention_moves
from engram_pipelines.analyses.lifecycle.retention_due import retention_reusing
from engram_pipelines.config.model import Config
from tests.support.lifecycle import AS_OF, days_ago, snapshot

DAY = dt.timedelta(days=1)

# Every policy, per kind and per namespace, with a cue, a floor, pins and importances near the thresholds.
_CONFIG = Config.model_validate(
    {
        "decay": {
            "kind_policy": {"semantic": "halflife", "procedural": "ebbinghaus"},
            "ebbinghaus": {"kind_half_life_days": {"procedural": 20.0}, "floor_multiplier": 0.2},
        },
        "namespaces": {
            "research": {
                "retention": {"archive_grace_days": 5, "purge_grace_days": 3, "archive_older_than_days": 10},
                "decay": {"policy": "ebbinghaus"},
            }
        },
    }
)


def _random_row(rng: random.Random, index: int) -> dict[str, Any]:
    created = days_ago(rng.uniform(0, 120))
    accessed = rng.random() < 0.4
    zone = rng.choices(["active", "archived", "purge_queue"], [0.8, 0.12, 0.08])[0]
    return {
        "id": f"m{index:04d}",
        "namespace": rng.choice(["ns1", "research"]),
        "kind": rng.choices(["episodic", "semantic", "procedural", "block"], [0.6, 0.2, 0.15, 0.05])[0],
        "content": rng.choice(["a plain note", "an urgent deadline", "error in the import", "likes tea"]),
        "importance": rng.choice([0.1, 0.2, 0.29, 0.3, 0.5, 0.79, 0.8, 0.9]),
        "access_count": rng.choice([1, 2, 5]) if accessed else 0,
        "last_accessed_at": created + (AS_OF - created) * rng.random() if accessed else None,
        "created_at": created,
        "updated_at": created,
        "pinned": rng.random() < 0.05,
        "zone": zone,
        "zone_since": None if zone == "active" else days_ago(rng.uniform(0, 8)),
        "tags": ["deprecated"] if rng.random() < 0.03 else [],
    }


def _night(rows: dict[str, dict[str, Any]], at: dt.datetime) -> pa.Table:
    ordered = [dict(row) for _, row in sorted(rows.items())]
    return snapshot(ordered)


def _apply(rows: dict[str, dict[str, Any]], moves: pa.Table, at: dt.datetime) -> None:
    """Land the moves as the apply would, after the night's as-of: a zone and its start; a purge deletes the
    row."""
    landed = at + dt.timedelta(hours=2)
    for move in moves.to_pylist():
        if move["to_zone"] == "purged":
            rows.pop(move["id"])
        else:
            rows[move["id"]].update(zone=move["to_zone"], zone_since=landed, updated_at=landed)


def _write(rng: random.Random, rows: dict[str, dict[str, Any]], at: dt.datetime, purged: dict) -> None:
    """A day of agent writes after the night of `at`: accesses, edits, pins, tags, merges, promotions, new
    rows, deletes, restores."""
    ids = sorted(rows)
    at = at + 0.5 * DAY
    for memory in rng.sample(ids, 4):
        row = rows[memory]
        change = rng.choice(["access", "edit", "pin", "tag", "merge", "unmerge", "promote", "importance"])
        if change == "access":
            row.update(access_count=row["access_count"] + 1, last_accessed_at=at)
        elif change == "edit":
            row["content"] = row["content"] + " (edited)"  # updated_at kept: the key still sees it
        elif change == "pin":
            row["pinned"] = not row["pinned"]
        elif change == "tag":
            row["tags"] = [] if row["tags"] else ["deprecated"]
        elif change == "merge":
            row["superseded_by"] = rng.choice(ids)
        elif change == "unmerge":
            for other in rows.values():
                other.pop("superseded_by", None) if other.get("superseded_by") == memory else None
        elif change == "promote":
            row["metadata"] = {"promotion": {"at": at.isoformat()}}
        else:
            row["importance"] = rng.choice([0.1, 0.85])
    for _ in range(2):
        index = len(rows) + len(purged) + rng.randrange(10_000, 20_000)
        rows[f"n{index}"] = {**_random_row(rng, index), "id": f"n{index}", "created_at": at}
    gone = rng.choice(ids)
    purged[gone] = rows.pop(gone)
    if purged and rng.random() < 0.5:  # a restore brings a deleted row back as it was
        back = rng.choice(sorted(purged))
        rows[back] = purged.pop(back)


@pytest.mark.parametrize("seed", [1, 2])
def test_due_dates_give_the_moves_of_judging_every_row_night_after_night(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    rows = {row["id"]: row for row in (_random_row(rng, i) for i in range(400))}
    purged: dict[str, dict[str, Any]] = {}
    judged_share = []
    for night in range(45):
        at = AS_OF + night * DAY
        memories = _night(rows, at)
        scores = decay_scores(memories, _CONFIG, at)
        promoted = pa.array(rng.sample(sorted(rows), 3), pa.string())
        full = retention_moves(memories, scores, _CONFIG, at, promoted=promoted)
        due = retention_reusing(memories, scores, _CONFIG, at, promoted, cache_root=tmp_path)
        assert due.moves.equals(full), f"night {night}"
        judged_share.append(due.judged / memories.num_rows)
        _apply(rows, full, at)
        if night % 3:  # some quiet nights: only time passes
            _write(rng, rows, at, purged)
    assert judged_share[0] == 1.0  # nothing kept: every row
    # Afterwards the due, the written and those last night moved: a tenth of the rows on most nights here (a
    # third the night after a grace period ends for a whole cohort).
    assert float(np.median(judged_share[1:])) < 0.15, judged_share


def test_everything_is_judged_again_for_other_settings_an_earlier_day_or_damaged_dates(
    tmp_path: Path,
) -> None:
    rng = random.Random(3)
    # Young active rows: few fall due in a day, so a night that reuses the dates judges fewer than all.
    young = {"zone": "active", "zone_since": None}
    memories = snapshot(
        [{**_random_row(rng, i), **young, "created_at": days_ago(i / 10)} for i in range(100)]
    )

    def judged(config: Config, at: dt.datetime) -> int:
        due = retention_reusing(
            memories, decay_scores(memories, config, at), config, at, None, cache_root=tmp_path
        )
        assert due.moves.equals(retention_moves(memories, decay_scores(memories, config, at), config, at))
        return due.judged

    assert judged(_CONFIG, AS_OF) == 100
    assert judged(_CONFIG, AS_OF + DAY) < 100
    other = Config.model_validate({"retention": {"archive_age_days": 3}})
    assert judged(other, AS_OF + DAY) == 100  # other settings
    assert judged(other, AS_OF) == 100  # a replay of an earlier day
    assert judged(other, AS_OF) < 100
    (tmp_path / "retention_due" / "due.parquet").write_bytes(b"not parquet")
    assert judged(other, AS_OF) == 100


def test_a_merge_into_a_row_or_out_of_it_dates_it_again(tmp_path: Path) -> None:
    """A canonical holding merged rows is never archived for its age; the row merged into it is not the one
    that changes, so its key must see the others' superseded_by."""
    old = {"created_at": days_ago(200), "importance": 0.1}
    rows = [old, {**old, "importance": 0.5}]
    config = Config()
    for superseded_by in [None, "m0", None]:
        memories = snapshot([rows[0], {**rows[1], "superseded_by": superseded_by}])
        scores = decay_scores(memories, config, AS_OF)
        due = retention_reusing(memories, scores, config, AS_OF, None, cache_root=tmp_path)
        assert due.moves.equals(retention_moves(memories, scores, config, AS_OF))
        assert ("m0" in due.moves["id"].to_pylist()) == (superseded_by is None)


def _bound_rows() -> list[dict[str, Any]]:
    rows = []
    for kind in ["episodic", "semantic", "procedural", "block"]:
        for pinned in [False, True]:
            for accessed in [None, days_ago(3)]:
                for content in ["a plain note", "an urgent deadline: error"]:
                    for importance in [0.05, 0.5, 1.0]:
                        rows.append(
                            {
                                "namespace": "research" if len(rows) % 3 == 0 else "ns1",
                                "kind": kind,
                                "pinned": pinned,
                                "content": content,
                                "importance": importance,
                                "access_count": 0 if accessed is None else 4,
                                "last_accessed_at": accessed,
                                "created_at": days_ago(5),
                                "tags": ["important"] if importance == 1.0 else [],
                            }
                        )
    return rows


def test_the_decline_rate_bounds_every_policys_fall_and_is_its_rate_where_nothing_clamps() -> None:
    rows = _bound_rows()
    memories = snapshot(rows)
    pinned = {f"m{i}": row["pinned"] for i, row in enumerate(rows)}

    def by_id(at: dt.datetime) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in decay_scores(memories, _CONFIG, at).to_pylist()}

    now = by_id(AS_OF)
    assert {r["policy"] for r in now.values()} == {"engram", "halflife", "ebbinghaus", "exempt"}
    for days in [0.25, 1.0, 7.0, 60.0, 400.0]:
        later = by_id(AS_OF + dt.timedelta(days=days))
        for memory, row in now.items():
            if row["kind"] == "block":
                assert row["score"] is None and row["decline_rate"] is None
                continue
            bound = row["score"] * math.exp(-row["decline_rate"] * days)
            assert later[memory]["score"] >= bound * (1 - 1e-12), (memory, days)
            # Tight for an unclamped exponential: a halflife score (not pinned: no floor) falls at its rate.
            if row["policy"] == "halflife" and not pinned[memory]:
                assert later[memory]["score"] == pytest.approx(bound)


def test_keys_see_every_input_retention_and_decay_read() -> None:
    from engram_pipelines.analyses.lifecycle.retention_due import row_keys

    base = {"created_at": days_ago(40), "tags": ["x"], "metadata": {"a": 1}}
    changes: list[dict[str, Any]] = [
        {"namespace": "research"},
        {"kind": "semantic"},
        {"zone": "archived"},
        {"zone_since": days_ago(2)},
        {"updated_at": days_ago(1)},
        {"created_at": days_ago(41)},
        {"last_accessed_at": days_ago(3)},
        {"access_count": 2},
        {"pinned": True},
        {"tags": ["deprecated"]},
        {"superseded_by": "m9"},
        {"importance": 0.51},
        {"metadata": {"a": 2}},
        {"content": "another note"},
    ]
    keys = row_keys(snapshot([base] + [{**base, **change} for change in changes]))["key"].to_pylist()
    assert len(set(keys)) == len(keys)
