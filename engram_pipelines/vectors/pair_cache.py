"""Vector pairs reused per namespace across nights: only namespaces whose vectors changed are compared again.

A namespace's vector pairs depend on nothing but its rows' (id, model, vector) and the engine's settings. Each
run stores, per shard, the pairs it found and a fingerprint per namespace (an order-free digest of those
triples, from the vectors' stored digests: `warehouse/vector_digests.py`); the next run reads and compares
again only the namespaces whose fingerprint moved, so a quiet night costs what its changes cost, not what the
corpus costs (DESIGN §5). The cache lives under <warehouse>/pair_cache/.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress
from engram_pipelines.vectors.pairs import PAIR_SCHEMA, vector_pairs
from engram_pipelines.warehouse.content_cache import discard_unreadable
from engram_pipelines.warehouse.parquet import write_parquet
from engram_pipelines.warehouse.vector_digests import FINGERPRINTS, VectorSource, vector_fingerprints


@dataclass
class CachedPairs:
    pairs: pa.Table
    methods: dict[str, int]
    reused_namespaces: int
    compared_namespaces: int


def cached_vector_pairs(
    vectors: VectorSource,
    threshold: float,
    *,
    exact_cutoff: int,
    directory: Path,
    progress: Progress | None = None,
    reuse: bool = True,
) -> CachedPairs:
    """`vector_pairs` of `vectors`, reusing the stored pairs of every namespace whose fingerprint is unchanged
    (none with `reuse` false: every namespace is compared). Only the compared namespaces' vectors are read.

    `directory` holds one part's cache (a shard's); it is replaced by tonight's pairs and fingerprints."""
    settings = hashlib.sha256(f"{threshold!r}|{exact_cutoff}".encode()).hexdigest()[:12]
    path = directory / f"pairs-{settings}.parquet"
    tonight = vector_fingerprints(vectors.digests)
    stored, before = _stored(path) if reuse else (None, None)
    same = _unchanged(tonight, before) if stored is not None else pa.array([], pa.string())
    compared = vectors.load_except(same)
    fresh, methods = vector_pairs(compared, threshold, exact_cutoff=exact_cutoff, progress=progress)
    del compared
    reused = stored.filter(pc.is_in(stored["namespace"], value_set=same)) if stored is not None else None
    pairs = pa.concat_tables([t.cast(PAIR_SCHEMA) for t in (reused, fresh) if t is not None])
    write_parquet(pairs.replace_schema_metadata({"fingerprints": json.dumps(tonight.to_pylist())}), path)
    return CachedPairs(pairs, methods, len(same), tonight.num_rows - len(same))


def _stored(path: Path) -> tuple[pa.Table | None, pa.Table | None]:
    """The stored pairs and the fingerprints they were computed for, or (None, None) when there are none or
    the file cannot be read (discarded: tonight's pairs replace it). The fingerprints travel in the same file
    as the pairs (schema metadata): one atomic rename keeps the two consistent even when two runs race."""
    if not path.exists():
        return None, None
    try:
        stored = pq.read_table(path)
        before = pa.Table.from_pylist(json.loads(stored.schema.metadata[b"fingerprints"]), FINGERPRINTS)
    except (pa.ArrowException, OSError, KeyError, TypeError, ValueError) as error:
        discard_unreadable(path, error)
        return None, None
    return stored, before


def _unchanged(tonight: pa.Table, before: pa.Table) -> pa.Array:
    with duck() as con:
        con.register("tonight", tonight)
        con.register("before", before)
        return (
            con.sql("SELECT namespace FROM tonight JOIN before USING (namespace, fingerprint)")
            .to_arrow_table()["namespace"]
            .combine_chunks()
        )
