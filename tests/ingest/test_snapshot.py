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
