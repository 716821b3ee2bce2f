"""Build a snapshot and a change set from hand-written intents (shared by the change-set tests)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from engram_pipelines.changes.compose import compose
from engram_pipelines.changes.intents import intents_table
from engram_pipelines.changes.registry import store_change_set
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.store import Store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import AS_OF, T0


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
