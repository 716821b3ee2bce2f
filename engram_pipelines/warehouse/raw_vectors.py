"""A raw copy of a layered base file's float vectors, read without Parquet's decoding.

Every night reads the embeddings partition's vectors (semantic extraction, the pairs step), and the base of a
layered partition holds nearly all of them. Decoding 1M x 384 floats from Parquet's list levels took 3.5-4.5 s
on this 2-core machine (8.9 s inside the semantic step of a night at 1M memories); reading the same values from
a NumPy file in batches took 0.7-2.0 s (5.1 s in the step, most of it filling a fresh 1.5 GB array). So beside
a base file the warehouse keeps each of its float vector columns as `<file>.<column>.<fingerprint>.npy` (rows x
dim, in the file's row order), written with the vectors of a plain embeddings partition (the next night's
layers take its file as their base). Vectors barely compress, so it costs the column's size again, once per
base: every layered partition over it links it with the base.

The name carries the base file's fingerprint (its size and Parquet footer, which records every column chunk's
offsets, sizes and statistics), so a copy is only ever read with the file it was written from; one missing,
of another shape or with a null vector in its column means the Parquet read.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.warehouse.parquet import VECTOR_BATCH_ROWS, vector_matrix


def file_fingerprint(path: Path) -> str:
    """A Parquet file's identity: its size and footer (the last 8 bytes give the footer's length)."""
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(size - 8)
        footer_length = int.from_bytes(file.read(4), "little")
        file.seek(size - 8 - footer_length)
        footer = file.read(footer_length)
    return hashlib.sha256(size.to_bytes(8, "little") + footer).hexdigest()[:32]


def raw_path(base: Path, column: str) -> Path:
    return base.with_name(f"{base.name}.{column}.{file_fingerprint(base)[:16]}.npy")


def raw_copies(base: Path) -> list[Path]:
    """Every raw copy written beside `base` (of any column, any fingerprint)."""
    return sorted(base.parent.glob(f"{base.name}.*.npy"))


def write_raw(column: pa.Array | pa.ChunkedArray, base: Path, name: str) -> None:
    """The raw copy of `base`'s column `name`, from that column as written (none when a vector is null); a
    copy of `name` written for an earlier file of that path goes."""
    path = raw_path(base, name)
    for stale in raw_copies(base):
        if stale != path and stale.name.startswith(f"{base.name}.{name}."):
            stale.unlink()
    if column.null_count:
        return
    kind = column.type
    _saved(path, _dtype(kind), (len(column), kind.list_size), [vector_matrix(column)])


def link_raw_copies(source: Path, target: Path, link: Callable[[Path, Path], None]) -> None:
    """Every raw copy of the file `source` as it is, linked beside `target` (a link of it)."""
    suffix = f".{file_fingerprint(source)[:16]}.npy"
    for copy in raw_copies(source):
        if copy.name.endswith(suffix):
            link(copy, target.with_name(target.name + copy.name.removeprefix(source.name)))


def link_raw(source: Path, target: Path, name: str, link: Callable[[Path, Path], None]) -> None:
    """`target` (a link of the file `source`) gets `source`'s raw copies, linked, and one of `name` written from
    the file beside it when `source` has none (the next partition over the base links that one)."""
    link_raw_copies(source, target, link)
    if raw_path(target, name).exists():
        return
    file = pq.ParquetFile(target, pre_buffer=False, buffer_size=1 << 20)
    kind = file.schema_arrow.field(name).type

    def batches() -> Iterator[np.ndarray]:
        for batch in file.iter_batches(batch_size=VECTOR_BATCH_ROWS, columns=[name]):
            column = batch.column(0)
            if column.null_count:
                raise _NullVector
            yield vector_matrix(column)

    with contextlib.suppress(_NullVector):
        _saved(raw_path(target, name), _dtype(kind), (file.metadata.num_rows, kind.list_size), batches())


def read_raw_into(base: Path, name: str, keep: np.ndarray, at: np.ndarray, values: np.ndarray) -> bool:
    """`base`'s vectors of column `name` of the rows `keep` (a mask over the file's rows) written at the rows
    `at` of `values` (one per kept row, in file order), read from its raw copy in batches (mapping the copy
    instead cost 1.4-5.9 s for 1M x 384, erratically; batches of plain reads 0.7-1.3 s); False, with nothing
    written, when it has none that fits."""
    path = raw_path(base, name)
    if not path.exists():
        return False
    with path.open("rb", buffering=0) as file:
        try:
            header = _HEADERS.get(np.lib.format.read_magic(file))
            shape, fortran, dtype = header(file) if header else (None, True, None)
        except ValueError:
            return False
        width = values.shape[1] * values.itemsize
        fits = shape == (len(keep), values.shape[1]) and not fortran and dtype == values.dtype
        if not fits or os.fstat(file.fileno()).st_size != file.tell() + len(keep) * width:
            return False
        buffer = np.empty((VECTOR_BATCH_ROWS, values.shape[1]), dtype=values.dtype)
        taken = 0
        for start in range(0, len(keep), VECTOR_BATCH_ROWS):
            mask = keep[start : start + VECTOR_BATCH_ROWS]
            n = int(mask.sum())
            if not n:  # a reader of a few rows reads only the batches that hold them
                file.seek(len(mask) * width, os.SEEK_CUR)
                continue
            rows = buffer[: len(mask)]
            if file.readinto(rows.data.cast("B")) != len(mask) * width:
                raise OSError(f"{path}: shorter than its header says")
            values[at[taken : taken + n]] = rows[mask]
            taken += n
    return True


_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


class _NullVector(Exception):
    """A null vector: the column gets no raw copy (the Parquet read keeps its nulls)."""


def _dtype(kind: pa.FixedSizeListType) -> np.dtype:
    return np.dtype(kind.value_type.to_pandas_dtype())


def _saved(path: Path, dtype: np.dtype, shape: tuple[int, int], parts: Iterable[np.ndarray]) -> None:
    """`path` written whole or not at all: the rows of `parts` in order, aside, then renamed into place. Plain
    writes, not a mapped array: a mapped 1.5 GB copy counted in the process's resident memory while filled."""
    staging = path.with_name(path.name + ".tmp")
    try:
        with staging.open("wb") as file:
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(file, header)
            for part in parts:
                file.write(np.ascontiguousarray(part, dtype=dtype).data)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    staging.rename(path)
