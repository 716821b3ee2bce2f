"""Warehouse Parquet: atomic partitions, and vectors stored without a codec that costs more than it saves."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.warehouse.tables import Warehouse, read_parquet


def test_vectors_are_written_plain_and_everything_else_with_zstd(tmp_path):
    vectors = np.arange(12, dtype=np.float32).reshape(3, 4)
    table = pa.table(
        {
            "id": ["a", "b", "c"],
            "ops": [["x"], [], ["y", "z"]],  # a list, but not of floats: compressed like any other column
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), 4),
        }
    )
    path = Warehouse(tmp_path).write_table("embeddings", dt.date(2026, 11, 30), table)
    assert pq.read_table(path).equals(table)
    row_group = pq.ParquetFile(path).metadata.row_group(0)
    codecs = {row_group.column(i).path_in_schema: row_group.column(i).compression for i in range(3)}
    assert codecs == {"id": "ZSTD", "ops.list.element": "ZSTD", "vector.list.element": "UNCOMPRESSED"}


def test_a_vector_table_is_read_in_batches_with_its_columns_rows_and_metadata(tmp_path):
    n = 150_000  # more than one streamed batch
    namespaces = np.array(["a", "b", "c"])[np.arange(n) % 3]
    table = pa.table(
        {
            "id": [f"m{i}" for i in range(n)],
            "namespace": namespaces,
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(np.arange(n * 2, dtype=np.float32)), 2, mask=pa.array(np.arange(n) % 7 == 0)
            ),
        }
    ).replace_schema_metadata({"counts": "{}"})
    path = tmp_path / "embeddings.parquet"
    pq.write_table(table, path)
    whole = read_parquet(path)
    assert whole.equals(table) and whole.schema.metadata == pq.read_schema(path).metadata
    assert whole["id"].num_chunks > 1, "streamed batch by batch"
    assert whole["vector"].num_chunks == 1, "the vectors gathered into one array (a numpy view needs no copy)"
    assert whole["vector"].null_count == len(range(0, n, 7))
    some = read_parquet(path, ["id", "vector"], ["a", "c"])
    assert some.column_names == ["id", "vector"]
    assert some.equals(table.filter(pa.array(namespaces != "b")).select(["id", "vector"]))
    plain = read_parquet(path, ["id", "namespace"], ["b"])  # no vector: the plain filtered read
    assert plain.equals(
        pq.read_table(path, columns=["id", "namespace"], filters=[("namespace", "in", ["b"])])
    )
