"""The partition's comparable vectors: stored vectors where they are current, embeddings for the rest.

A memory's stored vector is used as is (with its model name) unless the content changed since it was embedded
(`embedded_content_sha` differs from the content's hash). Rows without a usable vector are embedded by the
configured embedder; embeddings are cached in the warehouse by (model, content hash), so a quiet night embeds
nothing and a changed row is embedded once. Rows whose metadata says `embeddingExcluded` are never embedded
or compared. engram-pipelines never writes vectors into the live store: that column belongs to the agents.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core.digests import content_sha_sql
from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress
from engram_pipelines.vectors.embeddings import Embedder, embed_in_batches
from engram_pipelines.warehouse.content_cache import ContentCache
from engram_pipelines.warehouse.vector_digests import with_digests

VECTOR_SCHEMA_FIELDS = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("model", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),  # stored | embedded | cached
]


def vector_schema(dim: int) -> pa.Schema:
    return pa.schema([*VECTOR_SCHEMA_FIELDS, pa.field("vector", pa.list_(pa.float32(), dim), nullable=False)])


@dataclass
class VectorStats:
    stored: int = 0
    cached: int = 0
    embedded: int = 0
    excluded: int = 0
    models: dict[str, int] | None = None

    def plus(self, other: VectorStats) -> VectorStats:
        models = dict(self.models or {})
        for model, count in (other.models or {}).items():
            models[model] = models.get(model, 0) + count
        return VectorStats(
            self.stored + other.stored,
            self.cached + other.cached,
            self.embedded + other.embedded,
            self.excluded + other.excluded,
            models,
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "stored": self.stored,
            "cached": self.cached,
            "embedded": self.embedded,
            "excluded": self.excluded,
            "models": self.models or {},
        }


class EmbeddingCache:
    """Vectors by content hash for one model, under <warehouse>/embedding_cache/<model>/."""

    def __init__(self, root: Path, model: str, dim: int) -> None:
        self.cache = ContentCache(root / "embedding_cache" / re.sub(r"[^A-Za-z0-9_.-]", "_", model))
        self.dim = dim

    def lookup(self, shas: list[str]) -> dict[str, np.ndarray]:
        found = self.cache.lookup(shas)
        if found is None:
            return {}
        flat = found["vector"].combine_chunks().values.to_numpy(zero_copy_only=False).reshape(-1, self.dim)
        return dict(zip(found["sha"].to_pylist(), flat, strict=True))

    def add(self, shas: list[str], vectors: np.ndarray) -> None:
        vector = pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).reshape(-1)), self.dim)
        self.cache.add(pa.table({"sha": pa.array(shas, pa.string()), "vector": vector}))


# The snapshot columns partition_vectors reads (callers may pass a table of just these).
VECTOR_INPUT_COLUMNS = [
    "id",
    "namespace",
    "content",
    "metadata",
    "embedding",
    "embedding_model",
    "embedded_content_sha",
]


def _row_flags(memories: pa.Table) -> pa.Table:
    """Per row, in order: excluded (metadata `embeddingExcluded`), the content's hash (`sha`: `content_sha`
    computed by DuckDB) and whether a stored vector is current (no recorded hash, or the content's). The vectors
    never pass through DuckDB: its result would be a second copy of them."""
    with duck() as con:
        n = memories.num_rows
        con.register(
            "m",
            memories.select(["content", "metadata", "embedded_content_sha"]).append_column(
                "pos", pa.array(np.arange(n, dtype=np.int64))
            ),
        )
        flags = con.sql(
            f"""
            SELECT pos, coalesce(TRY_CAST(json_extract(metadata, '$.embeddingExcluded') AS BOOLEAN), false) AS excluded,
                sha, embedded_content_sha IS NULL OR embedded_content_sha = sha AS fresh
            FROM (SELECT *, {content_sha_sql("content")} AS sha FROM m)
            """
        ).to_arrow_table()
        if not np.array_equal(flags["pos"].to_numpy(), np.arange(n)):
            flags = flags.sort_by("pos")
        return flags


def partition_vectors(
    memories: pa.Table, embedder: Embedder, warehouse_root: Path, *, progress: Progress | None = None
) -> tuple[pa.Table, VectorStats]:
    """(id, namespace, model, source, vector, digest) for every comparable memory of the snapshot, in the
    snapshot's order (id order), and counts (the digest: `warehouse/vector_digests.py`). The order is the
    input's whatever each row's source, so the vectors of a layered partition's rows (`embedding_layers.py`)
    equal those a full recompute finds, row for row.

    Stored vectors are passed on without a copy when every row keeps its own (the usual night): at 1M x 384 each
    copy is 1.5 GB of peak memory."""
    flags = _row_flags(memories)
    excluded = flags["excluded"].to_numpy(zero_copy_only=False)
    has_vector = memories["embedding"].is_valid().to_numpy(zero_copy_only=False)
    current = has_vector & flags["fresh"].to_numpy(zero_copy_only=False) & ~excluded
    stats = VectorStats(excluded=int(excluded.sum()))
    dim = embedder.dim
    if memories.schema.field("embedding").type.list_size != dim:
        current[:] = False  # vectors of another size are re-embedded with the configured model
    todo = np.flatnonzero(~current & ~excluded)
    stats.stored = int(current.sum())
    if not todo.size:
        kept = memories if not excluded.any() else memories.filter(pa.array(~excluded))
        table = pa.table(
            {
                "id": kept["id"],
                "namespace": kept["namespace"],
                "model": kept["embedding_model"],
                "source": pa.nulls(kept.num_rows, pa.string()).fill_null("stored"),
                "vector": kept["embedding"],
            }
        ).cast(vector_schema(dim))
    else:
        rows = memories.select(["id", "namespace", "content"]).take(pa.array(todo))
        shas = flags["sha"].take(pa.array(todo)).to_pylist()
        embedded = _embed_missing(rows, shas, embedder, warehouse_root, stats, progress)
        table = _in_order(memories, current, excluded, embedded, dim)
    stats.models = (
        {str(k["values"]): int(k["counts"]) for k in pc.value_counts(table["model"]).to_pylist()}
        if table.num_rows
        else {}
    )
    return with_digests(table), stats


_SLICE = 65_536


def _in_order(
    memories: pa.Table, current: np.ndarray, excluded: np.ndarray, embedded: pa.Table, dim: int
) -> pa.Table:
    """The comparable rows of `memories` (not `excluded`) with their stored vector where `current`, else the
    next row of `embedded` (whose rows are the others, in order): one array of vectors filled in place from the
    snapshot's, so each stored vector is copied once (filtering the snapshot first copied them all twice: a 1M
    first night peaked at 7.9 GB against 5.9)."""
    keep = ~excluded
    vectors = np.empty((int(keep.sum()), dim), dtype=np.float32)
    place = np.cumsum(keep) - 1  # each comparable row's place in the output
    start = 0
    # In slices of the chunks: a masked copy of a whole 1M-row chunk is another 1.5 GB for a moment.
    for chunk in memories["embedding"].chunks:
        for first in range(0, len(chunk), _SLICE):
            part = chunk.slice(first, _SLICE)
            n = len(part)
            mine = current[start : start + n]
            if mine.any():
                flat = part.values.slice(part.offset * dim, n * dim).to_numpy(zero_copy_only=False)
                vectors[place[start : start + n][mine]] = flat.reshape(n, dim)[mine]
            start += n
    others = ~current[keep]
    vectors[others] = embedded["vector"].combine_chunks().values.to_numpy().reshape(-1, dim)
    kept = memories.select(["id", "namespace", "embedding_model"]).filter(pa.array(keep))
    source = np.full(kept.num_rows, "stored", dtype=object)
    source[others] = embedded["source"].to_numpy(zero_copy_only=False)
    model = kept["embedding_model"].to_numpy(zero_copy_only=False).astype(object)
    model[others] = embedded["model"].to_numpy(zero_copy_only=False)
    return pa.table(
        {
            "id": kept["id"],
            "namespace": kept["namespace"],
            "model": pa.array(model, pa.string()),
            "source": pa.array(source, pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim),
        }
    ).cast(vector_schema(dim))


def _embed_missing(
    rows: pa.Table,
    shas: list[str],
    embedder: Embedder,
    root: Path,
    stats: VectorStats,
    progress: Progress | None,
) -> pa.Table:
    cache = EmbeddingCache(root, embedder.name, embedder.dim)
    unique = sorted(set(shas))
    known = cache.lookup(unique)
    missing = [s for s in unique if s not in known]
    if missing:
        text_of = dict(zip(shas, rows["content"].to_pylist(), strict=True))
        vectors = embed_in_batches(embedder, [text_of[s] for s in missing], progress=progress)
        cache.add(missing, vectors)
        known.update(zip(missing, vectors, strict=True))
    missing_set = set(missing)
    embedded = sum(1 for s in shas if s in missing_set)
    stats.embedded += embedded
    stats.cached += len(shas) - embedded
    matrix = np.stack([known[s] for s in shas]).astype(np.float32)
    return pa.table(
        {
            "id": rows["id"],
            "namespace": rows["namespace"],
            "model": pa.array([embedder.name] * rows.num_rows, pa.string()),
            "source": pa.array(["embedded" if s in missing_set else "cached" for s in shas], pa.string()),
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), embedder.dim),
        }
    ).cast(vector_schema(embedder.dim))
