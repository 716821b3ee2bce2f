"""The operator's commands (seed 001): pin, unpin, promote, each one CAS write with its audit row; and the
Python API the command line is built on."""

from __future__ import annotations

import json

import pytest

import engram_pipelines
from engram_pipelines import api
from engram_pipelines.changes.operator import OPERATOR_SET, OperatorError
from engram_pipelines.store import Store, VersionConflict
from tests.support.cli import run
from tests.support.memories import memory


def _seed(store: Store) -> None:
    store.insert_memories([memory(1, tier="stm", importance=0.4), memory(2), memory(3, superseded_by="m2")])


def test_pin_unpin_and_promote_write_once_each_with_an_audit_row(store):
    _seed(store)
    result = api.pin(store, "m1", actor="alice")
    assert (result.changed, result.version) == (True, 2) and store.get("m1")["pinned"] is True
    assert api.pin(store, "m1", actor="alice").changed is False  # already pinned: nothing written
    assert api.unpin(store, "m1", actor="alice").changed and store.get("m1")["pinned"] is False
    promoted = api.promote(store, "m1", actor="bob", importance=0.9)
    row = store.get("m1")
    assert promoted.changed and (row["tier"], row["importance"], row["version"]) == ("ltm", 0.9, 4)
    audit = [a for a in store.audit_rows(target_id="m1")]
    assert [(a["op"], a["actor"], a["change_set_id"]) for a in audit] == [
        ("pin", "alice", OPERATOR_SET),
        ("unpin", "alice", OPERATOR_SET),
        ("promote", "bob", OPERATOR_SET),
    ]
    assert audit[-1]["before"]["tier"] == "stm" and audit[-1]["after"]["tier"] == "ltm"
    assert all(outcome == "applied" for outcome, _ in store.ledger(OPERATOR_SET).values())


@pytest.mark.parametrize(
    ("memory_id", "message"),
    [("nope", "no memory 'nope'"), ("m3", "was superseded by m2")],
)
def test_an_unknown_or_superseded_memory_is_refused(store, memory_id, message):
    _seed(store)
    for write in (api.pin, api.unpin, api.promote):
        with pytest.raises(OperatorError, match=message):
            write(store, memory_id, actor="alice")
    assert store.audit_rows(target_id=memory_id) == []


def test_an_importance_outside_zero_to_one_is_refused(store):
    _seed(store)
    with pytest.raises(OperatorError, match="outside 0..1"):
        api.promote(store, "m1", actor="alice", importance=1.5)


def test_a_concurrent_edit_wins_over_an_operator_write(store, monkeypatch):
    _seed(store)
    read = store.get

    def read_then_an_agent_edits(memory_id: str):
        row = read(memory_id)
        store.update_memory(memory_id, row["version"], tags=["agent"])  # lands between the read and the write
        return row

    monkeypatch.setattr(store, "get", read_then_an_agent_edits)
    with pytest.raises(VersionConflict, match="run `pin` again"):
        api.pin(store, "m1", actor="alice")
    monkeypatch.undo()
    row = store.get("m1")
    assert row["tags"] == ["agent"] and row["pinned"] is False


def test_the_command_line_pins_unpins_and_promotes(store_url):
    with api.open_store(store_url, migrate=True) as store:
        _seed(store)
    code, out = run("pin", "m1", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["changed"] is True
    code, out = run("promote", "m1", "--importance", "0.8", "--store", store_url, "--json")
    assert code == 0 and json.loads(out) | {"version": 0} == {
        "id": "m1",
        "op": "promote",
        "changed": True,
        "version": 0,
        "tier": "ltm",
        "importance": 0.8,
    }
    code, out = run("unpin", "m3", "--store", store_url)
    assert code != 0 and "superseded by m2" in out
    with api.open_store(store_url) as store:
        row = store.get("m1")
    assert row["pinned"] and row["tier"] == "ltm"


def test_the_api_is_importable_from_the_package():
    assert engram_pipelines.pin is api.pin and engram_pipelines.run_night is api.run_night
    assert set(engram_pipelines.__all__) <= set(dir(api))  # every listed name exists
