"""The health report's counts after a run, from the snapshot and the rows the run touched."""

from __future__ import annotations

import pytest

from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.reports.health import COUNTED_COLUMNS, counts_after_apply, live_counts
from tests.support.memories import AS_OF, memory


def test_counts_after_an_apply_are_the_live_stores_counts(store, warehouse):
    store.insert_memories([memory(i, namespace=f"ns{i % 2}", importance=0.1 * (i % 10)) for i in range(30)])
    take_snapshot(store, warehouse, AS_OF)
    before = warehouse.read_table("memories", AS_OF, columns=["id", *COUNTED_COLUMNS])
    # What a run's apply does: rows archived, promoted, flagged and marked stale, one deleted, one inserted.
    store.update_memory("m2", 1, tier="ltm", kind="semantic", metadata={"semantic": {"tier": "assessed"}})
    store.update_memory("m3", 1, metadata={"contradictionWith": ["m4"]})
    with store.write_transaction() as cur:  # the pipeline's own columns
        cur.execute(store._sql("UPDATE memories SET zone = 'archived' WHERE id = ?"), ("m1",))
        cur.execute(store._sql("UPDATE memories SET stale = ? WHERE id = ?"), (True, "m3"))
        cur.execute(store._sql("DELETE FROM memories WHERE id = ?"), ("m5",))
    store.insert_memories([memory("new", namespace="ns2")])
    live = live_counts(store)
    for touched in (["m1", "m2", "m3", "m5", "new"], before["id"].to_pylist() + ["new"]):
        # (Most rows touched: the live store is counted whole; the answer is the same.)
        after = counts_after_apply(store, before, touched, embedding_dim=384)
        assert after.keys() == live.keys()
        for namespace, counts in live.items():  # the mean importance summed in another order
            assert after[namespace] == pytest.approx(counts), namespace
