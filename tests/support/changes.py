"""Build a snapshot and a change set from hand-written intents (shared by the change-set tests)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa

from engram_pipelines.changes.compose import compose
from engram_pipelines.changes.intents import intents_table
from engram_pipelines.changes.registry import store_change_set
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.store import Store, open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import AS_OF, T0, memory


def intent(target: str, op: str, klass: str = "auto", source: str = "test", **params: Any) -> dict[str, Any]:
    return {
        "namespace": params.pop("namespace", "ns1"),
        "target_id": target,
        "op": op,
        "params": params,
        "source": source,
        "review_class": klass,
        "reason": f"{op} by {source}",
        "evidence": {"rule": op},
    }


def propose(
    store: Store,
    warehouse: Warehouse,
    intents: list[dict[str, Any]],
    klass: str = "auto",
    *,
    as_of: dt.date = AS_OF,
    config_fingerprint: str = "test",
) -> str:
    take_snapshot(store, warehouse, as_of)
    sets = compose(
        intents_table(intents),
        warehouse.read_table("memories", as_of),
        as_of=as_of,
        at=end_of_day(as_of),
        job="test",
    )
    record = store_change_set(
        store, warehouse, sets[klass], created_at=T0, config_fingerprint=config_fingerprint
    )
    return record.change_set_id


def three_namespaces(folder: Path, warehouse: Warehouse) -> tuple[pa.Table, pa.Table]:
    """Intents over nine rows in three namespaces (stale marks, tags, a link each; some gated), and the
    snapshot they were decided on: a set that composes in several ranges when RANGE_INTENTS is small."""
    spaces = ["ns-a", "ns-b", "ns-c"]
    with open_store(f"sqlite:///{folder}/s.db", migrate=True) as store:
        store.insert_memories([memory(i, namespace=spaces[i % 3]) for i in range(9)])
        take_snapshot(store, warehouse, AS_OF)
    link = {"kind": "related", "weight": 0.5}
    intents = intents_table(
        [intent(f"m{i}", "mark_stale", namespace=spaces[i % 3], score=0.1) for i in range(9)]
        + [intent(f"m{i}", "union_tags", namespace=spaces[i % 3], tags=["t"]) for i in range(0, 9, 2)]
        + [
            intent(f"m{i}", "union_tags", "gated", namespace=spaces[i % 3], tags=["g"])
            for i in range(1, 9, 3)
        ]
        + [
            {
                **intent(
                    f"m{i}|m{i + 3}|related",
                    "upsert_link",
                    namespace=spaces[i % 3],
                    src_id=f"m{i}",
                    dst_id=f"m{i + 3}",
                    **link,
                ),
                "target_kind": "link",
            }
            for i in range(6)
        ]
    )
    return intents, warehouse.read_table("memories", AS_OF)
