"""Stored change sets: Parquet in the warehouse, registered in the store's `change_sets` table."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.changes.compose import CHANGE_SCHEMA, altered_changes, change_set_id_of
from engram_pipelines.core.duck import duck
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.warehouse.parquet import write_parquet
from engram_pipelines.warehouse.tables import Warehouse


class ChangeSetNotFound(LookupError):
    pass


def ops_by(table: pa.Table, column: str) -> dict[str, dict[str, int]]:
    """`column`'s value -> op -> changes listing that op (a change composed of several ops counts for each),
    both sorted. Counted by DuckDB as it scans the table's chunks: flattened in Arrow, a 1M first night's
    3.96M changes were copied whole (key and ops) at the change set step's peak."""
    with duck() as con:
        con.register("changes", table.select([column, "ops"]))
        counts = con.sql(
            f"SELECT {column}, op, count(*) FROM (SELECT {column}, unnest(ops) AS op FROM changes) "
            "GROUP BY ALL ORDER BY ALL"
        ).fetchall()
    out: dict[str, dict[str, int]] = {}
    for key, op, n in counts:
        out.setdefault(key, {})[op] = n
    return out


@dataclasses.dataclass(frozen=True)
class Tally:
    """What a set's counts are made of, for changes whose namespaces no other tally holds (a set's namespace
    ranges): changes per namespace and op (`ops_by`), changes per namespace, in all, and how many hide or
    delete."""

    by_namespace_op: dict[str, dict[str, int]]
    by_namespace: dict[str, int]
    total: int
    destructive: int

    def plus(self, other: Tally) -> Tally:
        return Tally(
            {**self.by_namespace_op, **other.by_namespace_op},
            {**self.by_namespace, **other.by_namespace},
            self.total + other.total,
            self.destructive + other.destructive,
        )

    def counts(self) -> dict[str, Any]:
        """The set's counts as registered (a change composed of several ops counts for each)."""
        by_op: Counter[str] = Counter()
        for ops in self.by_namespace_op.values():
            by_op.update(ops)
        return {
            "total": self.total,
            "by_op": dict(sorted(by_op.items())),
            "by_namespace": dict(sorted(self.by_namespace.items())),
            "destructive": self.destructive,
        }


NO_CHANGES = Tally({}, {}, 0, 0)


def tally(table: pa.Table) -> Tally:
    namespaces = pc.value_counts(table.column("namespace")).to_pylist()
    return Tally(
        ops_by(table, "namespace"),
        {c["values"]: c["counts"] for c in namespaces},
        table.num_rows,
        int(pc.sum(table.column("destructive")).as_py() or 0),
    )


def counts_of(table: pa.Table) -> dict[str, Any]:
    """A set's counts as registered (`Tally.counts`)."""
    return tally(table).counts()


def store_change_set(
    store: Store,
    warehouse: Warehouse,
    table: pa.Table,
    *,
    created_at: dt.datetime,
    config_fingerprint: str,
    notes: dict[str, Any] | None = None,
) -> ChangeSetRecord:
    """Write the change set's Parquet (deterministic bytes) and register it as `proposed` (idempotent);
    `notes` join its counts (the volume guard's `held_for_review`)."""
    change_set_id = change_set_id_of(table)
    path = warehouse.change_set_path(change_set_id)
    if not path.exists():
        write_parquet(table, path, write_statistics=True)
    meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    return register_change_set(
        store,
        path,
        meta,
        {**counts_of(table), **(notes or {})},
        created_at=created_at,
        config_fingerprint=config_fingerprint,
    )


def register_change_set(
    store: Store,
    path: Path,
    meta: dict[str, str],
    counts: dict[str, Any],
    *,
    created_at: dt.datetime,
    config_fingerprint: str,
) -> ChangeSetRecord:
    """Register the set written at `path` (`meta`: its schema's metadata, `counts`: `counts_of` it and any
    notes) as `proposed`; the record already there if it was (a re-run)."""
    record = ChangeSetRecord(
        change_set_id=meta["change_set_id"],
        created_at=created_at,
        as_of=meta["as_of"],
        job=meta["job"],
        review_class=meta["review_class"],
        status="proposed",
        path=str(path.resolve()),  # a command run from another folder finds it
        config_fingerprint=config_fingerprint,
        total=counts["total"],
        counts=counts,
    )
    if not store.register_change_set(record):
        existing = store.get_change_set(record.change_set_id)
        assert existing is not None
        return existing
    return record


def registered_change_set(store: Store, change_set_id: str) -> ChangeSetRecord:
    """The store's record of a change set, whether or not its file is at hand (a revert needs only the audit)."""
    record = store.get_change_set(change_set_id)
    if record is None:
        known = ", ".join(r.change_set_id for r in store.list_change_sets()[-5:]) or "none yet"
        raise ChangeSetNotFound(
            f"no change set {change_set_id!r} in this store (recent: {known}); `engram-pipelines changes list` "
            "shows them all"
        )
    return record


def change_set_places(record: ChangeSetRecord, warehouse_root: str | Path | None) -> list[Path]:
    """Where a set's file may be, in order: the given warehouse's copy, then where it was written."""
    local = (
        [Path(warehouse_root) / "change_sets" / f"{record.change_set_id}.parquet"] if warehouse_root else []
    )
    return [*local, Path(record.path)]


def find_change_set(
    store: Store, change_set_id: str, warehouse_root: str | Path | None = None
) -> ChangeSetRecord:
    """The registered change set, its `path` where its Parquet file is (else ChangeSetNotFound, naming what is
    there): in `warehouse_root` when given and the file is there, else where it was written. A copied store and
    warehouse read their own files, not the original's; the id is the content's hash, so any file of that name
    holds the same plan (and `verify_change_set` checks it)."""
    record = registered_change_set(store, change_set_id)
    places = change_set_places(record, warehouse_root)
    found = next((p for p in places if p.exists()), None)
    if found is None:
        raise ChangeSetNotFound(
            f"change set {change_set_id} is registered but its file is missing (looked in "
            f"{', '.join(str(p) for p in places)})"
        )
    return dataclasses.replace(record, path=str(found.resolve()))


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


def read_head(record: ChangeSetRecord, columns: list[str], rows: int) -> pa.Table:
    """The set's first `rows` changes, `columns` only (a row group is read, not the set)."""
    schema = pa.schema([CHANGE_SCHEMA.field(c) for c in columns])
    file = pq.ParquetFile(record.path)
    batch = next(file.iter_batches(batch_size=rows, columns=columns), None)
    return schema.empty_table() if batch is None else pa.Table.from_batches([batch]).cast(schema)


class ChangeSetAltered(ChangeSetNotFound):
    """The stored file is not the plan that was proposed (unreadable, or changed since)."""


def verify_change_set(record: ChangeSetRecord) -> None:
    """The set's file still hashes to its content-addressed ids; else ChangeSetAltered naming what differs.
    Checked at approve and at apply: a rewritten row (another target, a patch into another namespace, no
    intents) applied 35 changes before."""
    try:
        schema = pq.read_schema(record.path)
        rows = pq.read_metadata(record.path).num_rows
        altered = altered_changes(record.path, record.change_set_id) if rows else []
    except (pa.ArrowException, OSError, duckdb.Error) as error:
        raise ChangeSetAltered(
            f"change set {record.change_set_id}: its file {record.path} cannot be read: {error}"
        ) from None
    if rows != record.total:
        raise ChangeSetAltered(
            f"change set {record.change_set_id} holds {rows} changes, registered with {record.total}"
        )
    if altered or not schema.metadata or change_set_id_of(schema) != record.change_set_id:
        shown = ", ".join(altered[:5]) or "its id"
        raise ChangeSetAltered(
            f"change set {record.change_set_id} was altered after it was proposed ({len(altered)} changes no "
            f"longer match their content-addressed ids: {shown}); nothing applied. Propose it again."
        )


def load_change_set(
    store: Store,
    change_set_id: str,
    columns: list[str] | None = None,
    warehouse_root: str | Path | None = None,
) -> tuple[ChangeSetRecord, pa.Table]:
    record = find_change_set(store, change_set_id, warehouse_root)
    return record, read_changes(record, columns)
