"""The vectors' digests: they move with any bit of a vector and nothing else, and a stored partition gives them
(and the vectors of chosen namespaces only) whether it was written with them or before them."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from engram_pipelines.vectors.comparable import vector_schema
from engram_pipelines.warehouse.tables import Warehouse
from engram_pipelines.warehouse.vector_digests import (
    DIGEST_COLUMNS,
    stored_vectors,
    vector_digests,
    with_digests,
)

AS_OF = dt.date(2026, 11, 30)


def _column(matrix: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])


def test_a_digest_moves_with_any_bit_of_its_vector_only() -> None:
    rng = np.random.default_rng(3)
    for dim in (8, 5):  # two floats per word, and an odd size
        matrix = rng.standard_normal((40, dim)).astype(np.float32)
        before = vector_digests(_column(matrix)).to_numpy()
        assert len(set(before.tolist())) == 40
        moved = matrix.copy()
        moved[7, dim - 1] = np.nextafter(moved[7, dim - 1], np.float32(2))  # one bit of one value
        after = vector_digests(_column(moved)).to_numpy()
        assert np.flatnonzero(before != after).tolist() == [7]
        chunked = pa.chunked_array([_column(matrix[:13]), _column(matrix[13:])])
        assert np.array_equal(vector_digests(chunked).to_numpy(), before)
    assert len(vector_digests(_column(np.zeros((0, 4), np.float32)))) == 0
    nulls = pa.FixedSizeListArray.from_arrays(
        pa.array(np.ones(8, np.float32)), 4, mask=pa.array([False, True])
    )
    assert vector_digests(nulls).to_numpy()[1] == 0


def _vectors() -> pa.Table:
    rng = np.random.default_rng(4)
    rows = [
        {
            "id": f"{ns}-{i}",
            "namespace": ns,
            "model": "m",
            "source": "stored",
            "vector": rng.random(6).tolist(),
        }
        for ns in ("a", "b", "c")
        for i in range(5)
    ]
    return pa.Table.from_pylist(rows, schema=vector_schema(6)).sort_by("id")


def test_a_stored_partition_gives_digests_and_the_chosen_namespaces_vectors(tmp_path) -> None:
    table = _vectors()
    expected = with_digests(table)
    for written, root in ((expected, tmp_path / "now"), (table, tmp_path / "before_digests")):
        wh = Warehouse(root)
        wh.write_table("embeddings", AS_OF, written)
        source = stored_vectors(wh, AS_OF)
        assert source.digests.equals(expected.select(DIGEST_COLUMNS))
        chosen = source.load(["b"])
        assert set(chosen["namespace"].to_pylist()) == {"b"} and chosen.num_rows == 5
        assert chosen["vector"].equals(table.filter(pa.compute.equal(table["namespace"], "b"))["vector"])
        assert source.load([]).num_rows == 0 and source.load(None).num_rows == 15
        some = pa.array([table["id"][1].as_py(), table["id"][7].as_py(), "absent"])
        assert source.load(None, some)["id"].to_pylist() == some.to_pylist()[:2]
        assert source.load(["b"], some).num_rows == int(table["namespace"][7].as_py() == "b")
