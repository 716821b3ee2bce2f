"""Link writes: a set-based batch lands, audits, records outcomes and reverts as the per-link loop did."""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.revert import RevertResult, _revert_entries, revert_change_set
from engram_pipelines.core import jsontext, records
from engram_pipelines.core.timestamps import end_of_day, format_timestamp
from engram_pipelines.store import LinkWrite, Outcome, Store, open_store
from engram_pipelines.store import writes as store_writes
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.changes import intent, propose
from tests.support.memories import AS_OF, T0, memory

T1 = dt.datetime(2026, 11, 2, 8, 30, 15, 123456, tzinfo=dt.UTC)
AT = end_of_day(AS_OF)
REVERT_AT = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
_twin_names = itertools.count()


def _link(src: str, dst: str, kind: str, weight: float, **fields: Any) -> dict[str, Any]:
    return {"namespace": "ns1", "src_id": src, "dst_id": dst, "kind": kind, "weight": weight, **fields}


# Weights that json_object (SQLite, 15 digits) or float8 -> numeric (PostgreSQL) would round, and whole
# numbers whose ".0" must survive, so the pre-images are checked at full precision.
SEED = [
    _link("m1", "m2", "associated", 2 / 3, origin="agent", created_at=T0, updated_at=T1, traversed_at=T1),
    _link("m2", "m3", "temporal", 1.0, origin="temporal", created_at=T0, updated_at=T0),
    _link("m3", "m4", "duplicate-of", 0.1 + 0.2, origin="merges", created_at=T0, updated_at=T1),
    _link("m4", "m1", "contradicts", 1e-7, origin="agent", created_at=T1, updated_at=T1, traversed_at=T0),
    _link("m1", "m3", "derived-from", 0.5, origin="semantic", created_at=T0, updated_at=T0),
    _link("m2", "m4", "associated", 1e16, origin="agent", created_at=T0, updated_at=T0),
]
NEW_WEIGHT = 0.12345678901234568


def link_intent(op: str, src: str, dst: str, kind: str, **params: Any) -> dict[str, Any]:
    target = f"{src}|{dst}|{kind}"
    return {**intent(target, op, src_id=src, dst_id=dst, kind=kind, **params), "target_kind": "link"}


def _mixed_intents() -> list[dict[str, Any]]:
    """New upserts, upserts of existing links, deletes of existing links and a delete of a missing one."""
    return [
        link_intent("upsert_link", "m1", "m4", "associated", weight=NEW_WEIGHT, origin="associations"),
        link_intent("upsert_link", "m3", "m1", "temporal", weight=1.0),
        link_intent("upsert_link", "m1", "m2", "associated", weight=0.75, origin="associations"),
        link_intent("upsert_link", "m2", "m3", "temporal", weight=0.5),
        link_intent("delete_link", "m3", "m4", "duplicate-of"),
        link_intent("delete_link", "m4", "m1", "contradicts"),
        link_intent("delete_link", "m2", "m1", "associated"),
    ]


def _seed(store: Store) -> None:
    store.insert_memories([memory(i) for i in range(1, 5)])
    store.insert_links(SEED)


def _links(store: Store) -> dict[str, dict[str, Any]]:
    rows = store.query(
        f"SELECT {', '.join(records.LINK_COLUMNS)} FROM memory_links ORDER BY src_id, dst_id, kind"
    )
    out = {}
    for row in rows:
        link = {c: store._from_db(c, v) for c, v in zip(records.LINK_COLUMNS, row, strict=True)}
        out[f"{link['src_id']}|{link['dst_id']}|{link['kind']}"] = link
    return out


def _doc(link: dict[str, Any]) -> dict[str, Any]:
    """A link as the audit log holds it: timestamps in the store's text form."""
    return {k: format_timestamp(v) if isinstance(v, dt.datetime) else v for k, v in link.items()}


def test_a_mixed_link_batch_lands_audits_records_and_reverts(store, warehouse):
    _seed(store)
    seeded = _links(store)
    cs = propose(store, warehouse, _mixed_intents())
    result = apply_change_set(store, cs)
    assert (result.applied, result.ineligible, result.total) == (6, 1, 7)
    assert result.ineligible_reasons == {"link no longer exists": 1}

    links = _links(store)
    assert sorted(links) == [
        "m1|m2|associated",
        "m1|m3|derived-from",
        "m1|m4|associated",
        "m2|m3|temporal",
        "m2|m4|associated",
        "m3|m1|temporal",
    ]
    assert links["m1|m4|associated"] == {
        **_link("m1", "m4", "associated", NEW_WEIGHT, origin="associations"),
        "created_at": AT,
        "updated_at": AT,
        "traversed_at": None,
    }
    assert links["m3|m1|temporal"]["origin"] == "pipeline"
    # An upsert of an existing link writes weight, origin and updated_at; created_at and traversed_at stay.
    assert links["m1|m2|associated"] == {
        **seeded["m1|m2|associated"],
        "weight": 0.75,
        "origin": "associations",
        "updated_at": AT,
    }
    assert links["m2|m3|temporal"] == {
        **seeded["m2|m3|temporal"],
        "weight": 0.5,
        "origin": "pipeline",
        "updated_at": AT,
    }
    assert links["m1|m3|derived-from"] == seeded["m1|m3|derived-from"]

    audit = store.audit_rows(change_set_id=cs)
    by_target = {a["target_id"]: a for a in audit}
    assert [a["target_kind"] for a in audit] == ["link"] * 6
    assert "m2|m1|associated" not in by_target
    assert {a["at"] for a in audit} == {AT}
    new = by_target["m1|m4|associated"]
    assert (new["op"], new["before"]) == ("link_upsert", None)
    assert new["after"] == {
        "origin": "associations",
        "traversed_at": None,
        "dst_id": "m4",
        "kind": "associated",
        "namespace": "ns1",
        "src_id": "m1",
        "weight": NEW_WEIGHT,
        "updated_at": format_timestamp(AT),
        "created_at": format_timestamp(AT),
    }
    for target in ("m1|m2|associated", "m2|m3|temporal"):
        entry = by_target[target]
        assert entry["before"] == _doc(seeded[target])
        assert entry["after"]["created_at"] == format_timestamp(seeded[target]["created_at"])
        assert entry["after"]["updated_at"] == format_timestamp(AT)
    assert by_target["m2|m3|temporal"]["after"]["weight"] == 0.5
    for target in ("m3|m4|duplicate-of", "m4|m1|contradicts"):
        entry = by_target[target]
        assert (entry["op"], entry["before"], entry["after"]) == ("link_delete", _doc(seeded[target]), None)
    # Full precision and float-ness of the weights in the pre-images (revert writes them back).
    weights = {t: by_target[t]["before"]["weight"] for t in ("m1|m2|associated", "m3|m4|duplicate-of")}
    assert weights == {"m1|m2|associated": 2 / 3, "m3|m4|duplicate-of": 0.1 + 0.2}
    assert isinstance(by_target["m2|m3|temporal"]["before"]["weight"], float)

    ledger = store.ledger(cs)
    assert sorted(o for o, _ in ledger.values()) == ["applied"] * 6 + ["ineligible"]
    missing = [d for o, d in ledger.values() if o == "ineligible"]
    assert missing == ["link no longer exists"]

    result = revert_change_set(store, cs)
    # Exactly the seed, timestamps included: a re-created temporal edge keeps its age and its lazy decay.
    assert _links(store) == seeded
    assert result.reverted == 6  # what landed (the ineligible delete left no audit row to revert)


# -- the former per-link loop, kept as the oracle the set-based writes are compared with ---------------------


def _write_links_one_by_one(
    store: Store,
    writes: Sequence[LinkWrite],
    *,
    actor: str,
    change_set_id: str,
    at: dt.datetime | None = None,
) -> set[str]:
    at = at or store_writes.utc_now()
    landed: set[str] = set()
    key_sql = "src_id = ? AND dst_id = ? AND kind = ?"
    cols = ", ".join(records.LINK_COLUMNS)
    with store.write_transaction() as cur:
        for w in writes:
            key = (w.link["src_id"], w.link["dst_id"], w.link["kind"])
            cur.execute(store._sql(f"SELECT {cols} FROM memory_links WHERE {key_sql}"), key)
            found = cur.fetchone()
            before = (
                {c: store._from_db(c, v) for c, v in zip(records.LINK_COLUMNS, found, strict=True)}
                if found
                else None
            )
            if w.op == "link_delete":
                if found is None:
                    continue
                cur.execute(store._sql(f"DELETE FROM memory_links WHERE {key_sql}"), key)
                after = None
            else:
                full = {"origin": "pipeline", "traversed_at": None, **w.link, "updated_at": at}
                full["created_at"] = before["created_at"] if before else at
                cur.execute(
                    store._sql(
                        f"INSERT INTO memory_links ({cols}) VALUES ({', '.join('?' for _ in records.LINK_COLUMNS)}) "
                        "ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET weight = excluded.weight, "
                        "origin = excluded.origin, updated_at = excluded.updated_at"
                    ),
                    tuple(store._to_db(c, full[c]) for c in records.LINK_COLUMNS),
                )
                after = full
            landed.add(w.change_id)
            cur.execute(
                store._sql(
                    "INSERT INTO audit_log (at, actor, change_set_id, change_id, target_kind, target_id, op, "
                    "before, after) VALUES (?, ?, ?, ?, 'link', ?, ?, ?, ?)"
                ),
                (
                    store._to_db("created_at", at),
                    actor,
                    change_set_id,
                    w.change_id,
                    "|".join(key),
                    w.op,
                    jsontext.dumps(before, sort_keys=False) if before else None,
                    jsontext.dumps(after, sort_keys=False) if after else None,
                ),
            )
        store._record_outcomes(
            cur,
            change_set_id,
            [
                Outcome(
                    w.change_id,
                    "|".join((w.link["src_id"], w.link["dst_id"], w.link["kind"])),
                    "applied" if w.change_id in landed else "ineligible",
                    None if w.change_id in landed else "link no longer exists",
                )
                for w in writes
            ],
            at,
        )
    return landed


@pytest.fixture
def twin(store: Store, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A second empty store of the same dialect, for the same history written the old way."""
    if store.dialect == "sqlite":
        url = f"sqlite:///{tmp_path}/twin.db"
    else:
        server = request.getfixturevalue("pg_server")
        url = server.create_database(f"engram_twin_{os.getpid()}_{next(_twin_names)}")
    s = open_store(url, migrate=True)
    yield s
    s.close()


def _typed(doc: dict[str, Any] | None) -> list[tuple[str, str, Any]] | None:
    """A document's keys in order with each value's type: 1 and 1.0 compare equal, these do not."""
    return None if doc is None else [(k, type(v).__name__, v) for k, v in doc.items()]


def _state(store: Store) -> dict[str, Any]:
    audit = [
        {**a, "before": _typed(a["before"]), "after": _typed(a["after"])}
        for a in store.audit_rows()
        if a["target_kind"] == "link"
    ]
    state = {
        "links": store.query(
            f"SELECT {', '.join(records.LINK_COLUMNS)} FROM memory_links ORDER BY src_id, dst_id, kind"
        ),
        "audit": audit,
        "ledger": store.query(
            "SELECT change_id, change_set_id, target_id, outcome, detail, at FROM change_ledger "
            "ORDER BY change_set_id, change_id"
        ),
    }
    if store.dialect == "postgres":
        # jsonb's text form is canonical: equal text is the same document, byte for byte.
        state["audit_text"] = store.query(
            "SELECT before::text, after::text FROM audit_log WHERE target_kind = 'link' ORDER BY audit_id"
        )
    return state


def test_set_based_link_writes_match_the_per_link_loop(store, twin, tmp_path, monkeypatch):
    """The same apply, direct batches (repeated keys, odd link dicts) and revert, old loop vs set-based."""
    monkeypatch.setattr(store_writes, "utc_now", lambda: REVERT_AT)
    monkeypatch.setattr(twin, "write_links", functools.partial(_write_links_one_by_one, twin))
    landed = {}
    for name, s in (("new", store), ("old", twin)):
        _seed(s)
        cs = propose(s, Warehouse(tmp_path / f"warehouse-{name}"), _mixed_intents())
        apply_change_set(s, cs, batch_size=3)
        direct = [
            # An int weight and a key the store has no column for both reach the `after` document as given.
            LinkWrite("d1", "link_upsert", {**_link("m1", "m3", "derived-from", 1), "note": "kept"}),
            LinkWrite("d2", "link_delete", {"src_id": "m1", "dst_id": "m3", "kind": "derived-from"}),
            # Re-created within the same batch, from a dict shaped like a pre-image (revert sends those).
            LinkWrite(
                "d3",
                "link_upsert",
                _link(
                    "m1",
                    "m3",
                    "derived-from",
                    0.25,
                    origin="semantic",
                    created_at="2020-01-01T00:00:00.000000Z",
                    updated_at="2020-01-01T00:00:00.000000Z",
                    traversed_at="2026-11-03T00:00:00Z",
                ),
            ),
            LinkWrite("d4", "link_upsert", _link("m2", "m4", "associated", 0.5)),
            LinkWrite("d5", "link_delete", {"src_id": "m4", "dst_id": "m4", "kind": "associated"}),
            LinkWrite("d6", "link_upsert", _link("m2", "m4", "associated", 0.625, origin="again")),
        ]
        landed[name] = s.write_links(direct, actor="test", change_set_id="direct", at=T1)
        result = RevertResult("direct")
        entries = [a for a in s.audit_rows(change_set_id="direct") if a["change_id"]]
        _revert_entries(s, entries, "test", "direct:revert", result)
        revert_change_set(s, cs)
    assert landed["new"] == landed["old"] == {"d1", "d2", "d3", "d4", "d6"}
    new, old = _state(store), _state(twin)
    assert new["links"] == old["links"]
    assert new["ledger"] == old["ledger"]
    assert len(new["audit"]) == len(old["audit"]) == 6 + 5 + 5 + 6
    for got, want in zip(new["audit"], old["audit"], strict=True):
        assert got == want
    assert new.get("audit_text") == old.get("audit_text")


def test_a_revert_leaves_links_a_later_set_changed_and_never_joins_a_missing_memory(store, warehouse):
    """Reverting a set after later nights rewrote links that those nights had changed (2 then pointed at missing
    memories) and counted link writes that never landed."""
    _seed(store)
    seeded = _links(store)
    first = propose(store, warehouse, _mixed_intents())
    apply_change_set(store, first)
    after_first = _links(store)
    later = propose(
        store,
        warehouse,
        [link_intent("upsert_link", "m1", "m2", "associated", weight=0.9, origin="associations")],
    )
    apply_change_set(store, later)
    with store.write_transaction() as cur:  # an agent deleted m4 (and its links)
        cur.execute("DELETE FROM memory_links WHERE src_id = 'm4' OR dst_id = 'm4'")
        cur.execute("DELETE FROM memories WHERE id = 'm4'")

    result = revert_change_set(store, first)
    links = _links(store)
    assert links["m1|m2|associated"] == {
        **after_first["m1|m2|associated"],
        "weight": 0.9,
    }  # the later write stands
    assert links["m2|m3|temporal"] == seeded["m2|m3|temporal"]  # untouched since: back exactly
    assert not any("m4" in key for key in links)  # nothing re-created to the deleted memory
    skipped = set(result.skipped_edited_since)
    assert {"m1|m2|associated", "m3|m4|duplicate-of", "m4|m1|contradicts"} <= skipped
    revert_ledger = store.ledger(f"{first}:revert")
    landed = sum(outcome == "applied" for outcome, _ in revert_ledger.values())
    assert result.reverted == landed and landed + len(skipped) == 6
