"""The live store behind one interface: the same tests run on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

from engram_pipelines.store import (
    MigrationRequired,
    Outcome,
    StoreBusy,
    StoreError,
    VersionConflict,
    open_store,
    sqlite,
)
from engram_pipelines.store.migrations import LATEST_VERSION
from tests.support.memories import T0, memory


def test_migrations_are_versioned_and_idempotent(store):
    assert store.schema_version() == LATEST_VERSION
    assert store.migrate() == []
    assert store.schema_version() == LATEST_VERSION


def test_migration_2_keeps_the_ledger_and_keys_it_per_change_set(store_url, monkeypatch):
    from engram_pipelines.store import core
    from engram_pipelines.store.migrations import MIGRATIONS

    monkeypatch.setattr(core, "MIGRATIONS", MIGRATIONS[:1])  # a store as release 1 left it
    with open_store(store_url, migrate=True) as old, old.write_transaction() as cur:
        cur.execute(
            old._sql(
                "INSERT INTO change_ledger (change_id, change_set_id, target_id, outcome, detail, at) "
                "VALUES (?, ?, ?, ?, ?, ?)"
            ),
            ("c1", "set-a", "m1", "ineligible", "gone", old._to_db("created_at", T0)),
        )
    monkeypatch.setattr(core, "MIGRATIONS", MIGRATIONS)
    with open_store(store_url, migrate=True) as store:
        assert store.schema_version() == LATEST_VERSION
        assert store.ledger("set-a") == {"c1": ("ineligible", "gone")}
        # The same change (same content, so the same id) proposed again by another night's set has its own row.
        store.record_outcomes("set-b", [Outcome("c1", "m1", "applied")])
        assert store.ledger("set-a") == {"c1": ("ineligible", "gone")}
        assert store.ledger("set-b") == {"c1": ("applied", None)}


def test_a_store_behind_the_schema_names_the_fix(tmp_path):
    sqlite3.connect(tmp_path / "old.db").close()  # an empty database: schema version 0
    with pytest.raises(MigrationRequired, match="schema version 0.*engram-pipelines init --store"):
        open_store(f"sqlite:///{tmp_path}/old.db")


def test_a_missing_sqlite_store_is_named_and_not_created(tmp_path):
    missing = tmp_path / "typo" / "engram.db"
    with pytest.raises(MigrationRequired, match="no SQLite store at .*engram-pipelines init --store"):
        open_store(f"sqlite:///{missing}")
    assert not missing.parent.exists()
    with open_store(f"sqlite:///{missing}", migrate=True) as store:  # `init` and `import` create it
        assert store.schema_version() == LATEST_VERSION


def test_unknown_url_is_a_clear_error():
    with pytest.raises(StoreError, match="use sqlite:///path"):
        open_store("mysql://x")
    with pytest.raises(StoreError, match="\\*\\*\\*"):
        open_store("postgresql://u:secret@127.0.0.1:1/db")


def test_insert_is_idempotent_and_get_round_trips(store):
    row = memory(1, tags=["a", "b"], metadata={"k": 1}, importance=0.7, pinned=True)
    assert store.insert_memories([row]) == 1
    assert store.insert_memories([row, memory(2)]) == 1
    got = store.get("m1")
    assert got["tags"] == ["a", "b"] and got["metadata"] == {"k": 1}
    assert got["importance"] == pytest.approx(0.7) and got["pinned"] is True
    assert got["created_at"] == T0 and got["version"] == 1 and got["zone"] == "active"
    np.testing.assert_allclose(got["embedding"], row["embedding"], rtol=1e-6)
    assert store.get("nope") is None


def test_agent_cas_update_bumps_version_and_conflicts(store):
    store.insert_memories([memory(1)])
    assert store.update_memory("m1", 1, content="edited") == 2
    with pytest.raises(VersionConflict):
        store.update_memory("m1", 1, content="lost update")
    assert store.get("m1")["content"] == "edited"


def test_access_bookkeeping_does_not_bump_the_version(store):
    store.insert_memories([memory(1)])
    at = dt.datetime(2026, 11, 2, 9, tzinfo=dt.UTC)
    store.record_access("m1", at)
    got = store.get("m1")
    assert (got["access_count"], got["last_accessed_at"], got["version"]) == (1, at, 1)


def test_recall_hides_superseded_and_archived_rows_which_a_zone_filter_reads_back(store):
    rows = [
        memory(1),
        memory(2, superseded_by="m1"),
        memory(3, zone="archived"),
        memory(4, zone="purge_queue"),
    ]
    store.insert_memories(rows)
    assert store.recall("ns1") == ["m1"]
    assert store.recall("ns1", zones=("active", "archived")) == ["m1", "m3"]
    assert store.recall("ns1", zones=["archived"]) == ["m3"]
    with pytest.raises(ValueError, match="zones must be some of"):
        store.recall("ns1", zones=("deleted",))


def test_recall_shows_a_semantic_node_and_not_the_source_whose_text_it_carries(store):
    """A node takes its most informative source's text: recall shows that text once, as the node, while the
    node is visible and both say the same; the source is never written to, and `get` still returns it."""
    rows = [
        memory(1, content="Maya lives in Boston"),
        memory(2, content="Maya lives in Boston now"),
        memory(3, content="Maya lives in Boston", kind="semantic", tier="ltm"),
        memory(4, content="Maya lives in Boston"),  # the same text, but the node is not derived from it
    ]
    store.insert_memories(rows)
    store.insert_links(
        [{"namespace": "ns1", "src_id": "m3", "dst_id": d, "kind": "derived-from"} for d in ("m1", "m2")]
    )
    assert store.recall("ns1") == ["m2", "m3", "m4"]
    assert store.recall("ns1", zones=("active", "archived")) == ["m2", "m3", "m4"]
    assert store.get("m1")["content"] == "Maya lives in Boston"
    # An agent's edit of the source brings it back; so does the node leaving recall.
    store.update_memory("m1", 1, content="Maya lives in Boston's South End")
    assert store.recall("ns1") == ["m1", "m2", "m3", "m4"]
    store.update_memory("m1", 2, content="Maya lives in Boston")
    assert store.recall("ns1") == ["m2", "m3", "m4"]
    with store.write_transaction() as cur:
        cur.execute("UPDATE memories SET zone = 'archived' WHERE id = 'm3'")
    assert store.recall("ns1") == ["m1", "m2", "m4"]


def test_a_pinned_row_is_in_recall_even_when_superseded(store):
    store.insert_memories([memory(1), memory(2, superseded_by="m1")])
    assert store.recall("ns1") == ["m1"]
    store.set_pinned("m2", store.get("m2")["version"], True)  # an agent pins what a merge hid
    assert store.recall("ns1") == ["m1", "m2"]
    assert store.recall("ns1", zones=("active", "archived")) == ["m1", "m2"]


def test_streamed_batches_cover_every_row(store):
    store.insert_memories([memory(i) for i in range(25)])
    batches = list(store.iter_memory_batches(10, 384))
    assert [b.num_rows for b in batches] == [10, 10, 5]
    ids = [i for b in batches for i in b.column("id").to_pylist()]
    assert ids == sorted(f"m{i}" for i in range(25))
    first = batches[0].column("embedding")[0].as_py()
    assert len(first) == 384


def test_streamed_vectors_are_the_stored_floats_and_null_where_missing_or_of_another_size(store):
    rows = [memory(1), memory(2, embedding=None, embedding_model=None), memory(3, embedding=np.ones(3))]
    store.insert_memories(rows)
    (batch,) = store.iter_memory_batches(10, 384)
    vectors = batch.column("embedding").to_pylist()
    assert np.array_equal(np.asarray(vectors[0], dtype=np.float32), rows[0]["embedding"])
    assert vectors[1:] == [None, None]


def test_a_read_between_streamed_batches_leaves_the_stream_open(store):
    # What export does for a row its fixed-size batch cannot hold (a vector of another dimension).
    store.insert_memories([memory(i) for i in range(25)])
    ids: list[str] = []
    for batch in store.iter_memory_batches(10, 384):
        ids += batch.column("id").to_pylist()
        assert set(store.read_memories(ids[-1:])) == {ids[-1]}
    assert ids == sorted(f"m{i}" for i in range(25))


@pytest.mark.postgres
def test_postgres_uses_pgvector_when_the_extension_exists(pg_server):
    url = pg_server.create_database("engram_vector_check")
    with open_store(url, migrate=True) as store:
        expected = "vector" if pg_server.has_pgvector else "bytea"
        assert store.embedding_column_type().startswith(expected)


def test_sqlite_checkpoints_rarely_during_an_apply_and_restores_after(tmp_path):
    with open_store(f"sqlite:///{tmp_path}/s.db", migrate=True) as store:
        pragma = store.conn.execute
        defaults = (
            pragma("PRAGMA wal_autocheckpoint").fetchone()[0],
            pragma("PRAGMA cache_size").fetchone()[0],
        )
        with store.exclusive_apply():
            assert pragma("PRAGMA wal_autocheckpoint").fetchone()[0] == sqlite.APPLY_WAL_PAGES
            assert pragma("PRAGMA cache_size").fetchone()[0] == sqlite.APPLY_CACHE_KIB
        after = (pragma("PRAGMA wal_autocheckpoint").fetchone()[0], pragma("PRAGMA cache_size").fetchone()[0])
        assert after == defaults


def test_streamed_links_keep_every_value_in_batches_of_the_size_asked(store):
    """PostgreSQL streams links through COPY as CSV: separators, quotes, line breaks, empty strings, NULLs,
    microseconds and full float precision must come back as written."""
    at = dt.datetime(2026, 11, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    links = [
        {
            "namespace": "ns, one",
            "src_id": "a,1",
            "dst_id": 'b"2',
            "kind": "associated",
            "weight": 0.1 + 0.2,
            "origin": "",
            "created_at": at,
            "updated_at": at,
            "traversed_at": None,
        },
        {
            "namespace": "ns1",
            "src_id": "line\nbreak",
            "dst_id": "ünï ☃",
            "kind": "temporal",
            "weight": 1e-7,
            "origin": "agent",
            "created_at": at,
            "updated_at": at + dt.timedelta(microseconds=1),
            "traversed_at": at,
        },
        {
            "namespace": "ns1",
            "src_id": "m1",
            "dst_id": "m2",
            "kind": "duplicate-of",
            "weight": 1.0,
            "origin": "nightly",
            "created_at": at,
            "updated_at": at,
            "traversed_at": None,
        },
    ]
    assert list(store.iter_link_batches(2)) == []
    store.insert_links(links)
    batches = list(store.iter_link_batches(2))
    assert [b.num_rows for b in batches] == [2, 1]
    got = pa.Table.from_batches(batches).to_pylist()
    key = lambda link: (link["src_id"], link["dst_id"], link["kind"])  # noqa: E731
    assert sorted(got, key=key) == sorted(links, key=key)


def _hold_write_lock(path, seconds: float, locked) -> None:
    """Another process's view: a connection that takes the write lock and keeps it for `seconds`."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("BEGIN IMMEDIATE")
    locked.set()
    time.sleep(seconds)
    con.execute("COMMIT")
    con.close()


def _quick_waits(store) -> None:
    store.conn.execute("PRAGMA busy_timeout = 100")  # SQLite's own wait, before the store's backoff


def test_a_sqlite_write_waits_for_another_writer_s_lock_with_backoff(tmp_path):
    """A 30 s write lock by another process aborted the apply at the 10 s busy timeout."""
    path = tmp_path / "engram.db"
    with open_store(f"sqlite:///{path}", migrate=True) as store:
        _quick_waits(store)
        store.lock_wait_seconds = 30
        locked = threading.Event()
        holder = threading.Thread(target=_hold_write_lock, args=(path, 1.5, locked))
        holder.start()
        locked.wait()
        started = time.monotonic()
        assert store.insert_memories([memory(1)]) == 1  # waited past the busy timeout, then wrote
        holder.join()
        assert time.monotonic() - started >= 1.0 and store.get("m1") is not None


def _hold_store_lock(url: str, seconds: float, locked: threading.Event) -> None:
    """Another process's view: a session of its own that takes the memories table's write lock and keeps it."""
    with open_store(url) as other, other.write_transaction() as cur:
        if url.startswith("postgres"):
            cur.execute("LOCK TABLE memories IN EXCLUSIVE MODE")
        locked.set()  # SQLite: BEGIN IMMEDIATE already holds the database's write lock
        time.sleep(seconds)


def test_a_write_lock_held_too_long_fails_naming_the_lock_and_writes_nothing(store):
    if store.dialect == "sqlite":
        _quick_waits(store)
    store.lock_wait_seconds = 0.5
    locked = threading.Event()
    holder = threading.Thread(target=_hold_store_lock, args=(store.url, 2.0, locked))
    holder.start()
    locked.wait()
    with pytest.raises(StoreBusy, match=r"is locked by another .*nothing .*was written"):
        store.insert_memories([memory(1)])
    holder.join()
    assert store.get("m1") is None
    assert store.insert_memories([memory(1)]) == 1  # released: the next write lands


def test_a_pruned_journal_keeps_exactly_the_entries_from_the_mark_on_whichever_way_it_prunes(store):
    """Pruning drops the entries before the mark and keeps the rest as they were (SQLite copies the few that
    stay aside and empties the table when fewer stay than go, else deletes the range): the keys journaled from
    the mark on are the same, nothing is journaled anew, and a read from before the mark is refused."""
    from engram_pipelines.store.core import MEMORY_JOURNAL

    marks = []
    for i in range(5):
        marks.append(store.journal_mark(MEMORY_JOURNAL))
        store.insert_memories([memory(i)])  # one transaction each: one journal position each
    end = store.journal_mark(MEMORY_JOURNAL)

    def since(mark: int) -> list[str] | None:
        keys = store.journal_keys(MEMORY_JOURNAL, mark, 100)
        return None if keys is None else keys["id"].to_pylist()

    # First more stay than go, then fewer, then none at all.
    # The prune's secure_delete FAST is its own: the connection's setting, whichever it was, is back after it.
    settings = ("OFF", "FAST", "ON") if store.dialect == "sqlite" else (None,) * 3
    for (cut, staying), setting in zip(
        ((1, ["m1", "m2", "m3", "m4"]), (4, ["m4"]), (5, [])), settings, strict=True
    ):
        below = marks[cut] if cut < len(marks) else end
        if setting is not None:
            store.conn.execute(f"PRAGMA secure_delete = {setting}")
            before = store.conn.execute("PRAGMA secure_delete").fetchone()
        store.prune_journal(MEMORY_JOURNAL, below)
        if setting is not None:
            assert store.conn.execute("PRAGMA secure_delete").fetchone() == before
        assert since(below) == staying
        assert since(marks[cut - 1]) is None  # its entries are gone
        # SQLite's mark is the next sequence number; PostgreSQL's the transaction id, which the prune moves on.
        assert store.journal_mark(MEMORY_JOURNAL) >= end and since(end) == []
    store.insert_memories([memory(9)])
    assert since(end) == ["m9"]
    assert store.journal_mark(MEMORY_JOURNAL) > end


def test_the_oldest_memory_is_found_by_the_created_at_index_not_a_scan(store):
    """Where the daily partitions start (`partitions.start: auto`) is asked at every code location load: the
    answer is the oldest `created_at`, read from the index migration 7 adds (a scan of 1M rows was 3.9 s)."""
    import datetime as dt

    assert store.earliest_created_at() is None  # an empty store
    store.insert_memories([memory(i, created_at=T0 + dt.timedelta(days=(i * 7) % 5)) for i in range(5)])
    assert store.earliest_created_at() == T0
    if store.dialect == "sqlite":
        plan = " ".join(
            row[-1] for row in store.query("EXPLAIN QUERY PLAN SELECT min(created_at) FROM memories")
        )
    else:  # five rows: PostgreSQL would scan them, so the scan is ruled out to see that the index can serve
        store.execute("SET enable_seqscan = off")
        plan = " ".join(row[0] for row in store.query("EXPLAIN SELECT min(created_at) FROM memories"))
        store.execute("RESET enable_seqscan")
    assert "memories_created_at" in plan
