"""Warehouse Parquet: atomic partitions, and vectors stored without a codec that costs more than it saves."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.warehouse import Warehouse


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
