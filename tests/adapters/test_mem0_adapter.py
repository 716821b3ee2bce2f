"""The mem0 adapter against mem0's own vector-store class on a real PostgreSQL with pgvector: memories written by
mem0, pulled, a night's decisions pushed back (mem0's list and search no longer return what was superseded),
a write through mem0's API after the pull wins, and a pushed-out row comes back with `restore`."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import uuid

import numpy as np
import pytest

os.environ.setdefault("MEM0_TELEMETRY", "False")  # mem0 reports usage by default; this network is closed
pgvector = pytest.importorskip("mem0.vector_stores.pgvector", reason="mem0ai is a dev dependency")

from engram_pipelines.adapters.mem0 import Mem0Collection  # noqa: E402
from engram_pipelines.changes.apply import apply_change_set  # noqa: E402
from tests.support.changes import intent, propose  # noqa: E402

DIM = 8
PACIFIC = dt.timezone(dt.timedelta(hours=-8))


def _payload(text: str, user: str, **extra: object) -> dict:
    """What mem0's Memory writes for a new memory."""
    return {
        "data": text,
        "hash": hashlib.md5(text.encode()).hexdigest(),
        "created_at": dt.datetime(2026, 3, 1, 9, 0, tzinfo=PACIFIC).isoformat(),
        "user_id": user,
        **extra,
    }


def _vector(seed: int) -> list[float]:
    return np.random.default_rng(seed).standard_normal(DIM).tolist()


@pytest.fixture
def mem0_store(pg_server):
    url = pg_server.create_database(f"mem0_{uuid.uuid4().hex[:8]}")
    store = pgvector.PGVector(
        dbname=None,
        collection_name="mem0",
        embedding_model_dims=DIM,
        user=None,
        password=None,
        host=None,
        port=None,
        diskann=False,
        hnsw=False,
        connection_string=url,
    )
    yield url, store
    store.connection_pool.close()


def test_a_night_s_decisions_reach_mem0_and_a_write_through_mem0_wins(mem0_store, store, warehouse, tmp_path):
    url, vectors = mem0_store
    ids = [str(uuid.uuid4()) for _ in range(3)]
    texts = ["My name is liguoyu", "My name is liguoyu", "Likes green tea"]
    vectors.insert(
        vectors=[_vector(i) for i in range(3)],
        payloads=[_payload(t, "liguoyu", category="profile") for t in texts],
        ids=ids,
    )
    history = tmp_path / "history.db"
    collection = Mem0Collection(url, "mem0", history=history)
    ours = store  # the product's store, SQLite and PostgreSQL

    pulled = collection.pull(ours, embedding_dim=384)
    assert (pulled.rows, pulled.inserted) == (3, 3)
    row = ours.get(ids[0])
    assert (row["namespace"], row["content"]) == ("user:liguoyu", "My name is liguoyu")
    assert row["metadata"]["category"] == "profile" and row["metadata"]["mem0"]["hash"]

    # The night (here its change set, as the nightly composes it): the duplicate superseded, the tea archived.
    change_set = propose(
        ours,
        warehouse,
        [
            intent(ids[1], "supersede", by=ids[0], namespace="user:liguoyu"),
            intent(ids[2], "move_zone", to="archived", namespace="user:liguoyu"),
        ],
    )
    assert apply_change_set(ours, change_set).applied == 2
    # Meanwhile an agent edits the tea memory through mem0's own API.
    vectors.update(
        ids[2], payload=_payload("Likes green tea and matcha", "liguoyu", updated_at="2026-03-02T10:00")
    )

    pushed = collection.push(ours, actor="nightly")
    assert (pushed.deleted, pushed.skipped_concurrent_edit) == (1, 1)
    listed = {item.id for item in vectors.list(filters={"user_id": "liguoyu"})[0]}
    assert listed == {ids[0], ids[2]}  # the superseded duplicate is gone from mem0's reads; the edit stayed
    found = {hit.id for hit in vectors.search("name", _vector(1), top_k=10, filters={"user_id": "liguoyu"})}
    assert ids[1] not in found

    assert collection.restore(ours, ids[1], actor="alice")
    assert vectors.get(ids[1]).payload["data"] == "My name is liguoyu"
    assert not collection.restore(ours, ids[1], actor="alice")  # already back

    assert collection.push(ours, actor="nightly").deleted == 0  # a restore is a decision to keep it there
    # mem0's own history (read with mem0's class) tells the deletion and the restore, as its own events would.
    from mem0.memory.storage import SQLiteManager

    events = SQLiteManager(str(history)).get_history(ids[1])
    assert [(e["event"], e["old_memory"], e["new_memory"], e["is_deleted"]) for e in events] == [
        ("DELETE", "My name is liguoyu", None, True),
        ("ADD", None, "My name is liguoyu", False),
    ]
    again = collection.pull(ours, embedding_dim=384)
    assert again.updated == 1 and ours.get(ids[2])["content"] == "Likes green tea and matcha"


def test_the_command_line_pulls_pushes_and_names_a_store_it_cannot_reach(mem0_store, tmp_path):
    from tests.support.cli import run

    url, vectors = mem0_store
    ids = [str(uuid.uuid4()) for _ in range(2)]
    vectors.insert(
        vectors=[_vector(i) for i in range(2)],
        payloads=[_payload("Prefers vim", "ana"), _payload("Prefers vim", "ana")],
        ids=ids,
    )
    ours = f"sqlite:///{tmp_path}/engram.db"
    code, out = run("mem0", "pull", "--from", url, "--store", ours, "--json")
    assert code == 0 and json.loads(out)["inserted"] == 2
    code, out = run("mem0", "push", "--from", url, "--store", ours, "--json")
    assert code == 0 and json.loads(out).get("deleted", 0) == 0  # nothing hidden yet
    code, out = run("mem0", "restore", ids[0], "--from", url, "--store", ours)
    assert code != 0 and "was deleted by a push" in out
    code, out = run("mem0", "pull", "--from", "postgresql://nobody:secret@127.0.0.1:1/none", "--store", ours)
    assert code != 0 and "cannot reach the mem0 store" in out and "secret" not in out
