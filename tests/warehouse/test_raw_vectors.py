"""The raw copies of a layered base's vectors: read as the Parquet file reads, and only with their own file."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engram_pipelines.warehouse.parquet import VECTOR_BATCH_ROWS, vector_matrix
from engram_pipelines.warehouse.raw_vectors import raw_copies, raw_path
from engram_pipelines.warehouse.tables import Warehouse

DAY = dt.date(2026, 3, 1)
DIM = 4
# More rows than one batch, so that batches are read, skipped (a namespace's rows are one run of ids) and cut.
ROWS = 2 * VECTOR_BATCH_ROWS + 100


def _vectors(ids: list[str], seed: int, *, null_at: int | None = None) -> pa.Table:
    values = np.random.default_rng(seed).standard_normal((len(ids), DIM)).astype(np.float32)
    vector = pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), DIM)
    if null_at is not None:
        vector = pc.if_else(pa.array(np.arange(len(ids)) != null_at), vector, pa.nulls(len(ids), vector.type))
    namespaces = ["ns-a" if i < ROWS // 2 else "ns-b" for i in range(len(ids))]
    return pa.table({"id": ids, "namespace": namespaces, "vector": vector})


def _layered(wh: Warehouse, *, null_at: int | None = None) -> tuple[pa.Table, pa.Table]:
    """A plain partition on DAY and the next day's layered over its file; (the base's rows, the delta)."""
    ids = [f"m{i:06d}" for i in range(ROWS)]
    base = _vectors(ids, seed=1, null_at=null_at)
    wh.write_table("embeddings", DAY, base)
    delta = _vectors([ids[5], ids[VECTOR_BATCH_ROWS + 3], "m999999"], seed=2)
    dropped = pa.array([ids[5], ids[7], ids[VECTOR_BATCH_ROWS + 3]])
    wh.write_layers(
        "embeddings",
        DAY + dt.timedelta(days=1),
        wh.table_path("embeddings", DAY),
        delta,
        dropped,
        raw_vectors=("vector",),
    )
    return base, delta


def _expected(base: pa.Table, delta: pa.Table) -> pa.Table:
    kept = base.filter(
        pc.invert(
            pc.is_in(base["id"], value_set=pa.array(["m000005", "m000007", f"m{VECTOR_BATCH_ROWS + 3:06d}"]))
        )
    )
    rows = pa.concat_tables([kept, delta])
    return rows.take(pc.sort_indices(rows["id"]))


def _read(
    wh: Warehouse,
    day: dt.date,
    namespaces: list[str] | None = None,
    ids: pa.Array | None = None,
    keep: bool = False,
) -> pa.Table:
    columns = ["id", "namespace", "vector"]
    return wh.read_table("embeddings", day, columns, namespaces=namespaces, ids=ids, keep=keep)


def test_a_layered_base_gets_a_raw_copy_read_as_its_parquet_file_reads(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    base, delta = _layered(wh)
    day = DAY + dt.timedelta(days=1)
    layers = wh.layers("embeddings", day)
    assert layers is not None
    [copy] = raw_copies(layers.base)
    assert copy == raw_path(layers.base, "vector")
    assert np.load(copy).shape == (ROWS, DIM)
    assert not raw_copies(wh.table_path("embeddings", DAY)), "the earlier partition is never written to"
    with_copy, ns_b = _read(wh, day), _read(wh, day, ["ns-b"])

    np.save(tmp_path / "aside.npy", np.zeros((ROWS, DIM), dtype=np.float32))
    copy.rename(tmp_path / "kept.npy")
    (tmp_path / "aside.npy").rename(
        copy
    )  # a copy that fits is what the read takes: the base's rows are zeros
    from_base = pc.invert(pc.is_in(with_copy["id"], value_set=delta["id"])).to_numpy(zero_copy_only=False)
    zeros = vector_matrix(_read(wh, day)["vector"])
    assert not zeros[from_base].any() and zeros[~from_base].all()

    copy.unlink()  # the same partition read from Parquet alone
    assert with_copy.equals(_read(wh, day))
    assert with_copy.equals(_expected(base, delta))
    assert ns_b.equals(_read(wh, day, ["ns-b"]))
    assert ns_b["id"].to_pylist()[0] == f"m{ROWS // 2:06d}"


def test_the_next_partition_over_the_same_base_links_its_raw_copy(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    _layered(wh)
    day, later = DAY + dt.timedelta(days=1), DAY + dt.timedelta(days=2)
    first = wh.layers("embeddings", day)
    assert first is not None
    wh.write_layers(
        "embeddings",
        later,
        first.base,
        _vectors(["m999998"], seed=3),
        pa.array([], pa.string()),
        raw_vectors=("vector",),
    )
    again = wh.layers("embeddings", later)
    assert again is not None
    assert os.stat(raw_path(again.base, "vector")).st_ino == os.stat(raw_path(first.base, "vector")).st_ino
    wh.link_partition("embeddings", later, later + dt.timedelta(days=1))
    linked = wh.layers("embeddings", later + dt.timedelta(days=1))
    assert linked is not None and raw_copies(linked.base) == [raw_path(linked.base, "vector")]


@pytest.mark.parametrize("damage", ["truncated", "another shape", "another file"])
def test_a_raw_copy_that_does_not_fit_its_file_is_not_read(tmp_path: Path, damage: str) -> None:
    wh = Warehouse(tmp_path)
    base, delta = _layered(wh)
    day = DAY + dt.timedelta(days=1)
    layers = wh.layers("embeddings", day)
    assert layers is not None
    copy = raw_path(layers.base, "vector")
    if damage == "truncated":
        os.truncate(copy, copy.stat().st_size - DIM * 4)
    elif damage == "another shape":
        copy.unlink()
        np.save(copy, np.zeros((ROWS, DIM + 1), dtype=np.float32))
    else:  # a copy written for another base file is named for that file: this one has none of its own
        copy.rename(copy.with_name(f"base.parquet.vector.{'0' * 16}.npy"))
    assert _read(wh, day).equals(_expected(base, delta))


def test_a_column_with_a_null_vector_gets_no_raw_copy(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    base, delta = _layered(wh, null_at=11)
    day = DAY + dt.timedelta(days=1)
    layers = wh.layers("embeddings", day)
    assert layers is not None and raw_copies(layers.base) == []
    read = _read(wh, day)
    assert read.equals(_expected(base, delta))
    assert read["vector"].null_count == 1


@pytest.mark.parametrize("keep", [False, True])
def test_a_read_of_some_ids_is_the_whole_read_filtered(tmp_path: Path, keep: bool) -> None:
    wh = Warehouse(tmp_path)
    _layered(wh)
    ids = pa.array(["m000003", "m000007", f"m{ROWS // 2 + 1:06d}", f"m{ROWS - 1:06d}", "m999999", "absent"])
    for day in (DAY, DAY + dt.timedelta(days=1)):  # a plain partition, a layered one
        whole = _read(wh, day)
        for namespaces in (None, ["ns-b"]):
            chosen = whole.filter(pc.is_in(whole["id"], value_set=ids))
            if namespaces is not None:
                chosen = chosen.filter(pc.is_in(chosen["namespace"], value_set=pa.array(namespaces)))
            assert _read(wh, day, namespaces, ids, keep=keep).equals(chosen)
            plain = wh.read_table(
                "embeddings", day, ["id", "namespace"], namespaces=namespaces, ids=ids, keep=keep
            )
            assert plain.equals(chosen.select(["id", "namespace"]))
