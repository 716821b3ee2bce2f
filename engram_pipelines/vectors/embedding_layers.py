"""The embeddings of a layered memories partition, layered the same way.

A night whose snapshot is layered (the last full read's file, the rows written since and the ids they replace:
`warehouse/layers.py`) has new vectors to find only for the rows written since. The vectors of the full read's
rows were found by the night that read it (or by the first layered night after it); the embeddings partition
is then layered over that file of vectors, with the memories' dropped ids and the vectors of their delta, and
reads as the table a full recompute writes (`partition_vectors` keeps the snapshot's id order, so the two line
up row for row). Without it every night read, hashed and wrote every row's vector again: 21.9 s of a quiet
night at 1M memories.

Which file of vectors belongs to which memories file: every embeddings file written from a whole memories file
carries that file's fingerprint (its size and Parquet footer, which records every column chunk's offsets, sizes
and statistics) and the embedder's name in its metadata. A hard link and a copy have the same fingerprint; a
changed embedder or another memories file finds nothing, and the vectors of the whole file are found again.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.core.progress import Progress
from engram_pipelines.vectors.comparable import VECTOR_INPUT_COLUMNS, VectorStats, partition_vectors
from engram_pipelines.vectors.embeddings import Embedder
from engram_pipelines.warehouse.layers import BASE
from engram_pipelines.warehouse.parquet import read_parquet, write_parquet
from engram_pipelines.warehouse.raw_vectors import file_fingerprint, raw_copies, write_raw
from engram_pipelines.warehouse.tables import PART, Warehouse
from engram_pipelines.warehouse.vector_digests import DIGEST

MEMORIES_FILE_KEY = b"engram.memories_file"
EMBEDDER_KEY = b"engram.embedder"
# How many earlier partitions are searched for the vectors of a base file: a base is at most
# snapshot.full_every_days old (7 by default), and each layered day after it links the same vectors.
LOOK_BACK_DAYS = 31


def _tagged(vectors: pa.Table, memories_file: Path, embedder: Embedder) -> pa.Table:
    metadata = {
        **(vectors.schema.metadata or {}),
        MEMORIES_FILE_KEY: file_fingerprint(memories_file).encode(),
        EMBEDDER_KEY: embedder.name.encode(),
    }
    return vectors.replace_schema_metadata(metadata)


def vectors_of(warehouse: Warehouse, as_of: dt.date, memories_file: Path, embedder: Embedder) -> Path | None:
    """An embeddings file of this partition or an earlier one (newest first) found from `memories_file` by
    `embedder`, if one is left."""
    wanted = {
        MEMORIES_FILE_KEY: file_fingerprint(memories_file).encode(),
        EMBEDDER_KEY: embedder.name.encode(),
    }
    root = warehouse.tables_root / "embeddings"
    oldest = as_of - dt.timedelta(days=LOOK_BACK_DAYS)
    days = sorted(
        (p for p in root.glob("as_of=*") if not p.name.endswith(".tmp")),
        key=lambda p: p.name,
        reverse=True,
    )
    for day in days:
        when = dt.date.fromisoformat(day.name.removeprefix("as_of="))
        if not oldest <= when <= as_of:
            continue
        for path in (day / BASE, day / PART):
            if not path.exists():
                continue
            schema = pq.read_schema(path)
            # Files written before the vectors' digests were stored are found again once.
            if DIGEST in schema.names and all((schema.metadata or {}).get(k) == v for k, v in wanted.items()):
                return path
    return None


def write_embeddings(
    warehouse: Warehouse, as_of: dt.date, embedder: Embedder, *, progress: Progress | None = None
) -> VectorStats:
    """Find and write `as_of`'s embeddings partition, the whole table in one shard's part (a plain memories
    partition: the combine step links it into place) or as layers over the vectors of the memories' base file.
    Returns the counts of the vectors found tonight (the combine step counts the partition's rows)."""
    layers = warehouse.layers("memories", as_of)
    shard = warehouse.shard_path("embeddings", as_of, 0, 1)
    if layers is None:
        memories_file = warehouse.table_path("memories", as_of)
        memories = read_parquet(memories_file, VECTOR_INPUT_COLUMNS)
        vectors, stats = partition_vectors(memories, embedder, warehouse.root, progress=progress)
        del memories  # its texts, and its vectors where some were embedded (copied into `vectors`), go first
        write_parquet(_tagged(vectors, memories_file, embedder), shard)
        # From memory now: the next night's partition is layered over this file and links it (written from
        # the file then, it cost that night 7 s at 1M memories).
        write_raw(vectors["vector"], shard, "vector")
        return stats
    base = vectors_of(warehouse, as_of, layers.base, embedder)
    stats = VectorStats()
    if base is None:  # the first layered night over this base (or another embedder): its vectors, once
        memories = read_parquet(layers.base, VECTOR_INPUT_COLUMNS)
        vectors, stats = partition_vectors(memories, embedder, warehouse.root, progress=progress)
        base = write_parquet(_tagged(vectors, layers.base, embedder), shard)
        write_raw(vectors["vector"], base, "vector")  # from memory: the partition links it with the base
        del vectors
    delta, delta_stats = partition_vectors(
        read_parquet(layers.delta, VECTOR_INPUT_COLUMNS), embedder, warehouse.root, progress=progress
    )
    dropped = pq.read_table(layers.dropped)["id"].combine_chunks()
    warehouse.write_layers("embeddings", as_of, base, delta, dropped, raw_vectors=("vector",))
    # The partition is complete: nothing for the combine step to link.
    for path in (shard, *raw_copies(shard)):
        path.unlink(missing_ok=True)
    return stats.plus(delta_stats)
