"""Vector pairs reused across nights: only namespaces whose vectors changed are compared again, and in most of
those only the rows that moved.

A namespace's vector pairs depend on nothing but its rows' (id, model, vector) and the engine's settings. Each
run stores, per shard, the pairs it found, a fingerprint per namespace (an order-free digest of those triples,
from the vectors' stored digests: `warehouse/vector_digests.py`) and the triples themselves (as digests); the
next run keeps the pairs of every namespace whose fingerprint did not move, and in a namespace joined exactly
where a few rows moved joins only those rows against it (`cached_vector_pairs`), so a night costs what its
changes cost, not what the corpus costs (DESIGN §5). At 1M memories a night where agents wrote 1% of the rows
spread over every namespace had joined all of them again. The cache lives under <warehouse>/pair_cache/.
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

# 2: scores are each pair's float64 cosine rounded to float32 (pairs kept from before would carry a tile's
# float32 product, a few ulps from what a whole join gives now), and the rows the pairs were found among are
# kept.
CACHE_VERSION = 2


@dataclass
class CachedPairs:
    pairs: pa.Table
    methods: dict[str, int]
    reused_namespaces: int  # unchanged: their pairs as stored
    compared_namespaces: int  # joined whole
    updated_namespaces: int  # a few rows moved: their pairs as stored among the others, the moved joined
    changed_rows: int  # rows of the updated namespaces joined against their namespace


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
    settings = hashlib.sha256(f"{threshold!r}|{exact_cutoff}|{CACHE_VERSION}".encode()).hexdigest()[:12]
    path, rows_path = directory / f"pairs-{settings}.parquet", directory / f"rows-{settings}.parquet"
    tonight = vector_fingerprints(vectors.digests)
    stored, before = _stored(path) if reuse else (None, None)
    same = _unchanged(tonight, before) if stored is not None else pa.array([], pa.string())
    # Nothing moved: the stored files hold what tonight would write, and their rows are not needed.
    everything_kept = before is not None and len(same) == tonight.num_rows == before.num_rows
    previous = _stored_rows(rows_path, before) if before is not None and not everything_kept else None
    compared = with_digests(vectors.load_except(same))
    update = _updatable(compared, previous, exact_cutoff)
    # One matrix of the read vectors; the updated and the whole-joined namespaces take their rows of it (a
    # filtered copy of each half cost 4.4 s at 1M: fresh pages for 1.5 GB).
    fresh, methods = vector_pairs(
        compared, threshold, exact_cutoff=exact_cutoff, progress=progress, rows=~update.rows
    )
    parts = [fresh]
    if stored is not None and update.namespaces:
        parts += [
            touching_pairs(compared, update.changed, threshold, progress=progress, rows=update.rows),
            _kept(stored, update),
        ]
        methods["exact, moved rows"] = int(update.changed.sum())
    del compared
    if stored is not None:
        parts.append(stored.filter(pc.is_in(stored["namespace"], value_set=same)))
    pairs = pa.concat_tables([t.cast(PAIR_SCHEMA) for t in parts])
    if not everything_kept:
        # The rows first: a rows file is used only with the pairs file whose fingerprints it names (a run
        # that dies between the two, or two runs racing, leave files that do not match: namespaces are joined
        # whole).
        rows = vectors.digests.select(DIGEST_COLUMNS)
        write_parquet(rows.replace_schema_metadata({"fingerprints": _token(tonight)}), rows_path)
        write_parquet(pairs.replace_schema_metadata({"fingerprints": json.dumps(tonight.to_pylist())}), path)
    return CachedPairs(
        pairs,
        methods,
        reused_namespaces=len(same),
        compared_namespaces=tonight.num_rows - len(same) - len(update.namespaces),
        updated_namespaces=len(update.namespaces),
        changed_rows=int(update.changed.sum()),
    )


@dataclass
class _Update:
    namespaces: list[str]  # updated rather than joined whole
    rows: np.ndarray  # over the compared vectors: the row is in one of them
    changed: np.ndarray  # over the compared vectors: the row of one of them moved (new, or another vector)
    gone: pa.Array  # ids of rows of them that the stored pairs were found among and that moved or went


def _updatable(compared: pa.Table, previous: pa.Table | None, exact_cutoff: int) -> _Update:
    """Which of the compared namespaces can be updated from the stored pairs (see `cached_vector_pairs`)."""
    nothing = np.zeros(compared.num_rows, dtype=bool)
    if previous is None or compared.num_rows == 0:
        return _Update([], nothing, nothing, pa.array([], pa.string()))
    with duck() as con:
        con.register("t", compared.select(DIGEST_COLUMNS))
        con.register("p", previous)
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
                kept AS (
                    SELECT namespace, count(*) AS n FROM t JOIN p USING (id, namespace, model, digest)
                    GROUP BY namespace)
                SELECT namespace FROM rows_now JOIN kept USING (namespace)
                    JOIN biggest_now n USING (namespace) JOIN biggest_before b USING (namespace)
                WHERE n.rows <= ? AND b.rows <= ? AND 2 * kept.n >= rows_now.n
                ORDER BY namespace
                """,
                [exact_cutoff, exact_cutoff],
            ).fetchall()
        ]
        con.register("chosen", pa.table({"namespace": pa.array(namespaces, pa.string())}))

        def moved(this: str, other: str) -> pa.Array:
            """Ids of `this` side's rows of the chosen namespaces that the `other` side lacks as they are."""
            return (
                con.sql(
                    f"SELECT id FROM {this} JOIN chosen USING (namespace) "
                    f"ANTI JOIN {other} USING (id, namespace, model, digest)"
                )
                .to_arrow_table()["id"]
                .combine_chunks()
            )

        new, gone = moved("t", "p"), moved("p", "t")
    rows = pc.is_in(compared["namespace"], value_set=pa.array(namespaces, pa.string()))
    # Against the few moved ids, not the many kept ones: a hash set of 1M ids took a second to build.
    changed = pc.and_(rows, pc.is_in(compared["id"], value_set=new))
    return _Update(namespaces, _numpy(rows), _numpy(changed), gone)


def _numpy(mask: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)


def _kept(stored: pa.Table, update: _Update) -> pa.Table:
    """The stored pairs of the updated namespaces between two rows that did not move."""
    ours = stored.filter(pc.is_in(stored["namespace"], value_set=pa.array(update.namespaces, pa.string())))
    either = pc.or_(
        pc.is_in(ours["left_id"], value_set=update.gone), pc.is_in(ours["right_id"], value_set=update.gone)
    )
    return ours.filter(pc.invert(either))


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
