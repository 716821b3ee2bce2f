"""Held changes that wait in an earlier night's set (changes/waiting.py): which sets, which intents."""

from __future__ import annotations

import datetime as dt
from typing import Any

from engram_pipelines.changes.intents import intents_table
from engram_pipelines.changes.registry import registered_change_set
from engram_pipelines.changes.revert import approve_change_set
from engram_pipelines.changes.waiting import waiting_sets, without_waiting
from engram_pipelines.config.model import Config, ReviewConfig
from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.orchestration.changes import _how_to_decide
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.changes import intent, propose
from tests.support.memories import AS_OF, T0, memory

CONFIG = Config()
ARCHIVE = {"from": "active", "to": "archived"}


def held(target: str, op: str = "move_zone", cluster: str | None = None, **params: Any) -> dict[str, Any]:
    return {
        **intent(target, op, klass="held", **(params or (ARCHIVE if op == "move_zone" else {}))),
        "cluster_id": cluster,
    }


def held_set(store: Store, warehouse: Warehouse, intents: list[dict], as_of: dt.date) -> ChangeSetRecord:
    change_set_id = propose(
        store, warehouse, intents, "held", as_of=as_of, config_fingerprint=CONFIG.fingerprint()
    )
    return registered_change_set(store, change_set_id)


def ids(records: list[ChangeSetRecord]) -> list[str]:
    return [r.change_set_id for r in records]


def test_the_sets_a_held_change_may_wait_in(store, warehouse):
    """Proposed, of an earlier night younger than the renewal days, same job and settings, file whole."""
    store.insert_memories([memory(1), memory(2)])
    first = held_set(store, warehouse, [held("m1")], AS_OF)
    gone = held_set(store, warehouse, [held("m2")], AS_OF)
    (warehouse.root / "change_sets" / f"{gone.change_set_id}.parquet").unlink()

    def waiting(day: int, *, job: str = "test", config: Config = CONFIG) -> list[str]:
        return ids(
            waiting_sets(store, warehouse.root, AS_OF + dt.timedelta(days=day), job=job, config=config)
        )

    assert waiting(1) == waiting(6) == [first.change_set_id]
    assert waiting(0) == []  # a re-run of that night proposes what it did
    assert waiting(7) == []  # review.held_renewal_days: proposed afresh
    assert waiting(1, job="nightly") == []
    assert waiting(1, config=Config(review=ReviewConfig(held_renewal_days=3))) == []  # other settings
    approve_change_set(store, first.change_set_id, actor="test")
    assert waiting(1) == []


def test_a_held_intent_waits_only_where_the_same_change_still_applies_as_it_stands(store, warehouse):
    store.insert_memories([memory(i) for i in range(1, 6)])
    earlier = held_set(
        store,
        warehouse,
        [held("m1"), held("m2"), held("m3", cluster="c1"), held("m4"), held("m5")],
        AS_OF,
    )
    row = store.get("m2")
    store.update_memory("m2", row["version"], content="edited by an agent")
    store.record_access("m5", T0 + dt.timedelta(days=50))
    tonight = AS_OF + dt.timedelta(days=1)
    take_snapshot(store, warehouse, tonight)
    intents = intents_table(
        [
            intent("m1", "mark_stale", score=0.1),  # auto: never waits
            held("m1"),  # the same change on the same row: waits
            held("m2"),  # the row was edited
            held("m3", cluster="c1"),  # a cluster is proposed whole
            held("m4"),
            held("m4", "mark_stale", score=0.1),  # other ops tonight
            held("m5"),  # accessed since
            held("m6"),  # nothing waits for it
        ]
    )
    out, waiting = without_waiting(intents, warehouse.read_table("memories", tonight), [earlier])
    assert waiting == [{"namespace": "ns1", "change_set_id": earlier.change_set_id, "changes": 1}]
    left = [
        (r["target_id"], r["review_class"], r["op"])
        for r in out.select(["target_id", "review_class", "op"]).to_pylist()
    ]
    assert ("m1", "held", "move_zone") not in left and ("m1", "auto", "mark_stale") in left
    assert len(left) == intents.num_rows - 1
    assert without_waiting(intents, warehouse.read_table("memories", tonight), []) == (intents, [])


def test_the_runs_advice_names_the_earlier_sets_where_held_changes_wait():
    def record(klass: str, total: int, **counts: Any) -> ChangeSetRecord:
        change_set_id = f"2026-11-30-nightly-{klass}-0"
        return ChangeSetRecord(
            change_set_id, T0, "2026-11-30", "nightly", klass, "proposed", "", "", total, counts
        )

    quiet = {k: record(k, 0) for k in ("auto", "gated")}
    assert _how_to_decide({**quiet, "held": record("held", 0)}) == "Nothing waits for review tonight."
    advice = _how_to_decide(
        {**quiet, "held": record("held", 0, waiting_in={"2026-11-29-nightly-held-1": 12})}
    )
    assert "held on an earlier night (12 of its changes still wait)" in advice
    assert "change_set_id: 2026-11-29-nightly-held-1" in advice
