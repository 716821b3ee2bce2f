"""The snapshot keeps every valid row and quarantines every invalid one with its row, field and reason."""

from __future__ import annotations

import sqlite3

import numpy as np
import pandera.pandas as pandera
import pyarrow as pa
import pytest

from engram_pipelines.core import jsontext
from engram_pipelines.core.records import memory_schema
from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.store import open_store
from engram_pipelines.store import sqlite as sqlite_store
from engram_pipelines.warehouse import schemas
from tests.support.memories import AS_OF, ProgressRecorder, memory

# What a writer that does not go through the adapter can leave in a SQLite store past its CHECK constraints.
_DAMAGE = {
    "m1": ("tags", '{"critical": true}', "tags: '{\"critical\": true}' must be a JSON list"),
    "m2": ("metadata", '{"score": NaN}', "metadata: '{\"score\": NaN}' must be a JSON dict"),
    # json.loads raises RecursionError on this, which pandera reported without a row: the row went through.
    "m3": ("metadata", "[" * 5_000 + "]" * 5_000, "metadata: '[[[["),
    "m4": ("score", 1.5, "score: value 1.5 fails in_range(0.0, 1.0)"),
    "m5": ("access_count", -2, "access_count: value -2 fails greater_than_or_equal_to(0)"),
    "m6": ("content", "", "content: value '' fails str_length(1, None)"),
    # A timestamp without its zone, or no timestamp at all: Arrow refused the whole batch, so every night failed.
    "m7": ("created_at", "yesterday", "created_at: 'yesterday' is not a timestamp with a zone offset"),
    "m8": (
        "updated_at",
        "2026-11-01T10:00:00",
        "updated_at: '2026-11-01T10:00:00' is not a timestamp with a",
    ),
    # Deeper than the change sets can carry (orjson writes at most 254 levels): it failed the change-set step.
    "m9": ("metadata", '{"a": ' + "[" * 200 + "]" * 200 + "}", "metadata: "),
}


def test_invalid_rows_are_quarantined_with_their_reasons_and_every_other_row_proceeds(tmp_path, warehouse):
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        store.insert_memories([memory(i) for i in range(11)])
    with sqlite3.connect(tmp_path / "engram.db") as raw:
        for memory_id, (column, value, _) in _DAMAGE.items():
            raw.execute(f"UPDATE memories SET {column} = ? WHERE id = ?", (value, memory_id))

    with open_store(url) as store:
        result = take_snapshot(store, warehouse, AS_OF, batch_size=3)

    assert (result.memories, result.quarantined) == (2, 9)
    kept = warehouse.read_table("memories", AS_OF, columns=["id"])["id"].to_pylist()
    assert kept == ["m0", "m10"]
    quarantine = warehouse.read_table("quarantine", AS_OF, columns=["id", "quarantine_reason"]).to_pylist()
    reasons = {row["id"]: row["quarantine_reason"] for row in quarantine}
    assert set(reasons) == set(_DAMAGE)
    for memory_id, (_, _, expected) in _DAMAGE.items():
        assert reasons[memory_id].startswith(f"row {memory_id}: {expected}"), reasons[memory_id]
    assert reasons["m9"].endswith(f"nested at most {jsontext.MAX_DEPTH} levels")
    assert len(reasons["m3"]) < 200, "a long value is cut in its reason (the row itself is in the quarantine)"
    assert sorted(s["id"] for s in result.quarantine_samples) == sorted(_DAMAGE)


def test_a_failure_of_no_row_stops_the_snapshot_instead_of_passing_the_batch(monkeypatch):
    """pandera reports a check that raises (or a column of the wrong type) without a row index: such a batch
    must not go through unchecked."""

    def explode(values):
        raise RuntimeError("boom")

    broken = schemas.MEMORY_SNAPSHOT_SCHEMA.update_column("content", checks=[pandera.Check(explode)])
    monkeypatch.setattr(schemas, "MEMORY_SNAPSHOT_SCHEMA", broken)
    empty = pa.RecordBatch.from_pylist([], schema=memory_schema(384))  # a raising check fails on no rows too
    with pytest.raises(schemas.SnapshotSchemaError, match="column 'content' fails"):
        schemas.memory_row_problems(empty)


def test_a_sqlite_snapshot_first_reads_every_memory_in_storage_order(tmp_path, warehouse, monkeypatch):
    monkeypatch.setattr(sqlite_store, "READ_AHEAD_ROWIDS", 1_000)
    with open_store(f"sqlite:///{tmp_path}/engram.db", migrate=True) as store:
        store.insert_memories([memory(i) for i in range(2_500)])
        store.execute("DELETE FROM memories WHERE id IN ('m5', 'm1500')")  # rowid gaps count for nothing
        progress = ProgressRecorder()
        result = take_snapshot(store, warehouse, AS_OF, progress=progress)
    assert progress.tasks[0] == ("read the memories ahead, in storage order", 2_498, 2_498)
    assert [task for task, _, _ in progress.tasks[1:]] == ["snapshot memories", "snapshot links"]
    assert result.memories == 2_498


def test_vectors_of_another_size_are_dropped_not_the_rows_and_the_night_embeds_them(store, tmp_path):
    """A store of 1536-d vectors (mem0's) quarantined every row and stopped the night: now each row proceeds
    without its vector, counted, and the nightly embeds its text with the configured model."""
    from engram_pipelines.orchestration.runner import execute_job
    from engram_pipelines.warehouse.tables import Warehouse

    wide = [memory(i, embedding=np.ones(1536), embedding_model="text-embedding-3-small") for i in range(6)]
    store.insert_memories([*wide, memory(6)])
    warehouse = Warehouse(tmp_path / "wh")
    result = take_snapshot(store, warehouse, AS_OF, embedding_dim=384)
    assert (result.memories, result.quarantined, result.vectors_dropped) == (7, 0, 6)
    rows = {r["id"]: r for r in warehouse.read_table("memories", AS_OF).to_pylist()}
    assert rows["m0"]["embedding"] is None and rows["m0"]["embedding_model"] is None
    assert rows["m6"]["embedding_model"] == "test-384"  # a vector of the right size is kept as it is

    night = execute_job(
        "nightly", AS_OF, store=store.url, warehouse=str(tmp_path / "night"), config_path=None
    )
    assert night["success"], night.get("error")
    assert night["steps"]["memory_snapshot"]["quarantined"] == 0
    assert night["steps"]["embeddings"]["embedded"] >= 6


def _partition(warehouse, table: str, day) -> pa.Table:
    return warehouse.read_table(table, day).replace_schema_metadata(None)


def test_an_incremental_snapshot_is_the_partition_a_full_read_writes_night_after_night(store, tmp_path):
    """Edits, accesses, an edit that keeps updated_at, deletes, a purge's restore, a row that breaks and one
    that is mended: each night the incremental partition equals a full read of the same store."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse

    store.insert_memories([memory(i, namespace=f"ns{i % 3}") for i in range(40)])
    incremental, full = Warehouse(tmp_path / "incremental"), Warehouse(tmp_path / "full")

    def raw(sql: str, *params: object) -> None:  # a writer that bypasses the store's API
        with store.write_transaction() as cur:
            cur.execute(store._sql(sql), params)

    def night(day, expect_mode: str):
        inc = take_snapshot(store, incremental, day, batch_size=7)
        ref = take_snapshot(store, full, day, batch_size=7, incremental=False)
        assert inc.mode == expect_mode, inc.full_reason
        for table in ("memories", "quarantine", "links"):
            assert _partition(incremental, table, day).equals(_partition(full, table, day)), table
        assert (inc.memories, inc.quarantined, inc.namespaces) == (
            ref.memories,
            ref.quarantined,
            ref.namespaces,
        )
        assert inc.quarantine_samples == ref.quarantine_samples
        return inc

    first = night(AS_OF, "full")
    assert first.full_reason == "no earlier snapshot in this warehouse"

    # Night 2: an agent's edit, accesses, a new row, a delete, and an edit that keeps updated_at.
    store.update_memory("m1", 1, content="m1 now says something else")
    store.record_access("m2")
    store.record_access("m2")
    store.insert_memories([memory(100, namespace="ns1")])
    raw("DELETE FROM memories WHERE id = ?", "m3")
    raw("UPDATE memories SET importance = 0.9, version = version + 1 WHERE id = ?", "m4")
    second = night(AS_OF + dt.timedelta(days=1), "incremental")
    assert (second.reread, second.deleted) == (4, 1)  # m1, m2, m4, m100 read again; m3 gone

    # Night 3: the deleted row comes back as it was (a restore), one row breaks, and the same night again.
    store.insert_memories([memory(3, namespace="ns0")])
    raw("UPDATE memories SET access_count = -1 WHERE id = ?", "m5")
    third = night(AS_OF + dt.timedelta(days=2), "incremental")
    assert third.quarantined == 1 and third.reread == 2
    again = night(AS_OF + dt.timedelta(days=2), "incremental")
    assert again.reread == 0

    # Night 4: the broken row is mended; nothing else changed.
    raw("UPDATE memories SET access_count = 0 WHERE id = ?", "m5")
    fourth = night(AS_OF + dt.timedelta(days=3), "incremental")
    assert (fourth.reread, fourth.quarantined) == (1, 0)


def test_a_full_read_when_the_base_cannot_be_trusted(store, tmp_path):
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse

    store.insert_memories([memory(i) for i in range(5)])
    warehouse = Warehouse(tmp_path / "wh")
    take_snapshot(store, warehouse, AS_OF)
    assert take_snapshot(store, warehouse, AS_OF + dt.timedelta(days=1)).mode == "incremental"
    # Another vector size; a week since the last full read; a missing file of the base.
    assert "embedding_dim" in take_snapshot(store, warehouse, AS_OF, embedding_dim=8).full_reason
    take_snapshot(store, warehouse, AS_OF)
    late = take_snapshot(store, warehouse, AS_OF + dt.timedelta(days=7))
    assert late.mode == "full" and "full_every_days" in late.full_reason
    next_day = AS_OF + dt.timedelta(days=8)
    (warehouse.table_path("quarantine", AS_OF + dt.timedelta(days=7))).unlink()
    assert "quarantine" in take_snapshot(store, warehouse, next_day).full_reason
    # Most rows changed (the night after a first night's apply): one full read, and the partition is the same.
    store.insert_memories([memory(i) for i in range(5, 10)])
    busy = take_snapshot(store, warehouse, next_day + dt.timedelta(days=1))
    assert busy.mode == "full" and busy.full_reason == (
        "more than 1 memories written since the last snapshot, which held 5: one full read is faster"
    )
    assert busy.memories == 10


def test_incremental_nights_write_layers_until_the_rows_written_since_outgrow_them(store, tmp_path):
    """Each incremental night keeps the last full read's file and writes only the rows written since; once those
    pass FULL_READ_SHARE of the store, one full read writes a plain partition again."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse

    store.insert_memories([memory(i) for i in range(10)])
    warehouse, full = Warehouse(tmp_path / "wh"), Warehouse(tmp_path / "full")
    take_snapshot(store, warehouse, AS_OF)
    for night, edited in enumerate(("m1", "m2"), start=1):
        store.update_memory(edited, 1, content=f"{edited} says something new")
        day = AS_OF + dt.timedelta(days=night)
        assert take_snapshot(store, warehouse, day).mode == "incremental"
        take_snapshot(store, full, day, incremental=False)
        layers = warehouse.layers("memories", day)
        assert layers is not None and layers.base.samefile(warehouse.table_path("memories", AS_OF))
        assert _partition(warehouse, "memories", day).equals(_partition(full, "memories", day))
    store.update_memory("m3", 1, content="m3 says something new")
    store.update_memory("m4", 1, content="m4 says something new")
    day = AS_OF + dt.timedelta(days=3)
    third = take_snapshot(store, warehouse, day)
    assert third.mode == "full" and third.full_reason.startswith(
        "4 memories were written since the last full read on 2026-11-29 (the last snapshot held 10)"
    )
    assert warehouse.layers("memories", day) is None
    take_snapshot(store, full, day, incremental=False)
    assert _partition(warehouse, "memories", day).equals(_partition(full, "memories", day))


def test_links_are_read_again_only_where_the_journal_says_and_equal_a_full_read(store, tmp_path):
    """Links inserted, re-weighted, traversed, deleted (through the API and by a raw writer), re-keyed and
    restored: each night the links carried over plus those journaled since equal a full read; a quiet night
    reads none and shares the previous file."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse
    from tests.support.world import link

    store.insert_memories([memory(i, namespace="ns1") for i in range(30)])
    store.insert_links([link(f"m{i}", f"m{i + 1}", "temporal_next") for i in range(20)])
    incremental, full = Warehouse(tmp_path / "incremental"), Warehouse(tmp_path / "full")

    def raw(sql: str, *params: object) -> None:  # a writer that bypasses the store's API
        with store.write_transaction() as cur:
            cur.execute(store._sql(sql), params)

    def night(days: int, expect_read: int | None):
        day = AS_OF + dt.timedelta(days=days)
        inc = take_snapshot(store, incremental, day, batch_size=7)
        take_snapshot(store, full, day, batch_size=7, incremental=False)
        assert _partition(incremental, "links", day).equals(_partition(full, "links", day))
        if expect_read is not None:
            assert inc.links_read == expect_read and not inc.links_full_reason, inc.links_full_reason
        return inc

    first = night(0, None)
    assert first.links_read == 20 and first.links_full_reason
    quiet = night(1, 0)
    assert quiet.links == 20
    assert incremental.table_path("links", AS_OF + dt.timedelta(days=1)).samefile(
        incremental.table_path("links", AS_OF)
    )
    # An insert, a new weight, a traversal, a delete by a raw writer, a key changed in place.
    store.insert_links([link("m25", "m26", "similar", weight=0.9)])
    raw("UPDATE memory_links SET weight = 0.25 WHERE src_id = ? AND kind = 'temporal_next'", "m1")
    raw("UPDATE memory_links SET traversed_at = updated_at WHERE src_id = ?", "m2")
    raw("DELETE FROM memory_links WHERE src_id = ?", "m3")
    raw("UPDATE memory_links SET kind = 'similar' WHERE src_id = ?", "m4")
    busy = night(2, 4)  # m25, m1, m2 and the re-keyed m4 read; m3 and m4's old key only dropped
    assert busy.links == 20
    # The deleted link comes back as it was; the new one goes.
    store.insert_links([link("m3", "m4", "temporal_next")])
    raw("DELETE FROM memory_links WHERE src_id = ?", "m25")
    night(3, 1)
    night(4, 0)


def test_a_link_journal_pruned_past_a_warehouse_mark_means_a_full_read(store, tmp_path):
    """Each snapshot prunes the journal up to what the night before it read; a second warehouse whose mark is
    older reads the links whole instead of missing what was pruned, as does one after many links changed."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse
    from tests.support.world import link

    store.insert_memories([memory(i, namespace="ns1") for i in range(30)])
    store.insert_links([link(f"m{i}", f"m{i + 1}", "temporal_next") for i in range(20)])
    nightly, lagging = Warehouse(tmp_path / "nightly"), Warehouse(tmp_path / "lagging")
    take_snapshot(store, nightly, AS_OF)
    take_snapshot(store, lagging, AS_OF)
    for day in (1, 2, 3):
        store.insert_links([link(f"m{day}", f"m{day + 5}", "similar")])
        assert take_snapshot(store, nightly, AS_OF + dt.timedelta(days=day)).links_read == 1
    journaled = store.query("SELECT count(*) FROM link_journal")[0][0]
    assert journaled == 1  # the last night's insert: the earlier ones were read and then pruned
    late = take_snapshot(store, lagging, AS_OF + dt.timedelta(days=3))
    assert "no longer reaches back" in late.links_full_reason and late.links == 23
    store.insert_links([link(f"m{i}", f"m{i + 2}", "similar") for i in range(10)])
    many = take_snapshot(store, nightly, AS_OF + dt.timedelta(days=4))
    # 10 written against the 23 the last snapshot held: past the share where one full read is cheaper.
    assert "more than 6 links written since the last snapshot, which held 23" in many.links_full_reason
    assert many.links == 33


def test_links_written_by_a_transaction_open_during_a_snapshot_are_read_the_next_night(
    store, store_url, tmp_path
):
    """PostgreSQL numbers journal entries in another order than it commits them: a link written by a
    transaction still open when the snapshot began is read the next night, not skipped by the mark."""
    import datetime as dt

    from engram_pipelines.core import records
    from engram_pipelines.warehouse.tables import Warehouse
    from tests.support.world import link

    store.insert_memories([memory(i, namespace="ns1") for i in range(30)])
    store.insert_links([link(f"m{i}", f"m{i + 1}", "similar") for i in range(10, 20)])
    warehouse, full = Warehouse(tmp_path / "wh"), Warehouse(tmp_path / "full")
    writer = open_store(store_url)
    try:
        late = link("m2", "m3", "temporal_next")
        with writer.write_transaction() as cur:
            cur.execute(
                writer._sql(
                    f"INSERT INTO memory_links ({', '.join(records.LINK_COLUMNS)}) "
                    f"VALUES ({', '.join('?' * len(records.LINK_COLUMNS))})"
                ),
                tuple(writer._to_db(c, late[c]) for c in records.LINK_COLUMNS),
            )
            during = take_snapshot(store, warehouse, AS_OF)  # the insert is not committed yet
        assert during.links == 10
    finally:
        writer.close()
    store.insert_links([link("m3", "m4", "similar")])
    day = AS_OF + dt.timedelta(days=1)
    after = take_snapshot(store, warehouse, day)
    take_snapshot(store, full, day, incremental=False)
    assert (after.links, after.links_read, after.links_full_reason) == (12, 2, "")
    assert _partition(warehouse, "links", day).equals(_partition(full, "links", day))


def test_a_memory_journal_that_no_longer_reaches_the_mark_means_a_full_read(store, tmp_path):
    """Each snapshot prunes the memory journal up to what the night before it read: a second warehouse whose
    mark is older, and a store older than the warehouse's mark (a copy restored from before the last snapshot),
    read the memories whole instead of missing what the journal lacks."""
    import datetime as dt
    import json

    from engram_pipelines.ingest.snapshot import STATE_FILE
    from engram_pipelines.warehouse.tables import Warehouse
    from engram_pipelines.warehouse.written import read_written

    store.insert_memories([memory(i) for i in range(10)])
    nightly, lagging = Warehouse(tmp_path / "nightly"), Warehouse(tmp_path / "lagging")
    take_snapshot(store, nightly, AS_OF)
    take_snapshot(store, lagging, AS_OF)
    for day in (1, 2, 3):
        store.update_memory(f"m{day}", 1, content=f"m{day} says something new")
        night = take_snapshot(store, nightly, AS_OF + dt.timedelta(days=day))
        assert night.mode == "incremental", night.full_reason
        read_again = set(read_written(nightly, AS_OF + dt.timedelta(days=day)).ids.to_pylist())
        # PostgreSQL marks a snapshot by the oldest transaction running in the whole cluster: one that held an
        # id while the night before took its mark (an autovacuum's ANALYZE writes statistics) has that night's
        # row read again too, which is safe; a row written before that night's mark is never read again.
        assert f"m{day}" in read_again and read_again <= {f"m{day - 1}", f"m{day}"}
        assert night.reread == len(read_again)
    # The earlier nights' entries were pruned: what is left is at most the last two nights'.
    journaled = {row[0] for row in store.query("SELECT id FROM memory_journal")}
    assert "m3" in journaled and journaled <= {"m2", "m3"}
    late = take_snapshot(store, lagging, AS_OF + dt.timedelta(days=3))
    assert late.full_reason == (
        "the store's memory journal no longer reaches back to the last snapshot's mark (pruned, or an older "
        "copy of the store)"
    )
    assert _partition(lagging, "memories", AS_OF + dt.timedelta(days=3)).equals(
        _partition(nightly, "memories", AS_OF + dt.timedelta(days=3))
    )
    state_file = nightly.tables_root / STATE_FILE
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "memories_mark": state["memories_mark"] + 1_000}))
    restored = take_snapshot(store, nightly, AS_OF + dt.timedelta(days=4))
    assert restored.mode == "full" and "memory journal no longer reaches back" in restored.full_reason


@pytest.mark.parametrize(("table", "partition"), [("memory_links", "links"), ("memories", "memories")])
def test_every_row_removed_at_once_is_seen_by_the_next_snapshot(store, tmp_path, table, partition):
    """TRUNCATE on PostgreSQL (no row trigger sees it: the journal counts as pruned), a DELETE of every row on
    SQLite (its row triggers journal each), of the links and of the memories."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse
    from tests.support.world import link

    store.insert_memories([memory(i, namespace="ns1") for i in range(10)])
    store.insert_links([link(f"m{i}", f"m{i + 1}", "temporal_next") for i in range(5)])
    warehouse = Warehouse(tmp_path / "wh")
    take_snapshot(store, warehouse, AS_OF)
    with store.write_transaction() as cur:
        cur.execute(f"DELETE FROM {table}" if store.dialect == "sqlite" else f"TRUNCATE {table}")
    emptied = take_snapshot(store, warehouse, AS_OF + dt.timedelta(days=1))
    assert getattr(emptied, partition) == 0
    assert warehouse.read_table(partition, AS_OF + dt.timedelta(days=1)).num_rows == 0


def test_a_store_migrated_to_the_memory_journal_reads_whole_once_then_only_what_changed(
    store_url, tmp_path, monkeypatch
):
    """A store and warehouse as release 5 left them (no memory journal, a snapshot state without its mark):
    the first night after the migration reads every row, the next only the rows journaled since."""
    import datetime as dt
    import json

    from engram_pipelines.ingest.snapshot import STATE_FILE
    from engram_pipelines.store import core
    from engram_pipelines.store.migrations import MIGRATIONS
    from engram_pipelines.warehouse.tables import Warehouse

    monkeypatch.setattr(core, "MIGRATIONS", MIGRATIONS[:5])
    with open_store(store_url, migrate=True) as old:
        old.insert_memories([memory(i) for i in range(10)])
    warehouse = Warehouse(tmp_path / "wh")
    state_file = warehouse.tables_root / STATE_FILE
    state_file.parent.mkdir(parents=True)
    state_file.write_text(json.dumps({"format": 1, "as_of": AS_OF.isoformat(), "full_at": AS_OF.isoformat()}))
    monkeypatch.setattr(core, "MIGRATIONS", MIGRATIONS)
    with open_store(store_url, migrate=True) as store:
        assert store.query("SELECT count(*) FROM memory_journal")[0][0] == 0
        first = take_snapshot(store, warehouse, AS_OF + dt.timedelta(days=1))
        assert first.full_reason == "the earlier snapshot was written by another release"
        store.update_memory("m4", 1, content="m4 says something new")
        second = take_snapshot(store, warehouse, AS_OF + dt.timedelta(days=2))
        assert (second.mode, second.reread, second.memories) == ("incremental", 1, 10)


def test_each_snapshot_records_what_it_read_again_and_which_snapshot_that_is_relative_to(store, tmp_path):
    """The `written` partition: nothing to go by after a full read; after an incremental one, the memories and
    links the journals named (edited, deleted, inserted), relative to the marks of the snapshot before."""
    import datetime as dt

    from engram_pipelines.warehouse.tables import Warehouse
    from engram_pipelines.warehouse.written import read_written
    from tests.support.world import link

    # Enough rows that two written are read as such (above `FULL_READ_SHARE` of them, all would be read again).
    store.insert_memories([memory(i, namespace="ns1") for i in range(20)])
    store.insert_links([link(f"m{i}", f"m{i + 1}", "temporal") for i in range(19)])
    wh = Warehouse(tmp_path)
    days = [AS_OF + dt.timedelta(days=n) for n in range(3)]
    take_snapshot(store, wh, days[0])
    first = read_written(wh, days[0])
    assert first is not None and not first.incremental and first.marks
    take_snapshot(store, wh, days[1])
    quiet = read_written(wh, days[1])
    assert quiet.since == first.marks and not len(quiet.ids) and not quiet.link_keys.num_rows
    (version,) = store.query(store._sql("SELECT version FROM memories WHERE id = ?"), ("m2",))[0]
    store.update_memory("m2", version, content="edited by an agent")
    with store.write_transaction() as cur:
        cur.execute(store._sql("DELETE FROM memories WHERE id = ?"), ("m7",))
        cur.execute(store._sql("DELETE FROM memory_links WHERE src_id = ?"), ("m1",))
    store.insert_links([link("m8", "m9", "associated")])
    take_snapshot(store, wh, days[2])
    busy = read_written(wh, days[2])
    assert busy.since == quiet.marks and busy.marks != quiet.marks
    assert set(busy.ids.to_pylist()) == {"m2", "m7"}
    assert set(zip(*(busy.link_keys[c].to_pylist() for c in ("src_id", "dst_id", "kind")), strict=True)) == {
        ("m1", "m2", "temporal"),
        ("m8", "m9", "associated"),
    }
    take_snapshot(store, wh, days[2], incremental=False)
    assert not read_written(wh, days[2]).incremental
