"""Snapshot the live store into one as-of partition of Parquet, streamed in batches.

Every row is validated (pandera for the columns, numpy for the embedding). Invalid rows are not dropped:
they go to the `quarantine` table with the reason, and are counted. Analyses read only the valid rows.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core import records
from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.store import Store
from engram_pipelines.warehouse.schemas import memory_row_problems
from engram_pipelines.warehouse.tables import Warehouse

QUARANTINE_SAMPLE = 20


def quarantine_schema(embedding_dim: int) -> pa.Schema:
    """The memory columns, every one nullable (a quarantined row may lack what a valid one must have: a
    timestamp that could not be read is null), and the reason."""
    fields = [f.with_nullable(True) for f in records.memory_schema(embedding_dim)]
    return pa.schema([*fields, pa.field("quarantine_reason", pa.string(), nullable=False)])


@dataclass
class SnapshotResult:
    as_of: dt.date
    memories: int = 0
    quarantined: int = 0
    # Stored vectors of another size (or missing where a model is named): dropped, their texts re-embedded.
    vectors_dropped: int = 0
    links: int = 0
    namespaces: dict[str, int] = field(default_factory=dict)
    quarantine_samples: list[dict[str, str]] = field(default_factory=list)
    memories_path: str = ""
    links_path: str = ""
    quarantine_path: str = ""

    @property
    def rows_read(self) -> int:
        return self.memories + self.quarantined

    @property
    def invalid_fraction(self) -> float:
        return self.quarantined / self.rows_read if self.rows_read else 0.0


def take_snapshot(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    embedding_dim: int = 384,
    batch_size: int = 50_000,
    progress: Progress | None = None,
) -> SnapshotResult:
    """Export memories and links to the `as_of` partition; quarantine invalid memory rows with reasons."""
    progress = progress or SilentProgress()
    result = SnapshotResult(as_of=as_of)
    schema = records.memory_schema(embedding_dim)
    store.read_ahead(progress)
    progress.start("snapshot memories", store.count("memories"))
    namespace_counts: dict[str, int] = {}
    with (
        warehouse.partition_writer("memories", as_of, schema) as good,
        warehouse.partition_writer("quarantine", as_of, quarantine_schema(embedding_dim)) as bad,
    ):
        for batch in store.iter_memory_batches(batch_size, embedding_dim):
            batch, dropped = _without_unusable_vectors(batch)
            result.vectors_dropped += dropped
            valid, invalid = _split(batch)
            good.write_batch(valid)
            if invalid.num_rows:
                bad.write_batch(invalid)
                _sample(result, invalid)
            result.memories += valid.num_rows
            result.quarantined += invalid.num_rows
            _count_namespaces(namespace_counts, valid)
            progress.advance(batch.num_rows)
    progress.finish()
    result.namespaces = dict(sorted(namespace_counts.items()))
    result.memories_path = str(warehouse.table_path("memories", as_of))
    result.quarantine_path = str(warehouse.table_path("quarantine", as_of))

    progress.start("snapshot links", store.count("memory_links"))
    with warehouse.partition_writer("links", as_of, records.LINK_SCHEMA) as links:
        for batch in store.iter_link_batches(batch_size):
            links.write_batch(batch)
            result.links += batch.num_rows
            progress.advance(batch.num_rows)
    progress.finish()
    result.links_path = str(warehouse.table_path("links", as_of))
    return result


def _without_unusable_vectors(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
    """Rows whose stored vector the snapshot cannot hold (another size than snapshot.embedding_dim, e.g. a mem0
    store's 1536-d vectors, or missing although a model is named) keep their row and lose only the vector:
    the embeddings step embeds their text with the configured model. Quarantined, every row of such a store
    stopped the night."""
    unusable = pc.and_(pc.is_null(batch.column("embedding")), pc.is_valid(batch.column("embedding_model")))
    dropped = pc.sum(unusable).as_py() or 0
    if not dropped:
        return batch, 0
    for name in ("embedding_model", "embedded_content_sha"):
        column = batch.column(name)
        index = batch.schema.get_field_index(name)
        batch = batch.set_column(index, name, pc.if_else(unusable, pa.scalar(None, column.type), column))
    return batch, int(dropped)


def vectors_dropped_message(dropped: int, embedding_dim: int) -> str:
    return (
        f"{dropped:,} stored vectors are not {embedding_dim}-d (the config's snapshot.embedding_dim) or are "
        "missing: their texts are embedded with the configured model tonight. If the store's vectors come from "
        "the configured model, set snapshot.embedding_dim to their size to use them as they are."
    )


def _split(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    problems = memory_row_problems(batch)
    batch = batch.replace_schema_metadata(None)  # the reader's notes are read; the files get the plain schema
    if not problems:
        empty = pa.RecordBatch.from_pylist(
            [], schema=quarantine_schema(batch.schema.field("embedding").type.list_size)
        )
        return batch, empty
    bad_rows = np.array(sorted(problems), dtype=np.int64)
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[bad_rows] = False
    ids = batch.column("id").take(pa.array(bad_rows)).to_pylist()
    reasons = [f"row {ids[i]!s}: " + "; ".join(problems[int(p)]) for i, p in enumerate(bad_rows)]
    invalid = pa.RecordBatch.from_arrays(
        [*batch.take(pa.array(bad_rows)).columns, pa.array(reasons, pa.string())],
        schema=quarantine_schema(batch.schema.field("embedding").type.list_size),
    )
    return batch.filter(pa.array(keep)), invalid


def _sample(result: SnapshotResult, invalid: pa.RecordBatch) -> None:
    room = QUARANTINE_SAMPLE - len(result.quarantine_samples)
    if room <= 0:
        return
    for row_id, reason in zip(
        invalid.column("id").to_pylist()[:room],
        invalid.column("quarantine_reason").to_pylist()[:room],
        strict=True,
    ):
        result.quarantine_samples.append({"id": str(row_id), "reason": reason})


def _count_namespaces(counts: dict[str, int], batch: pa.RecordBatch) -> None:
    if batch.num_rows == 0:
        return
    table = (
        pa.table({"namespace": batch.column("namespace")})
        .group_by("namespace")
        .aggregate([([], "count_all")])
    )
    for namespace, n in zip(
        table.column("namespace").to_pylist(), table.column("count_all").to_pylist(), strict=True
    ):
        counts[namespace] = counts.get(namespace, 0) + n
