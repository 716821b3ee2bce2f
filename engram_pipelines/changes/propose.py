"""Turn one partition's proposals (every analysis's intents) into stored change sets."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from engram_pipelines.changes.compose import INTENT_SCHEMA, SNAPSHOT_COLUMNS, compose
from engram_pipelines.changes.registry import store_change_set
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.timestamps import end_of_day, utc_now
from engram_pipelines.warehouse import Warehouse


def propose_change_sets(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    job: str,
    sources: list[str],
    config_fingerprint: str,
) -> dict[str, tuple[ChangeSetRecord, pa.Table]]:
    """review class -> (registered record, change table) for the proposals of `sources`."""
    memories = warehouse.read_table("memories", as_of, columns=SNAPSHOT_COLUMNS)
    # The intents are passed, not kept: compose lets each range of them go once it is composed.
    sets = compose(_intents(warehouse, as_of, sources), memories, as_of=as_of, at=end_of_day(as_of), job=job)
    now = utc_now()
    return {
        klass: (
            store_change_set(store, warehouse, table, created_at=now, config_fingerprint=config_fingerprint),
            table,
        )
        for klass, table in sets.items()
    }


def _intents(warehouse: Warehouse, as_of: dt.date, sources: list[str]) -> pa.Table:
    tables = warehouse.read_proposals(as_of, sources)
    return (
        pa.concat_tables([t.cast(INTENT_SCHEMA) for t in tables]) if tables else INTENT_SCHEMA.empty_table()
    )
