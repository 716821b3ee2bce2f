"""Layered partitions: an earlier partition's file, the rows written since, and the ids it no longer holds.

An incremental snapshot that rewrote the whole memories partition for the rows a night changed spent most of
its time decoding and encoding rows that had not changed (41 s of a 135 s quiet night at 1M memories, for
17k rows the previous night's apply touched). A layered partition instead holds

    base.parquet     an earlier full partition's file, hard-linked (never edited: partitions are replaced whole)
    delta.parquet    the rows new or changed since that file was read, in id order
    dropped.parquet  the ids of base rows that are gone or changed (one `id` column)

and reads as one table in id order: the base's rows that are not dropped with the delta's merged in, equal to
the partition a full read writes. The next incremental snapshot keeps the same base and writes a new delta;
a full read (weekly by default, or when the changes since outgrow `FULL_READ_SHARE`) writes a plain file again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.parquet import VECTOR_BATCH_ROWS, is_vector
from engram_pipelines.warehouse.raw_vectors import read_raw_into

BASE, DELTA, DROPPED = "base.parquet", "delta.parquet", "dropped.parquet"
DROPPED_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False)])


@dataclass(frozen=True)
class Layers:
    base: Path
    delta: Path
    dropped: Path

    @classmethod
    def of(cls, directory: Path) -> Layers | None:
        """The layers of the partition in `directory`, or None when it is a plain file (or missing)."""
        if not (directory / BASE).exists():
            return None
        return cls(directory / BASE, directory / DELTA, directory / DROPPED)

    @property
    def files(self) -> tuple[Path, Path, Path]:
        return self.base, self.delta, self.dropped


@dataclass(frozen=True)
class _Chosen:
    """The rows a read asks for: of these namespaces, with these ids (all, where None)."""

    namespaces: pa.Array | None
    ids: pa.Array | None

    @property
    def all(self) -> bool:
        return self.namespaces is None and self.ids is None

    def mask(self, rows: pa.Table) -> pa.Array | None:
        """Which of `rows` (with the id and namespace columns) are chosen; None: all."""
        masks = [
            pc.is_in(rows[column], value_set=values)
            for column, values in (("namespace", self.namespaces), ("id", self.ids))
            if values is not None
        ]
        return None if not masks else masks[0] if len(masks) == 1 else pc.and_(*masks)


def _kept(path: Path, chosen: _Chosen, dropped: pa.Array | None) -> tuple[pa.Array, pa.Array]:
    """(the file's rows to keep as a boolean mask, their ids)."""
    table = pq.read_table(path, columns=["id"] if chosen.namespaces is None else ["id", "namespace"])
    keep = pa.array(np.ones(table.num_rows, dtype=bool))
    if dropped is not None and len(dropped):
        keep = pc.invert(pc.is_in(table["id"], value_set=dropped)).combine_chunks()
    mask = chosen.mask(table)
    if mask is not None:
        keep = pc.and_(keep, mask).combine_chunks()
    return keep, table["id"].filter(keep).combine_chunks()


def _merge_order(layers: Layers, chosen: _Chosen) -> tuple[pa.Array, pa.Array, np.ndarray]:
    """(the base's rows kept, the delta's rows kept, the merged id order of the kept rows: the base's, then the
    delta's)."""
    dropped = pq.read_table(layers.dropped)["id"].combine_chunks()
    base_keep, base_ids = _kept(layers.base, chosen, dropped)
    delta_keep, delta_ids = _kept(layers.delta, chosen, None)
    # The two are each in id order; one sort of their ids (nearly sorted: 60 ms at 1M) gives the merged order.
    return (
        base_keep,
        delta_keep,
        pc.sort_indices(pa.chunked_array([base_ids, delta_ids], pa.string())).to_numpy(),
    )


def read_layered(
    layers: Layers,
    columns: list[str] | None = None,
    namespaces: list[str] | None = None,
    *,
    ids: pa.Array | None = None,
    keep: bool = True,
) -> pa.Table:
    """The partition's rows (of `namespaces` only and with `ids` only, when given) and `columns` (all when
    None), in id order.
    The merged rows are kept for the next reader (`_MERGED`) unless `keep` is false: then only `columns` are
    merged, unless they are kept already.

    Float vectors are scattered into one array as they stream from the files, as `read_parquet` gathers them:
    a take over the assembled column would hold 1M x 384 floats twice."""
    schema = pq.read_schema(layers.base)
    wanted = columns if columns is not None else schema.names
    chosen = _Chosen(None if namespaces is None else pa.array(namespaces, pa.string()), ids)
    vectors = [n for n in wanted if is_vector(f := schema.field(n)) and pa.types.is_fixed_size_list(f.type)]
    merged: dict[str, pa.ChunkedArray | pa.Array] = {}
    plain = [n for n in wanted if n not in vectors]
    if plain:
        key = _identity(layers)
        if key in _MERGED or (chosen.all and keep):
            rows = _merged_rows(layers, schema, key)
            mask = chosen.mask(rows)
            if mask is not None:
                rows = rows.filter(mask)
        else:  # some rows (a shard's step, in a process of its own), or a one-off read: not kept
            rows = _merge(layers, schema, plain, chosen)
        merged.update({name: rows[name] for name in plain})
    if vectors:
        base_keep, delta_keep, order = _merge_order(layers, chosen)
        at = np.empty(len(order), dtype=np.int64)
        at[order] = np.arange(len(order))  # where each source row (base kept, then delta) lands
        kept_in_base = int(pc.sum(base_keep).as_py() or 0)
        sources = [
            (layers.base, base_keep, at[:kept_in_base]),
            (layers.delta, delta_keep, at[kept_in_base:]),
        ]
        for name in vectors:
            merged[name] = _scattered(sources, name, schema.field(name).type, len(order))
    out = pa.schema([schema.field(name) for name in wanted], metadata=schema.metadata)
    return pa.table([merged[f.name] for f in out], schema=out)


# The merged rows (every column but the float vectors) of the partitions read last in this process. A night's
# steps read the same layered memories partition 17 times; each merge took its rows from the two files again
# (at 1M memories with 34k rows written since the base: 30 s of a 115 s quiet night in read_layered, 14 s of it
# in the take). Kept: the merged table of each of the last two partitions (the memories' is 442 MiB at 1M).
# Partitions are replaced whole and their files never edited, so the files' identity is the key.
_MERGED: OrderedDict[tuple[tuple[str, int, int, int], ...], pa.Table] = OrderedDict()
_MERGED_KEPT = 2


def _identity(layers: Layers) -> tuple[tuple[str, int, int, int], ...]:
    stats = [(str(p), p.stat()) for p in layers.files]
    return tuple((path, st.st_ino, st.st_mtime_ns, st.st_size) for path, st in stats)


def _merged_rows(layers: Layers, schema: pa.Schema, key: tuple[tuple[str, int, int, int], ...]) -> pa.Table:
    """Every column of the partition but the float vectors, in id order (kept for the next reader)."""
    if key in _MERGED:
        _MERGED.move_to_end(key)
        return _MERGED[key]
    plain = [f.name for f in schema if not (is_vector(f) and pa.types.is_fixed_size_list(f.type))]
    rows = _MERGED[key] = _merge(layers, schema, plain, _Chosen(None, None))
    while len(_MERGED) > _MERGED_KEPT:
        _MERGED.popitem(last=False)
    return rows


def _merge(layers: Layers, schema: pa.Schema, columns: list[str], chosen: _Chosen) -> pa.Table:
    """`columns` (no float vectors) of the partition's `chosen` rows, in id order."""
    base_keep, delta_keep, order = _merge_order(layers, chosen)
    # One take straight from the two files' rows (no filtered copy first: at 1M memories each copy of the
    # text columns is hundreds of MB), in batches of the plain read's size for the readers downstream.
    base = pq.read_table(layers.base, columns=columns)
    rows_of = np.concatenate(
        [
            np.flatnonzero(base_keep.to_numpy(zero_copy_only=False)),
            base.num_rows + np.flatnonzero(delta_keep.to_numpy(zero_copy_only=False)),
        ]
    )
    delta = pq.read_table(layers.delta, columns=columns).cast(pa.schema([schema.field(n) for n in columns]))
    rows = pa.concat_tables([base, delta]).take(rows_of[order])
    del base, delta
    return pa.Table.from_batches(rows.to_batches(max_chunksize=65_536), schema=rows.schema)


def _scattered(
    sources: list[tuple[Path, pa.Array, np.ndarray]], name: str, kind: pa.FixedSizeListType, rows: int
) -> pa.Array:
    """One fixed-size float vector column of `rows` rows, each source's kept rows written at their places."""
    size = kind.list_size
    values = np.empty((rows, size), dtype=kind.value_type.to_pandas_dtype())
    valid = np.ones(rows, dtype=bool)
    for path, keep, at in sources:
        keep_np = keep.to_numpy(zero_copy_only=False)
        if read_raw_into(path, name, keep_np, at, values):  # its raw copy: no null among them
            continue
        start = taken = 0
        for batch in pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20).iter_batches(
            batch_size=VECTOR_BATCH_ROWS, columns=[name]
        ):
            column = batch.column(0)
            mask = keep_np[start : start + len(column)]
            start += len(column)
            n = int(mask.sum())
            if not n:
                continue
            flat = column.values.slice(column.offset * size, len(column) * size).to_numpy(
                zero_copy_only=False
            )
            places = at[taken : taken + n]
            values[places] = flat.reshape(len(column), size)[mask]
            valid[places] = column.is_valid().to_numpy(zero_copy_only=False)[mask]
            taken += n
    mask = None if valid.all() else pa.array(~valid)
    return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), type=kind, mask=mask)


def layered_view_sql(layers: Layers) -> str:
    """A DuckDB query of the partition's rows (hive columns from the path), for the warehouse's views."""
    base, delta, dropped = (quoted(p.as_posix()) for p in layers.files)
    options = "hive_partitioning = true, union_by_name = true"
    return (
        f"SELECT * FROM read_parquet({base}, {options}) "
        f"WHERE id NOT IN (SELECT id FROM read_parquet({dropped})) "
        f"UNION ALL BY NAME SELECT * FROM read_parquet({delta}, {options})"
    )
