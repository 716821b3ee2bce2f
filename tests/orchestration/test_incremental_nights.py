"""Nights that reuse last night's work propose what nights that recompute everything propose.

Two stores start equal; between nights the same agents' writes go to both (an edit, an access, a new row, a
delete, and on the last night the deleted row restored); one store's nights run with the defaults (incremental
snapshot, vector pairs and contradictions reused, a namespace's pairs updated where a few of its rows moved),
the other's with `execution.reuse: false` (a full read, every analysis from scratch). Each night both must
propose the same changes, class by class, and find the same vectors and pairs, and the reuse must have
happened."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from engram_pipelines.changes.registry import read_changes
from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import Store, open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import AS_OF, memory


def _agents_write(store: Store, night: int, deleted_before: dict[str, Any] | None) -> dict[str, Any]:
    """The same writes on either store (rows of one namespace, picked in id order, so the other namespaces'
    pairs can be reused); returns the row it deleted."""
    ids = [
        row[0]
        for row in store.query(
            "SELECT id FROM memories WHERE namespace = 'user:bob' AND NOT pinned ORDER BY id"
        )
    ]
    (model,) = store.query("SELECT embedding_model FROM memories WHERE embedding_model IS NOT NULL LIMIT 1")[
        0
    ]
    edited, accessed, deleted = ids[night * 7], ids[night * 7 + 1], ids[night * 7 + 2]
    (version,) = store.query(store._sql("SELECT version FROM memories WHERE id = ?"), (edited,))[0]
    store.update_memory(edited, version, content=f"an agent rewrote this on night {night}")
    store.record_access(accessed, at=dt.datetime.combine(AS_OF, dt.time(12), dt.UTC))
    gone = store.read_memories([deleted])[deleted]
    with store.write_transaction() as cur:
        cur.execute(store._sql("DELETE FROM memories WHERE id = ?"), (deleted,))
    store.insert_memories([memory(f"new-{night}", namespace="user:bob", embedding_model=model)])
    if deleted_before is not None and night == 2:  # the row deleted the night before comes back as it was
        store.insert_memories([{k: v for k, v in deleted_before.items() if k != "version"}])
    return gone


def _proposed(store: Store, day: dt.date) -> set[tuple[str, str]]:
    return {
        (record.review_class, change_id)
        for record in store.list_change_sets()
        if record.as_of == day.isoformat()
        for change_id in read_changes(record, ["change_id"]).column("change_id").to_pylist()
    }


def test_reusing_nights_propose_what_full_recomputes_propose(store_url, other_store_url, tmp_path: Path):
    full_config = tmp_path / "full.yaml"
    full_config.write_text("execution:\n  reuse: false\n")
    runs = {
        "reuse": (store_url, tmp_path / "wh-reuse", None),
        "full": (other_store_url, tmp_path / "wh-full", str(full_config)),
    }
    deleted: dict[str, dict[str, Any] | None] = dict.fromkeys(runs)
    for url, _, _ in runs.values():
        with open_store(url, migrate=True) as store:
            load_demo(store, size=500, seed=5, as_of=AS_OF)
    for night in range(3):
        day = AS_OF + dt.timedelta(days=night)
        steps, proposed = {}, {}
        for name, (url, warehouse, config) in runs.items():
            with open_store(url) as store:
                if night:
                    deleted[name] = _agents_write(store, night, deleted[name])
            summary = execute_job("nightly", day, store=url, warehouse=str(warehouse), config_path=config)
            assert summary["success"], summary.get("error")
            steps[name] = summary["steps"]
            with open_store(url) as store:
                proposed[name] = _proposed(store, day)
        assert proposed["reuse"] == proposed["full"], f"night {night}"
        vectors = {
            name: Warehouse(warehouse).read_table("embeddings", day, ["id", "namespace", "model", "vector"])
            for name, (_, warehouse, _) in runs.items()
        }
        assert vectors["reuse"].equals(vectors["full"]), f"night {night}: the embeddings differ"
        pairs = {
            name: Warehouse(warehouse).read_table("similarity_pairs", day)
            for name, (_, warehouse, _) in runs.items()
        }
        assert pairs["reuse"].equals(pairs["full"]), f"night {night}: the pairs differ"
        assert proposed["reuse"], f"night {night} proposed nothing: the comparison would prove nothing"
        assert steps["reuse"]["applied_changes"]["applied"] == steps["full"]["applied_changes"]["applied"]
        assert steps["full"]["memory_snapshot"]["snapshot_mode"] == "full"
        if night == 2:  # night 0's apply touched most rows and added some to every namespace (night 1 reads
            # all again, and compares every namespace); the agents touch one namespace
            assert steps["reuse"]["memory_snapshot"]["snapshot_mode"] == "incremental"
            assert steps["reuse"]["similarity_pairs"]["namespaces_reused"] > 0
            # user:bob's few moved rows are joined against it, the pairs among its other rows reused.
            assert steps["reuse"]["similarity_pairs"]["namespaces_updated"] > 0
            # Only the rows written since the base have their vectors found again.
            assert Warehouse(runs["reuse"][1]).layers("embeddings", day) is not None
            semantic = {name: steps[name]["semantic"]["namespaces_computed"] for name in runs}
            assert semantic["reuse"] < semantic["full"], semantic
        assert steps["full"]["similarity_pairs"]["namespaces_reused"] == 0
