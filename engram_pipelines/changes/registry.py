"""Stored change sets: Parquet in the warehouse, registered in the store's `change_sets` table."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.changes.compose import CHANGE_SCHEMA, change_set_id_of
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.warehouse import Warehouse, write_parquet


class ChangeSetNotFound(LookupError):
    pass


def counts_of(table: pa.Table) -> dict[str, Any]:
    ops: Counter[str] = Counter()
    for ops_list in table.column("ops").to_pylist():
        ops.update(ops_list)
    return {
        "total": table.num_rows,
        "by_op": dict(sorted(ops.items())),
        "by_namespace": dict(sorted(Counter(table.column("namespace").to_pylist()).items())),
        "destructive": sum(table.column("destructive").to_pylist()),
    }


def store_change_set(
    store: Store, warehouse: Warehouse, table: pa.Table, *, created_at: dt.datetime, config_fingerprint: str
) -> ChangeSetRecord:
    """Write the change set's Parquet (deterministic bytes) and register it as `proposed` (idempotent)."""
    change_set_id = change_set_id_of(table)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    path = warehouse.change_set_path(change_set_id)
    if not path.exists():
        write_parquet(table, path, write_statistics=True)
    record = ChangeSetRecord(
        change_set_id=change_set_id,
        created_at=created_at,
        as_of=meta["as_of"],
        job=meta["job"],
        review_class=meta["review_class"],
        status="proposed",
        path=str(path),
        config_fingerprint=config_fingerprint,
        total=table.num_rows,
        counts=counts_of(table),
    )
    if not store.register_change_set(record):
        existing = store.get_change_set(change_set_id)
        assert existing is not None
        return existing
    return record


def find_change_set(store: Store, change_set_id: str) -> ChangeSetRecord:
    """The registered change set whose Parquet file exists (else ChangeSetNotFound, naming what is there)."""
    record = store.get_change_set(change_set_id)
    if record is None:
        known = ", ".join(r.change_set_id for r in store.list_change_sets()[-5:]) or "none yet"
        raise ChangeSetNotFound(
            f"no change set {change_set_id!r} in this store (recent: {known}); `engram-pipelines changes list` "
            "shows them all"
        )
    path = Path(record.path)
    if not path.exists():
        raise ChangeSetNotFound(f"change set {change_set_id} is registered but its file {path} is missing")
    return record


def read_changes(
    record: ChangeSetRecord, columns: list[str] | None = None, op: str | None = None
) -> pa.Table:
    """The change set's rows (of one `op`, if given), only `columns` if given: a first night at 1M memories
    holds 3.5M changes, 3.3 GB as one Arrow table with every column."""
    read = (
        None if columns is None else [*columns, *(["op"] if op is not None and "op" not in columns else [])]
    )
    schema = CHANGE_SCHEMA if read is None else pa.schema([CHANGE_SCHEMA.field(c) for c in read])
    filters = [("op", "=", op)] if op is not None else None
    return pq.read_table(record.path, columns=columns, schema=schema, filters=filters)


def load_change_set(
    store: Store, change_set_id: str, columns: list[str] | None = None
) -> tuple[ChangeSetRecord, pa.Table]:
    record = find_change_set(store, change_set_id)
    return record, read_changes(record, columns)
