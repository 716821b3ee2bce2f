"""The volume guard and a first night on a hand-made history (two users, 90 days, facts that change)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.guard import GUARD_COLUMNS, held_targets, hold_for_review
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.changes.registry import load_change_set
from engram_pipelines.changes.revert import approve_change_set
from engram_pipelines.config.model import Config, ReviewConfig
from engram_pipelines.ingest.load import import_jsonl
from engram_pipelines.night.wiring import semantic_view
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.paths import DATA

HISTORY = DATA / "two_users_90_days.jsonl"
AS_OF = dt.date(2026, 11, 29)


def intent(namespace: str, target: str, op: str, params: dict | None = None, klass: str = "auto") -> dict:
    return {
        "namespace": namespace,
        "target_kind": "memory",
        "target_id": target,
        "op": op,
        "params": json.dumps(params or {}),
        "reason": "a rule",
        "evidence": "{}",
        "source": "retention",
        "review_class": klass,
        "cluster_id": None,
    }


def visible_rows(namespace: str, n: int, **extra: dict) -> list[dict]:
    rows = [
        {"id": f"{namespace}-{i}", "namespace": namespace, "zone": "active", "superseded_by": None}
        for i in range(n)
    ]
    for row in rows:
        row.update(extra.get(row["id"], {}))
    return rows


def test_a_namespace_whose_night_would_hide_too_much_is_held_and_the_rest_proceeds():
    archive = {"from": "active", "to": "archived"}
    memories = pa.Table.from_pylist(
        [*visible_rows("a", 10, **{"a-9": {"zone": "purge_queue"}}), *visible_rows("b", 10)]
    )
    intents = pa.Table.from_pylist(
        [
            intent("a", "a-0", "move_zone", archive),
            intent("a", "a-1", "move_zone", archive),
            intent("a", "a-2", "supersede", {"by": "a-3"}),
            intent("a", "a-4", "mark_stale", {"score": 0.1}),  # not hiding: stays auto
            intent("a", "a-5", "move_zone", {"from": "archived", "to": "active"}),  # brings back: stays auto
            intent("a", "a-9", "purge"),  # already hidden: not counted, stays auto
            intent("b", "b-0", "move_zone", archive),  # 1 of 10: under the fraction
        ],
        schema=INTENT_SCHEMA,
    )
    out, held = hold_for_review(intents, memories, ReviewConfig())
    classes = {(r["target_id"], r["op"]): r["review_class"] for r in out.to_pylist()}
    assert classes == {
        ("a-0", "move_zone"): "held",
        ("a-1", "move_zone"): "held",
        ("a-2", "supersede"): "held",
        ("a-4", "mark_stale"): "auto",
        ("a-5", "move_zone"): "auto",
        ("a-9", "purge"): "auto",
        ("b-0", "move_zone"): "auto",
    }
    (entry,) = held
    assert entry["namespace"] == "a" and (entry["hidden"], entry["visible"]) == (3, 9)
    assert entry["message"] == "night would hide 33% of a (3 of 9 visible memories): held for review"
    assert all(entry["message"] in r["reason"] for r in out.to_pylist() if r["review_class"] == "held")
    # A fraction of 1 holds nothing; a ceiling on the night's auto changes holds them all.
    assert hold_for_review(intents, memories, ReviewConfig(max_hidden_fraction=1.0))[1] == []
    out, held = hold_for_review(intents, memories, ReviewConfig(max_hidden_fraction=1.0, max_auto_changes=5))
    assert set(out["review_class"].to_pylist()) == {"held"} and held[0]["namespace"] == "*"
    assert "night would make 7 changes (more than review.max_auto_changes, 5)" in held[0]["message"]


def test_a_first_night_on_a_hand_made_history_archives_nothing_a_user_would_miss(
    store_url: str, tmp_path: Path
):
    """Two users over 90 days (a move, job and phone changes, an allergy, paraphrases, chit-chat): importance
    >= 0.8 is never archived, a row is never promoted and archived at once, the mass archive waits for review,
    and no semantic node mixes a fact with its replacement or with another fact."""
    warehouse = tmp_path / "wh"
    with open_store(store_url, migrate=True) as store:
        summary = import_jsonl(
            store, HISTORY, default_namespace=None, embedding_dim=384, rejects_path=tmp_path / "r"
        )
    assert summary.imported == 40
    result = execute_job("nightly", AS_OF, store=store_url, warehouse=str(warehouse), config_path=None)
    assert result["success"], result.get("error")
    assert "held for review" in result["warnings"]["volume_guard"]
    moves = Warehouse(warehouse).read_table("retention", AS_OF).to_pylist()
    with open_store(store_url) as store:
        important = {r[0] for r in store.query("SELECT id FROM memories WHERE importance >= 0.8")}
        assert important == {"maya-04", "tom-07"}  # an allergy, an intolerance
        assert not important & {m["id"] for m in moves}
        boston = store.get("maya-01")  # accessed 4 times, last 70 days ago: promoted, not archived with it
        assert (boston["tier"], boston["zone"]) == ("ltm", "active")
        assert "maya-01" not in {m["id"] for m in moves}
        # Nothing was hidden automatically; the held set carries the archive, and approving it applies it.
        assert (
            store.query("SELECT count(*) FROM memories WHERE zone <> 'active' OR superseded_by IS NOT NULL")[
                0
            ][0]
            == 0
        )
        held_id = result["steps"]["change_set"]["held_change_set"]
        record, held = load_change_set(store, held_id)
        assert record.review_class == "held" and held.num_rows == len(moves) > 0
        # The move and the new phone number are flagged against what they replace (both stay visible).
        flagged = {
            frozenset(p)
            for p in store.query("SELECT src_id, dst_id FROM memory_links WHERE kind = 'contradicts'")
        }
        assert {frozenset(("maya-01", "maya-12")), frozenset(("maya-02", "maya-14"))} <= flagged
        nodes = store.query("SELECT content, metadata FROM memories WHERE kind = 'semantic'")
        for content, metadata in nodes:
            sources = (json.loads(metadata) if isinstance(metadata, str) else metadata)["semantic"]["sources"]
            assert sources in (["maya-06", "maya-07"],), (content, sources)  # the hiking paraphrase only
        approve_change_set(store, held_id, actor="test")
        outcome = apply_change_set(store, held_id, actor="test")
        assert outcome.applied == held.num_rows
        assert {r[0] for r in store.query("SELECT id FROM memories WHERE zone = 'archived'")} == {
            m["id"] for m in moves
        }
        assert all(store.get(i)["zone"] == "active" for i in important)


def test_held_targets_are_those_hold_for_review_holds():
    archive = {"from": "active", "to": "archived"}
    memories = pa.Table.from_pylist([*visible_rows("a", 4), *visible_rows("b", 10)])
    intents = pa.Table.from_pylist(
        [intent("a", "a-0", "move_zone", archive), intent("b", "b-0", "move_zone", archive)],
        schema=INTENT_SCHEMA,
    )
    held = held_targets(intents.select(GUARD_COLUMNS), memories, ReviewConfig())
    assert held is not None and held.to_pylist() == ["a-0"]
    out, _ = hold_for_review(intents, memories, ReviewConfig())
    assert [r["target_id"] for r in out.to_pylist() if r["review_class"] == "held"] == ["a-0"]
    held = held_targets(intents, memories, ReviewConfig(max_hidden_fraction=1.0))
    assert held is not None and len(held) == 0
    assert held_targets(intents, memories, ReviewConfig(max_auto_changes=1)) is None


def test_semantic_extraction_sees_the_moves_and_collapses_that_land_not_those_the_guard_holds():
    """Namespace a: tonight's archive and collapse would hide 3 of 4 rows (held); b: 2 of 19."""
    day = dt.datetime(2026, 11, 29, tzinfo=dt.UTC)
    rows = [*visible_rows("a", 4), *visible_rows("b", 20, **{"b-9": {"zone": "archived"}})]
    for row in rows:
        row.update({"content": row["id"], "kind": "episodic", "metadata": "{}", "created_at": day})
    strings = ["id", "namespace", "zone", "superseded_by", "content", "kind", "metadata"]
    schema = pa.schema([*((c, pa.string()) for c in strings), ("created_at", pa.timestamp("us", "UTC"))])
    memories = pa.Table.from_pylist(rows, schema=schema)
    moves = [("a", "a-0", "active", "archived"), ("a", "a-1", "active", "archived")]
    moves += [("b", "b-0", "active", "archived"), ("b", "b-9", "archived", "purge_queue")]
    retention = pa.Table.from_pylist(
        [{"id": i, "namespace": n, "from_zone": f, "to_zone": t} for n, i, f, t in moves]
    )
    duplicates = pa.Table.from_pylist(
        [
            {"cluster_id": "c-a", "namespace": "a", "canonical": "a-2", "loser": "a-3"},
            {"cluster_id": "c-b", "namespace": "b", "canonical": "b-1", "loser": "b-2"},
        ]
    )
    hiding = pa.Table.from_pylist(
        [intent(n, i, "move_zone", {"from": f, "to": t}) for n, i, f, t in moves]
        + [intent("a", "a-3", "supersede", {"by": "a-2"}), intent("b", "b-2", "supersede", {"by": "b-1"})],
        schema=INTENT_SCHEMA,
    ).select(GUARD_COLUMNS)
    config = Config()

    def seen(review: ReviewConfig) -> tuple[dict[str, tuple[str, str | None]], list[str]]:
        view, fading = semantic_view(
            memories, retention, duplicates, hiding, config.model_copy(update={"review": review})
        )
        return {r["id"]: (r["zone"], r["superseded_by"]) for r in view.to_pylist()}, sorted(
            fading.to_pylist()
        )

    view, fading = seen(ReviewConfig())
    # a waits for review: its rows stay as they are; b's archive, queue and collapse land tonight.
    assert [view[i] for i in ("a-0", "a-1", "a-3")] == [("active", None)] * 3
    assert [view[i] for i in ("b-0", "b-9", "b-2")] == [
        ("archived", None),
        ("purge_queue", None),
        ("active", "b-1"),
    ]
    assert fading == ["b-0"]
    # Nothing held: everything lands; a ceiling these proposals pass: nothing does.
    view, fading = seen(ReviewConfig(max_hidden_fraction=1.0))
    assert (
        view["a-0"] == ("archived", None)
        and view["a-3"] == ("active", "a-2")
        and fading == ["a-0", "a-1", "b-0"]
    )
    view, fading = seen(ReviewConfig(max_auto_changes=3))
    assert all(
        zone_and_canonical == (r["zone"], None) for r in rows for zone_and_canonical in [view[r["id"]]]
    )
    assert fading == []


def test_a_held_change_waits_in_its_set_and_is_not_proposed_again(store_url: str, tmp_path: Path):
    """A held change waits while its row is as the change was decided on: the next nights propose only what
    is new or moved (the first night's own auto changes moved the held rows: the second night proposes them
    again; an agent's edit moves one), not the rest of the hold. A re-run of a night proposes what its first
    run did; review.held_renewal_days: 0 proposes every hold every night."""
    warehouse, config = str(tmp_path / "wh"), tmp_path / "renew.yaml"
    with open_store(store_url, migrate=True) as store:
        import_jsonl(store, HISTORY, default_namespace=None, embedding_dim=384, rejects_path=tmp_path / "r")

    reports: list[list[str]] = []

    def night(day: int, config_path: str | None = None) -> tuple[str, dict, set[str]]:
        as_of = AS_OF + dt.timedelta(days=day)
        result = execute_job("nightly", as_of, store=store_url, warehouse=warehouse, config_path=config_path)
        assert result["success"], result.get("error")
        reports.append(result["steps"]["health_report"]["what_happened"])
        held_id = result["steps"]["change_set"]["held_change_set"]
        with open_store(store_url) as store:
            record, held = load_change_set(store, held_id)
        return held_id, record.counts, set(held["target_id"].to_pylist())

    first_id, _, first = night(0)
    second_id, counts, second = night(1)
    assert second == first and len(second) > 10 and "waiting_in" not in counts
    edited, accessed = sorted(second)[:2]
    with open_store(store_url) as store:
        row = store.get(edited)
        store.update_memory(edited, row["version"], content=row["content"] + " (corrected)")
        store.record_access(
            accessed, at=dt.datetime.combine(AS_OF + dt.timedelta(days=2), dt.time(9), dt.UTC)
        )

    third_id, counts, third = night(2)
    # The edited row is proposed again (its waiting change would fail its guard), the accessed one is no
    # longer archived at all, the rest wait in the second night's set (the oldest whose guards hold), which
    # the guard's message names.
    assert edited in third and accessed not in third and not third & (second - {edited})
    waited = len(second) - 2
    assert counts["waiting_in"] == {second_id: waited}
    said = [
        entry["message"].split("; waiting already, not proposed again: ")[1]
        for entry in counts["held_for_review"]
    ]
    assert sum(int(words.split(" in ")[0]) for words in said) == waited and all(second_id in w for w in said)
    assert f"waiting for review (held on an earlier night): {waited:,} changes in {second_id}" in reports[-1]
    assert night(2) == (third_id, counts, third)  # a re-run: the same held set

    # Renewal 0: everything held is proposed again; the waiting sets are left as they were.
    config.write_text("review:\n  held_renewal_days: 0\n")
    _, counts, renewed = night(3, str(config))
    assert renewed >= second - {accessed} and "waiting_in" not in counts
    with open_store(store_url) as store:
        approve_change_set(store, second_id, actor="test")
        outcome = apply_change_set(store, second_id, actor="test")
    # The edited row is the agent's; the accessed one no longer qualifies.
    assert (outcome.applied, outcome.skipped_concurrent_edit, outcome.ineligible) == (waited, 1, 1)
