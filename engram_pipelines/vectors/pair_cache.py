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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress
from engram_pipelines.vectors.pairs import PAIR_SCHEMA, touching_pairs, vector_pairs
from engram_pipelines.warehouse.content_cache import discard_unreadable
from engram_pipelines.warehouse.parquet import write_parquet
from engram_pipelines.warehouse.vector_digests import (
    DIGEST_COLUMNS,
    FINGERPRINTS,
    VectorSource,
    vector_fingerprints,
    with_digests,
)


@dataclass
class CachedPairs:
    pairs: pa.Table
    methods: dict[str, int]
    reused_namespaces: int  # unchanged: their pairs as stored
    compared_namespaces: int  # joined whole
    updated_namespaces: int = 0  # a few rows moved: their pairs as stored among the others, the moved joined
    changed_rows: int = 0  # rows of the updated namespaces joined against their namespace


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

    A namespace joined exactly (every group of it within `exact_cutoff` rows, before and now) where at most
    half the rows moved is updated instead: its stored pairs between rows that did not move are kept, and the
    moved rows (new, or another vector, model or namespace) are joined against the namespace
    (`touching_pairs`). That is what a whole join finds, pair for pair and score for score (scores are a
    function of the two vectors: `similarity.exact_scores`). A namespace joined by cells is joined whole: a
    cell join is sampled, and its pairs depend on every row.

    `directory` holds one part's cache (a shard's); tonight's pairs, fingerprints and rows replace it."""
    settings = hashlib.sha256(f"{threshold!r}|{exact_cutoff}".encode()).hexdigest()[:12]
    path, rows_path = directory / f"pairs-{settings}.parquet", directory / f"rows-{settings}.parquet"
    tonight = vector_fingerprints(vectors.digests)
    stored, before = _stored(path) if reuse else (None, None)
    same = _unchanged(tonight, before) if stored is not None else pa.array([], pa.string())
    previous = _stored_rows(rows_path, before) if before is not None else None
    compared = with_digests(vectors.load_except(same))
    update = _updatable(compared, previous, exact_cutoff)
    parts, changed = [], np.zeros(0, dtype=bool)
    if stored is not None and update.namespaces:
        # Split once and let the read go: the two halves are the only copies held.
        whole, moved = (
            compared.filter(pc.invert(update.namespace_mask)),
            compared.filter(update.namespace_mask),
        )
        del compared
        changed = pc.invert(pc.is_in(moved["id"], value_set=update.unchanged_ids)).to_numpy(
            zero_copy_only=False
        )
        parts += [touching_pairs(moved, changed, threshold, progress=progress), _kept(stored, update)]
        del moved
    else:
        whole = compared
        del compared
    fresh, methods = vector_pairs(whole, threshold, exact_cutoff=exact_cutoff, progress=progress)
    del whole
    parts.append(fresh)
    if changed.size:
        methods["exact, moved rows"] = int(changed.sum())
    if stored is not None:
        parts.append(stored.filter(pc.is_in(stored["namespace"], value_set=same)))
    pairs = pa.concat_tables([t.cast(PAIR_SCHEMA) for t in parts])
    # The rows first: a rows file is used only with the pairs file whose fingerprints it names (a run that
    # dies between the two, or two runs racing, leave files that do not match: namespaces are joined whole).
    write_parquet(
        vectors.digests.select(DIGEST_COLUMNS).replace_schema_metadata({"fingerprints": _token(tonight)}),
        rows_path,
    )
    write_parquet(pairs.replace_schema_metadata({"fingerprints": json.dumps(tonight.to_pylist())}), path)
    return CachedPairs(
        pairs,
        methods,
        reused_namespaces=len(same),
        compared_namespaces=tonight.num_rows - len(same) - len(update.namespaces),
        updated_namespaces=len(update.namespaces),
        changed_rows=int(changed.sum()),
    )


@dataclass
class _Update:
    namespaces: list[str]  # updated rather than joined whole
    namespace_mask: pa.Array  # over the compared vectors: the row is in one of them
    unchanged_ids: pa.Array  # rows of them as they were when the stored pairs were found


def _updatable(compared: pa.Table, previous: pa.Table | None, exact_cutoff: int) -> _Update:
    """Which of the compared namespaces can be updated from the stored pairs (see `cached_vector_pairs`)."""
    if previous is None or compared.num_rows == 0:
        none = pa.array([], pa.string())
        return _Update([], pa.array(np.zeros(compared.num_rows, dtype=bool)), none)
    with duck() as con:
        con.register("t", compared.select(DIGEST_COLUMNS))
        con.register("p", previous)
        con.execute(
            """
            CREATE TEMP TABLE same_rows AS
            SELECT t.id, t.namespace FROM t JOIN p USING (id, namespace, model, digest)
            """
        )
        namespaces = [
            row[0]
            for row in con.execute(
                """
                WITH biggest_now AS (
                    SELECT namespace, max(n) AS rows FROM (SELECT namespace, count(*) AS n FROM t GROUP BY
                    namespace, model) GROUP BY namespace),
                biggest_before AS (
                    SELECT namespace, max(n) AS rows FROM (SELECT namespace, count(*) AS n FROM p GROUP BY
                    namespace, model) GROUP BY namespace),
                rows_now AS (SELECT namespace, count(*) AS n FROM t GROUP BY namespace),
                kept AS (SELECT namespace, count(*) AS n FROM same_rows GROUP BY namespace)
                SELECT namespace FROM rows_now JOIN kept USING (namespace)
                    JOIN biggest_now n USING (namespace) JOIN biggest_before b USING (namespace)
                WHERE n.rows <= ? AND b.rows <= ? AND 2 * kept.n >= rows_now.n
                ORDER BY namespace
                """,
                [exact_cutoff, exact_cutoff],
            ).fetchall()
        ]
        con.register("chosen", pa.table({"namespace": pa.array(namespaces, pa.string())}))
        unchanged = (
            con.sql("SELECT id FROM same_rows JOIN chosen USING (namespace)")
            .to_arrow_table()["id"]
            .combine_chunks()
        )
    mask = pc.is_in(compared["namespace"], value_set=pa.array(namespaces, pa.string()))
    return _Update(namespaces, mask, unchanged)


def _kept(stored: pa.Table, update: _Update) -> pa.Table:
    """The stored pairs of the updated namespaces between two rows that did not move."""
    ours = stored.filter(pc.is_in(stored["namespace"], value_set=pa.array(update.namespaces, pa.string())))
    both = pc.and_(
        pc.is_in(ours["left_id"], value_set=update.unchanged_ids),
        pc.is_in(ours["right_id"], value_set=update.unchanged_ids),
    )
    return ours.filter(both)


def _token(fingerprints: pa.Table) -> str:
    return hashlib.sha256(json.dumps(fingerprints.to_pylist()).encode()).hexdigest()


def _stored_rows(path: Path, before: pa.Table) -> pa.Table | None:
    """The rows (id, namespace, model, digest) the stored pairs were found among, or None when the rows file
    is missing, unreadable or of other pairs."""
    if not path.exists():
        return None
    try:
        rows = pq.read_table(path)
        token = rows.schema.metadata[b"fingerprints"].decode()
    except (pa.ArrowException, OSError, KeyError, TypeError, ValueError) as error:
        discard_unreadable(path, error)
        return None
    return rows.select(DIGEST_COLUMNS).replace_schema_metadata(None) if token == _token(before) else None


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
