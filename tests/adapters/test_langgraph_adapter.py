"""The LangGraph adapter against `langgraph-checkpoint-postgres`'s PostgresStore with its vector index, on a real
PostgreSQL with pgvector: items put by LangGraph, pulled, a night's decisions pushed back (`store.search` and
`store.get` no longer return what was superseded), a `put` after the pull wins, and `restore` brings an item
back with its vector."""

from __future__ import annotations

import uuid
import zlib

import numpy as np
import pytest

postgres_store = pytest.importorskip(
    "langgraph.store.postgres", reason="langgraph-checkpoint-postgres is a dev dependency"
)

from engram_pipelines.adapters.langgraph import LangGraphStore, memory_id  # noqa: E402
from engram_pipelines.changes.apply import apply_change_set  # noqa: E402
from tests.support.changes import intent, propose  # noqa: E402

DIM = 8


def _embed(texts):
    """A deterministic stand-in embedder (LangGraph calls it for puts and searches): one vector per word set."""
    out = []
    for text in texts:
        v = np.random.default_rng(zlib.crc32(text.lower().encode())).standard_normal(DIM)
        out.append((v / np.linalg.norm(v)).tolist())
    return out


@pytest.fixture
def langgraph(pg_server):
    url = pg_server.create_database(f"lg_{uuid.uuid4().hex[:8]}")
    index = {"dims": DIM, "embed": _embed, "fields": ["content"]}
    with postgres_store.PostgresStore.from_conn_string(url, index=index) as store:
        store.setup()
        yield url, store


def test_a_night_s_decisions_reach_a_langgraph_store_and_a_put_through_langgraph_wins(
    langgraph, store, warehouse
):
    url, items = langgraph
    ns = ("users", "alice")
    items.put(ns, "a", {"content": "Alice prefers vim", "source": "chat"})
    items.put(ns, "b", {"content": "Alice prefers vim"})
    items.put(ns, "c", {"content": "Alice drinks green tea"})
    adapter = LangGraphStore(url)

    pulled = adapter.pull(store, embedding_dim=384)
    assert (pulled.rows, pulled.inserted) == (3, 3)
    a, b, c = (memory_id("users.alice", k) for k in "abc")
    row = store.get(a)
    assert (row["namespace"], row["content"], row["metadata"]["source"]) == (
        "users.alice",
        "Alice prefers vim",
        "chat",
    )

    change_set = propose(
        store,
        warehouse,
        [
            intent(b, "supersede", by=a, namespace="users.alice"),
            intent(c, "move_zone", to="archived", namespace="users.alice"),
        ],
    )
    assert apply_change_set(store, change_set).applied == 2
    items.put(ns, "c", {"content": "Alice drinks green tea and matcha"})  # an agent, through LangGraph

    pushed = adapter.push(store, actor="nightly")
    assert (pushed.deleted, pushed.skipped_concurrent_edit) == (1, 1)
    assert items.get(ns, "b") is None and items.get(ns, "c") is not None
    found = {hit.key for hit in items.search(ns, query="Alice prefers vim", limit=10)}
    assert found == {"a", "c"}

    assert adapter.restore(store, b, actor="alice")
    assert items.get(ns, "b").value == {"content": "Alice prefers vim"}
    assert "b" in {hit.key for hit in items.search(ns, query="Alice prefers vim", limit=10)}  # its vector too

    assert adapter.push(store, actor="nightly").deleted == 0  # a restore is a decision to keep it there
    again = adapter.pull(store, embedding_dim=384)
    assert again.updated >= 1 and store.get(c)["content"] == "Alice drinks green tea and matcha"


def test_the_command_line_pulls_a_langgraph_store(langgraph, tmp_path):
    import json

    from tests.support.cli import run

    url, items = langgraph
    items.put(("agents", "coder"), "k1", {"text": "The build uses uv"})
    ours = f"sqlite:///{tmp_path}/engram.db"
    code, out = run("langgraph", "pull", "--from", url, "--store", ours, "--json")
    assert code == 0 and json.loads(out)["inserted"] == 1
    code, out = run("langgraph", "push", "--from", url, "--store", ours, "--json")
    assert code == 0 and json.loads(out).get("deleted", 0) == 0
