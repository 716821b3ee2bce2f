"""A 64-bit digest per vector, so that what reuses last night's results per namespace can tell which
namespaces' vectors moved without reading the vectors.

The similarity pairs and the semantic step each read the partition's every vector to hash them (DuckDB's
`hash` of 384 floats per row) only to find that nothing had moved: at 100k memories 1.7 s and 1.3 s of a 15.7 s
quiet night, most of it the read. The embeddings partition now carries a `digest` column written with the
vectors; a night reads (id, namespace, model, digest), and the vectors of the namespaces it computes again only.

The digest is a sum of the vector's 64-bit words (two floats each), each times its own odd constant (mod
2^64), then mixed (splitmix64's finaliser): two vectors that differ in one word differ in the sum before mixing.
It changes only with the vector's bits; a change of this function changes every namespace's fingerprint once
(each is computed again that night), never a result.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core.duck import duck
from engram_pipelines.warehouse.tables import Warehouse

DIGEST = "digest"
DIGEST_COLUMNS = ["id", "namespace", "model", DIGEST]
FINGERPRINTS = pa.schema([pa.field("namespace", pa.string()), pa.field("fingerprint", pa.string())])
_BLOCK = 16_384  # rows per step of the matrix product


def _splitmix(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64, copy=True)
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


def _constants(count: int) -> np.ndarray:
    return _splitmix(np.arange(1, count + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)


def vector_digests(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The digest (uint64) of each vector of a fixed-size float32 list column; a null vector's is 0."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dim = column.type.list_size
    parts = []
    with np.errstate(over="ignore"):
        for chunk in chunks:
            if not len(chunk):
                continue
            flat = chunk.values.slice(chunk.offset * dim, len(chunk) * dim).to_numpy(zero_copy_only=False)
            # Two floats per 64-bit word where they pair up: a uint64 matrix product over 1M x 384 took
            # 0.22 s, against 1.66 s for each 32-bit word widened and multiplied elementwise.
            words = flat.view(np.uint64) if dim % 2 == 0 else flat.view(np.uint32).astype(np.uint64)
            words = words.reshape(len(chunk), -1)
            weights = _constants(words.shape[1])
            out = np.empty(len(chunk), dtype=np.uint64)
            for start in range(0, len(chunk), _BLOCK):
                out[start : start + _BLOCK] = _splitmix(words[start : start + _BLOCK] @ weights)
            out[~chunk.is_valid().to_numpy(zero_copy_only=False)] = 0
            parts.append(out)
    return pa.array(np.concatenate(parts) if parts else np.zeros(0, np.uint64), pa.uint64())


def with_digests(vectors: pa.Table) -> pa.Table:
    """`vectors` (an embeddings table) with its `digest` column, as the partition stores it."""
    if DIGEST in vectors.schema.names:
        return vectors
    return vectors.append_column(
        pa.field(DIGEST, pa.uint64(), nullable=False), vector_digests(vectors["vector"])
    )


def vector_fingerprints(digests: pa.Table) -> pa.Table:
    """(namespace, fingerprint): the rows, models and vectors of each namespace, in any order, from
    (id, namespace, model, digest)."""
    with duck() as con:
        con.register("v", digests.select(DIGEST_COLUMNS))
        return (
            con.sql(
                "SELECT namespace, count(*)::VARCHAR || ':' || bit_xor(hash(id, model, digest))::VARCHAR "
                "AS fingerprint FROM v GROUP BY namespace ORDER BY namespace"
            )
            .to_arrow_table()
            .cast(FINGERPRINTS)
        )


# Reads the vectors of these namespaces (all, where None) with these ids (all, where None).
Loader = Callable[[list[str] | None, pa.Array | None], pa.Table]


@dataclass(frozen=True)
class VectorSource:
    """A partition's vectors as the reusing steps need them: every row's digest at once, the vectors only of
    the namespaces computed, or only of the rows asked for (`load(None, None)`: all of them)."""

    digests: pa.Table
    load: Loader

    def load_except(self, reused: pa.Array, ids: pa.Array | None = None) -> pa.Table:
        """The vectors of every namespace but the `reused` ones (all of them, read whole, when none is), of
        the rows with `ids` only when given."""
        if not len(reused):
            return self.load(None, ids)
        present = pc.unique(self.digests["namespace"])
        return self.load(pc.filter(present, pc.invert(pc.is_in(present, value_set=reused))).to_pylist(), ids)

    @classmethod
    def of(cls, vectors: pa.Table) -> VectorSource:
        """The source of a table in memory (its digests computed when it has none)."""
        vectors = with_digests(vectors)

        def load(namespaces: list[str] | None, ids: pa.Array | None = None) -> pa.Table:
            chosen = vectors
            if namespaces is not None:
                chosen = chosen.filter(pc.is_in(chosen["namespace"], pa.array(namespaces, pa.string())))
            return chosen if ids is None else chosen.filter(pc.is_in(chosen["id"], value_set=ids))

        return cls(vectors.select(DIGEST_COLUMNS), load)


def stored_vectors(warehouse: Warehouse, as_of: dt.date, shard: int = 0, shards: int = 1) -> VectorSource:
    """The embeddings partition of `as_of` (one namespace hash shard of it) as a source. A partition written
    before the digests were stored has them computed from its vectors."""

    def read(
        columns: list[str] | None, namespaces: list[str] | None, ids: pa.Array | None = None
    ) -> pa.Table:
        if namespaces is None and ids is None:
            return warehouse.read_shard("embeddings", as_of, shard, shards, columns)
        return warehouse.read_table("embeddings", as_of, columns, namespaces=namespaces, ids=ids)

    schema = warehouse.schema("embeddings", as_of)
    if DIGEST in schema.names:
        digests = read(DIGEST_COLUMNS, None)
    else:
        digests = with_digests(read(None, None)).select(DIGEST_COLUMNS)

    def load(namespaces: list[str] | None, ids: pa.Array | None = None) -> pa.Table:
        if namespaces == []:  # none of them: no read (a filtered read still decodes every row's vector)
            return schema.empty_table()
        if namespaces is None and ids is not None and shards > 1:
            namespaces = pc.unique(digests["namespace"]).to_pylist()  # the shard's
        return read(None, namespaces, ids)

    return VectorSource(digests, load)
