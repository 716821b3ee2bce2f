"""The embeddings of a layered snapshot: layers over the vectors of its base file, equal to a full recompute."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.digests import content_sha
from engram_pipelines.vectors.comparable import partition_vectors
from engram_pipelines.vectors.embedding_layers import vectors_of, write_embeddings
from engram_pipelines.warehouse.parquet import read_parquet
from engram_pipelines.warehouse.raw_vectors import file_fingerprint, raw_copies, raw_path
from engram_pipelines.warehouse.tables import Warehouse
from tests.vectors.test_embeddings import HashEmbedder

DAY = dt.date(2026, 3, 1)


def _memories(texts: dict[str, str], stored: set[str], excluded: frozenset[str] = frozenset()) -> pa.Table:
    """Rows in id order; a stored vector (current) for the ids in `stored`, none for the others."""
    ids = sorted(texts)
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(16 * len(ids), dtype=np.float32)), 16)
    keep = pa.array([i in stored for i in ids])
    return pa.table(
        {
            "id": ids,
            "namespace": ["ns-a" if i < "m5" else "ns-b" for i in ids],
            "content": [texts[i] for i in ids],
            "metadata": [json.dumps({"embeddingExcluded": True}) if i in excluded else "{}" for i in ids],
            "embedding": pc.if_else(keep, vectors, pa.nulls(len(ids), vectors.type)),
            "embedding_model": ["test-hash-16" if i in stored else None for i in ids],
            "embedded_content_sha": [content_sha(texts[i]) if i in stored else None for i in ids],
        }
    )


def _full(wh: Warehouse, day: dt.date) -> pa.Table:
    """What a full recompute finds for the partition as it reads."""
    table, _ = partition_vectors(wh.read_table("memories", day), HashEmbedder(), wh.root)
    return table.select(["id", "namespace", "model", "vector"])


def test_a_layered_snapshot_gets_layered_embeddings_equal_to_a_full_recompute(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    texts = {f"m{i}": f"memory number {i}" for i in range(9)}
    first = _memories(texts, stored={"m0", "m2", "m4", "m6"}, excluded=frozenset({"m8"}))
    wh.write_table("memories", DAY, first)
    stats = write_embeddings(wh, DAY, HashEmbedder())
    wh.combine_shards("embeddings", DAY, 1)
    rows = wh.read_table("embeddings", DAY, ["id"]).num_rows
    assert (rows, stats.embedded, stats.stored, stats.excluded) == (8, 4, 4, 1)
    plain = wh.table_path("embeddings", DAY)
    assert raw_copies(plain) == [raw_path(plain, "vector")], "written with the vectors, linked by the combine"

    # The next day: m1 and m4 rewritten by an agent, m3 deleted, m9 new; the snapshot layers them.
    day = DAY + dt.timedelta(days=1)
    texts.update({"m1": "rewritten by an agent", "m4": "also rewritten", "m9": "a new memory"})
    delta = _memories({i: texts[i] for i in ("m1", "m4", "m9")}, stored={"m4"})
    wh.write_layers("memories", day, wh.table_path("memories", DAY), delta, pa.array(["m1", "m3", "m4"]))
    embedder = HashEmbedder()
    stats = write_embeddings(wh, day, embedder)
    rows = wh.read_table("embeddings", day, ["id"]).num_rows
    assert wh.layers("embeddings", day) is not None
    assert sorted(t for batch in embedder.batches for t in batch) == ["a new memory", "rewritten by an agent"]
    assert (rows, stats.embedded, stats.stored) == (8, 2, 1), "only the delta's rows need vectors"
    assert wh.read_table("embeddings", day, ["id", "namespace", "model", "vector"]).equals(_full(wh, day))
    assert wh.read_table("embeddings", day, namespaces=["ns-b"])["id"].to_pylist() == ["m5", "m6", "m7", "m9"]
    layers = wh.layers("embeddings", day)
    assert layers is not None and raw_copies(layers.base) == [raw_path(layers.base, "vector")]
    assert raw_path(layers.base, "vector").stat().st_ino == raw_path(plain, "vector").stat().st_ino, "linked"

    # Without the base's vectors (the day it was read is gone) they are found once, from the base file.
    wh2 = Warehouse(tmp_path / "other")
    wh2.write_layers("memories", day, wh.table_path("memories", DAY), delta, pa.array(["m1", "m3", "m4"]))
    stats = write_embeddings(wh2, day, HashEmbedder())
    rows = wh2.read_table("embeddings", day, ["id"]).num_rows
    assert (rows, stats.embedded, stats.stored) == (8, 6, 5), (
        "the base's rows (those dropped too), the delta's"
    )
    base = wh2.layers("embeddings", day)
    assert (
        base is not None and vectors_of(wh2, day, wh.table_path("memories", DAY), HashEmbedder()) == base.base
    )
    assert wh2.read_table("embeddings", day, ["id", "namespace", "model", "vector"]).equals(_full(wh, day))
    assert raw_copies(base.base) == [raw_path(base.base, "vector")], "written from the vectors found"
    assert not raw_copies(wh2.shard_path("embeddings", day, 0, 1)), "the shard's file and copy are gone"


def test_vectors_of_another_file_or_embedder_are_never_reused(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    texts = {f"m{i}": f"memory number {i}" for i in range(4)}
    wh.write_table("memories", DAY, _memories(texts, stored=set()))
    write_embeddings(wh, DAY, HashEmbedder())
    wh.combine_shards("embeddings", DAY, 1)
    memories_file = wh.table_path("memories", DAY)
    assert vectors_of(wh, DAY, memories_file, HashEmbedder()) is not None

    class OtherModel(HashEmbedder):
        name = "another-model"

    assert vectors_of(wh, DAY, memories_file, OtherModel()) is None
    other = tmp_path / "other.parquet"
    pq.write_table(read_parquet(memories_file).slice(0, 3), other)
    assert file_fingerprint(other) != file_fingerprint(memories_file)
    assert vectors_of(wh, DAY, other, HashEmbedder()) is None
    later = DAY + dt.timedelta(days=40)
    assert vectors_of(wh, later, memories_file, HashEmbedder()) is None, "older than the look-back"


def test_a_step_run_again_leaves_one_raw_copy_of_its_part(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path)
    wh.write_table("memories", DAY, _memories({f"m{i}": f"memory {i}" for i in range(4)}, stored=set()))
    shard = wh.shard_path("embeddings", DAY, 0, 1)
    shard.parent.mkdir(parents=True)
    stale = shard.with_name(f"{shard.name}.vector.{'0' * 16}.npy")  # of an earlier file at that path
    np.save(stale, np.zeros((4, 16), dtype=np.float32))
    write_embeddings(wh, DAY, HashEmbedder())
    assert raw_copies(shard) == [raw_path(shard, "vector")]
    np.save(stale, np.zeros((4, 16), dtype=np.float32))  # one the combine step must not take
    wh.combine_shards("embeddings", DAY, 1)
    part = wh.table_path("embeddings", DAY)
    assert raw_copies(part) == [raw_path(part, "vector")], "only the copy of the part as it is is linked"
