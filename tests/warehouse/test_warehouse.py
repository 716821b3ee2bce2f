"""Warehouse Parquet: atomic partitions, and vectors stored without a codec that costs more than it saves."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.warehouse.parquet import read_parquet
from engram_pipelines.warehouse.tables import Warehouse


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


def _rows(ids: list[int], salt: float) -> pa.Table:
    """Memories-like rows: id, namespace, content and a vector (every fifth one missing)."""
    values = np.array([[i + salt, -i - salt] for i in ids], dtype=np.float32).reshape(-1)
    return pa.table(
        {
            "id": [f"m{i:06d}" for i in ids],
            "namespace": [f"ns{i % 7}" for i in ids],
            "content": [f"row {i} {salt}" for i in ids],
            "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(values, pa.float32()), 2, mask=pa.array([i % 5 == 0 for i in ids])
            ),
        }
    )


def test_a_layered_partition_reads_as_the_plain_one_it_stands_for(tmp_path):
    """Base file, delta and dropped ids: every reader (whole, columns, a namespace shard, the DuckDB view) sees
    the rows in id order as one plain partition of the same rows."""
    day1, day2, day3 = dt.date(2026, 11, 28), dt.date(2026, 11, 29), dt.date(2026, 11, 30)
    wh = Warehouse(tmp_path)
    base = _rows(list(range(0, 150_000, 2)), 0.0)  # more than one streamed batch
    wh.write_table("memories", day1, base)
    changed, gone, new = [4, 70_000, 149_998], [6, 80_000], [1, 99_999, 200_001]
    delta = _rows(sorted(changed + new), 0.5)
    dropped = pa.array([f"m{i:06d}" for i in sorted(changed + gone)])
    wh.write_layers("memories", day2, wh.table_path("memories", day1), delta, dropped)
    keep = pa.compute.invert(pa.compute.is_in(base["id"], value_set=dropped))
    expected = pa.concat_tables([base.filter(keep), delta]).sort_by("id")

    assert wh.layers("memories", day2) is not None and wh.has_table("memories", day2)
    # A shard first: its rows merged on their own (a shard's step); then the whole, kept for later readers.
    shards = [wh.read_shard("memories", day2, shard, 3, ["id", "vector"]) for shard in range(3)]
    assert pa.concat_tables(shards).sort_by("id").equals(expected.select(["id", "vector"]))
    whole = wh.read_table("memories", day2)
    assert whole.equals(expected)
    assert whole["vector"].num_chunks == 1 and whole["vector"].null_count == expected["vector"].null_count
    assert wh.read_table("memories", day2, ["vector", "id"]).equals(expected.select(["vector", "id"]))
    shards = [wh.read_shard("memories", day2, shard, 3, ["id", "vector"]) for shard in range(3)]
    assert pa.concat_tables(shards).sort_by("id").equals(expected.select(["id", "vector"]))
    assert sum(shard.num_rows > 0 for shard in shards) > 1
    with wh.connect() as con:
        viewed = con.sql(
            f"SELECT id, content FROM memories WHERE as_of = '{day2}' ORDER BY id"
        ).to_arrow_table()
        assert viewed.equals(expected.select(["id", "content"]))
        assert con.execute("SELECT count(*) FROM memories").fetchall() == [
            (base.num_rows + expected.num_rows,)
        ]
    # A quiet next day links the three files: still the first day's base file.
    wh.link_partition("memories", day2, day3)
    assert wh.read_table("memories", day3).equals(expected)
    assert wh.layers("memories", day3).base.stat().st_ino == wh.table_path("memories", day1).stat().st_ino


def test_a_one_off_read_of_a_layered_partition_merges_only_its_columns_and_keeps_nothing(tmp_path):
    """`keep=False` (the snapshot reading the previous partition's ids): the same rows, nothing kept for later
    readers; a partition kept already answers it from the kept merge."""
    from engram_pipelines.warehouse import layers

    day1, day2 = dt.date(2026, 11, 28), dt.date(2026, 11, 29)
    wh = Warehouse(tmp_path)
    base = _rows(list(range(0, 100, 2)), 0.0)
    wh.write_table("memories", day1, base)
    delta, dropped = _rows([4, 7], 0.5), pa.array(["m000004", "m000006"])
    wh.write_layers("memories", day2, wh.table_path("memories", day1), delta, dropped)
    keep = pa.compute.invert(pa.compute.is_in(base["id"], value_set=dropped))
    expected = pa.concat_tables([base.filter(keep), delta]).sort_by("id")
    layers._MERGED.clear()

    assert wh.read_table("memories", day2, ["id"], keep=False).equals(expected.select(["id"]))
    assert not layers._MERGED
    assert wh.read_table("memories", day2, ["content", "id"]).equals(expected.select(["content", "id"]))
    assert len(layers._MERGED) == 1
    assert wh.read_table("memories", day2, ["namespace"], keep=False).equals(expected.select(["namespace"]))


def test_a_replaced_layered_partition_is_read_again_not_answered_from_the_last_merge(tmp_path):
    """The merged rows of a layered partition are kept for the night's next readers; a partition written again
    (new files, same directory) is merged again."""
    day1, day2 = dt.date(2026, 11, 28), dt.date(2026, 11, 29)
    wh = Warehouse(tmp_path)
    base = _rows(list(range(0, 100, 2)), 0.0)
    wh.write_table("memories", day1, base)
    for salt, dropped_ids in ((0.5, [4]), (0.25, [4, 6])):
        delta = _rows([4, 7], salt)
        dropped = pa.array([f"m{i:06d}" for i in dropped_ids])
        wh.write_layers("memories", day2, wh.table_path("memories", day1), delta, dropped)
        keep = pa.compute.invert(pa.compute.is_in(base["id"], value_set=dropped))
        expected = pa.concat_tables([base.filter(keep), delta]).sort_by("id")
        for _ in range(2):  # the second read is answered from the kept merge
            assert wh.read_table("memories", day2, ["id", "content"]).equals(
                expected.select(["id", "content"])
            )
        chosen = wh.read_table("memories", day2, ["content", "id"], namespaces=["ns4"])
        ns4 = expected.filter(pa.compute.equal(expected["namespace"], "ns4"))
        assert chosen.equals(ns4.select(["content", "id"]))


def test_a_table_several_steps_read_is_read_once_per_partition_file(tmp_path):
    """Links (read by five steps of a night) come from one read of the file while the file stands; a partition
    written again, or another day's, is read from its own file; a read of some namespaces reads the file."""
    from engram_pipelines.warehouse import shared_reads

    day1, day2 = dt.date(2026, 11, 28), dt.date(2026, 11, 29)
    wh = Warehouse(tmp_path)

    def links(weight: float) -> pa.Table:
        return pa.table(
            {
                "namespace": ["a", "a", "b"],
                "src_id": ["m1", "m2", "m3"],
                "dst_id": ["m2", "m3", "m4"],
                "weight": [weight, weight / 2, weight / 4],
            }
        )

    shared_reads._KEPT.clear()
    wh.write_table("links", day1, links(1.0))
    first = wh.read_table("links", day1)
    assert first.equals(links(1.0))
    assert wh.read_table("links", day1) is first  # the second read is the kept one
    assert wh.read_table("links", day1, ["weight", "src_id"]).equals(links(1.0).select(["weight", "src_id"]))
    assert wh.read_table("links", day1, namespaces=["b"]).equals(links(1.0).slice(2))
    wh.write_table("links", day1, links(0.5))  # replaced: another file
    assert wh.read_table("links", day1).equals(links(0.5))
    wh.write_table("links", day2, links(0.25))
    assert wh.read_table("links", day2).equals(links(0.25))
    assert len(shared_reads._KEPT) == 1  # one partition per table
    assert wh.read_table("links", day1).equals(links(0.5))
