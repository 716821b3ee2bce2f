"""Parquet files as the warehouse writes and reads them: codecs per column, float vectors streamed into one
array, and whole-or-nothing writes."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

# Rows per batch where float vectors are streamed from a file: decoding 1M x 384 floats took 4.1 s in batches
# of 65,536 rows and 2.3 s in batches of 8,192 (each 100 MB batch came in fresh pages; a 12 MB one reuses them).
VECTOR_BATCH_ROWS = 8_192


def is_vector(field: pa.Field) -> bool:
    kind = field.type
    return (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind)) and pa.types.is_floating(
        kind.value_type
    )


def vector_matrix(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A fixed-size float vector column as a rows x dim array: a view of its values when it is one chunk (as
    the warehouse's reads return it). `combine_chunks` copies even one chunk: 1.8 s for 1M x 384 here, most
    of it fresh pages."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dim = max(column.type.list_size, 1)
    # Each chunk's own slice of its values, a null vector's slots included: one row of the matrix per row.
    flat = [c.values.slice(c.offset * dim, len(c) * dim).to_numpy(zero_copy_only=False) for c in chunks]
    if len(flat) == 1:
        return flat[0].reshape(-1, dim)
    return np.concatenate(flat or [np.zeros(0, column.type.value_type.to_pandas_dtype())]).reshape(-1, dim)


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet's column paths (`ops.list.element` for a list `ops`): per-column options name leaves, and a
    nested column named only by its field gets the writer's default (no compression)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return [column.path for column in pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema]


def codecs(schema: pa.Schema) -> dict[str, object]:
    """zstd and dictionaries for every column but float vectors: embeddings barely compress (1.42 GB zstd vs
    1.54 GB plain at 1M x 384) and zstd and the dictionary attempt made their write ~1.7x and read ~1.6x slower."""
    vectors = {f.name for f in schema if is_vector(f)}
    if not vectors:
        return {"compression": "zstd"}
    leaves = {path: path.split(".")[0] in vectors for path in _leaf_paths(schema)}
    return {
        "compression": {path: "none" if vector else "zstd" for path, vector in leaves.items()},
        "use_dictionary": [path for path, vector in leaves.items() if not vector],
    }


def read_parquet(
    path: Path,
    columns: list[str] | None = None,
    namespaces: list[str] | None = None,
    ids: pa.Array | None = None,
) -> pa.Table:
    """The file's rows (those of `namespaces` only and with `ids` only, when given) and `columns` (all when
    None).

    A file with a float vector column is streamed batch by batch without pre-buffering, each batch's vectors
    copied into one array as they come: `pq.read_table` decodes a 1M x 384 column through buffers several
    times its size (peak 6.1 GB and 14.5 s for a 1.6 GB table; streamed: about 2 GB and 4 s). The vector column
    comes back as one chunk, so its readers get a numpy view of it without another copy."""
    file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    schema = file.schema_arrow
    wanted = columns if columns is not None else schema.names
    vectors = [
        name for name in wanted if is_vector(f := schema.field(name)) and pa.types.is_fixed_size_list(f.type)
    ]
    if not vectors and ids is None:
        filters = [("namespace", "in", namespaces)] if namespaces is not None else None
        return pq.read_table(path, columns=columns, filters=filters)
    filtered = [c for c, by in (("namespace", namespaces), ("id", ids)) if by is not None and c not in wanted]
    read = [*wanted, *filtered]
    chosen = pa.array(namespaces or [], pa.string())
    chunks: dict[str, list[pa.Array]] = {name: [] for name in wanted if name not in vectors}
    gathered = {name: _VectorGather(schema.field(name).type, file.metadata.num_rows) for name in vectors}
    for batch in file.iter_batches(batch_size=VECTOR_BATCH_ROWS, columns=read):
        if namespaces is not None:
            batch = batch.filter(pc.is_in(batch["namespace"], chosen))
        if ids is not None:
            batch = batch.filter(pc.is_in(batch["id"], ids))
        for name, parts in chunks.items():
            parts.append(batch[name])
        for name, gather in gathered.items():
            gather.add(batch[name])
    out = pa.schema([schema.field(name) for name in wanted], metadata=schema.metadata)
    return pa.table(
        [
            gathered[f.name].array() if f.name in gathered else pa.chunked_array(chunks[f.name], f.type)
            for f in out
        ],
        schema=out,
    )


class _VectorGather:
    """One float vector column assembled from batches into a single array (values and validity)."""

    def __init__(self, kind: pa.DataType, capacity: int) -> None:
        self.kind, self.size, self.rows = kind, kind.list_size, 0
        # Untouched pages of np.empty are never resident: room for every row costs only what is filled.
        self.values = np.empty(capacity * max(self.size, 1), dtype=kind.value_type.to_pandas_dtype())
        self.valid: list[np.ndarray] = []

    def add(self, column: pa.Array) -> None:
        n = len(column)
        flat = column.values.slice(column.offset * self.size, n * self.size)
        self.values[self.rows * self.size : (self.rows + n) * self.size] = flat.to_numpy(zero_copy_only=False)
        self.valid.append(column.is_valid().to_numpy(zero_copy_only=False))
        self.rows += n

    def array(self) -> pa.Array:
        valid = np.concatenate(self.valid) if self.valid else np.ones(0, dtype=bool)
        values = pa.array(self.values[: self.rows * self.size])
        mask = None if valid.all() else pa.array(~valid)
        return pa.FixedSizeListArray.from_arrays(values, type=self.kind, mask=mask)


def write_parquet(table: pa.Table, path: Path, **options: object) -> Path:
    """Write `table` to `path` whole or not at all: aside first, then renamed over (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    pq.write_table(table, staging, **{**codecs(table.schema), **options})
    staging.rename(path)
    return path


def write_parquet_groups(
    schema: pa.Schema, groups: Iterable[pa.Table], path: Path, **options: object
) -> Path:
    """`write_parquet` of a table that comes a row group at a time (each of `groups` one row group, of
    `schema`, metadata included), so it is never whole in memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    try:
        with pq.ParquetWriter(staging, schema, **{**codecs(schema), **options}) as writer:
            for group in groups:
                writer.write_table(group, row_group_size=max(group.num_rows, 1))
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    staging.rename(path)
    return path
