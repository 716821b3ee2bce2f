"""Similar pairs of one partition: vector pairs above the lowest threshold, plus exact-content twins.

Pairs never cross a namespace, and never compare vectors of two models: the engine runs per
(namespace, model) group. Historical corpora never passed write-time dedup, so rows with identical content
pair at score 1.0 whether or not they have a vector.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress
from engram_pipelines.vectors.similarity import PairResult, pairs_touching, similar_pairs
from engram_pipelines.warehouse.parquet import vector_matrix

PAIR_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("left_id", pa.string(), nullable=False),  # left_id < right_id
        pa.field("right_id", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("exact_content", pa.bool_(), nullable=False),
    ]
)


def vector_pairs(
    vectors: pa.Table,
    threshold: float,
    *,
    exact_cutoff: int,
    progress: Progress | None = None,
    rows: np.ndarray | None = None,
) -> tuple[pa.Table, dict[str, int]]:
    """Pairs at or above `threshold` within each (namespace, model) group (of the `rows` only, when given: a
    boolean mask); and rows per method."""
    if vectors.num_rows == 0:
        return PAIR_SCHEMA.empty_table(), {}
    matrix, codes = _matrix(vectors)
    found = similar_pairs(matrix, codes, threshold, exact_cutoff=exact_cutoff, progress=progress, rows=rows)
    methods: dict[str, int] = {}
    sizes = np.bincount(codes if rows is None else codes[rows])
    for code, method in found.method_by_group.items():
        methods[method] = methods.get(method, 0) + int(sizes[code])
    return _pair_table(vectors, found), methods


def touching_pairs(
    vectors: pa.Table,
    changed: np.ndarray,
    threshold: float,
    *,
    progress: Progress | None = None,
    rows: np.ndarray | None = None,
) -> pa.Table:
    """The pairs at or above `threshold` within each (namespace, model) group (of the `rows` only, when given)
    that a `changed` row takes part in, as an exact join of the groups would find them."""
    if vectors.num_rows == 0:
        return PAIR_SCHEMA.empty_table()
    matrix, codes = _matrix(vectors)
    return _pair_table(
        vectors, pairs_touching(matrix, codes, changed, threshold, progress=progress, rows=rows)
    )


def _matrix(vectors: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """The vectors as a float32 matrix (a view where they are one float32 chunk), and a group code per row (one
    per namespace and model)."""
    keys = pc.binary_join_element_wise(vectors["namespace"], vectors["model"], "\x1f")
    codes = (
        pc.dictionary_encode(keys).combine_chunks().indices.to_numpy(zero_copy_only=False).astype(np.int64)
    )
    return np.ascontiguousarray(vector_matrix(vectors["vector"]), dtype=np.float32), codes


def _pair_table(vectors: pa.Table, found: PairResult) -> pa.Table:
    # Taken from the columns as they are: combining them first copied every row's id to take the pairs'.
    ids = vectors["id"]
    left = ids.take(pa.array(found.left)).to_numpy(zero_copy_only=False)
    right = ids.take(pa.array(found.right)).to_numpy(zero_copy_only=False)
    swap = left > right
    left, right = np.where(swap, right, left), np.where(swap, left, right)
    return pa.table(
        {
            "namespace": vectors["namespace"].take(pa.array(found.left)),
            "left_id": pa.array(left, pa.string()),
            "right_id": pa.array(right, pa.string()),
            "score": pa.array(found.score.astype(np.float64)),
            "exact_content": pa.array(np.zeros(len(left), dtype=bool)),
        },
        schema=PAIR_SCHEMA,
    )


def exact_content_pairs(memories: pa.Table) -> pa.Table:
    """Identical content within a namespace and kind, as a star around the member a merge would keep.

    The hub is the canonical by the merge rule (importance, then most recent, then lowest id), so a cluster
    built from these edges has every member adjacent to its canonical without k^2 pairs. Only rows a merge
    may touch take part: active, not superseded, not excluded from comparison.
    """
    with duck() as con:
        con.register(
            "m",
            memories.select(
                [
                    "id",
                    "namespace",
                    "kind",
                    "content",
                    "metadata",
                    "importance",
                    "created_at",
                    "zone",
                    "superseded_by",
                ]
            ),
        )
        return (
            con.sql(
                """
            WITH live AS (
                SELECT id, namespace, kind, content,
                    row_number() OVER (PARTITION BY namespace, kind, content
                                       ORDER BY importance DESC, created_at DESC, id) AS rank
                FROM m
                WHERE zone = 'active' AND superseded_by IS NULL
                  AND NOT coalesce(TRY_CAST(json_extract(metadata, '$.embeddingExcluded') AS BOOLEAN), false)
            )
            SELECT l.namespace, least(h.id, l.id) AS left_id, greatest(h.id, l.id) AS right_id,
                1.0::DOUBLE AS score, true AS exact_content
            FROM live l JOIN live h ON h.namespace = l.namespace AND h.kind = l.kind AND h.content = l.content
                AND h.rank = 1 AND l.rank > 1
            """
            )
            .to_arrow_table()
            .cast(PAIR_SCHEMA)
        )


def merged_pairs(vector_pairs_table: pa.Table, exact: pa.Table) -> pa.Table:
    """Both sources, one row per pair: the higher score, exact if either says so; sorted."""
    with duck() as con:
        con.register("v", vector_pairs_table)
        con.register("e", exact)
        return (
            con.sql(
                """
            SELECT namespace, left_id, right_id, max(score) AS score, bool_or(exact_content) AS exact_content
            FROM (SELECT * FROM v UNION ALL SELECT * FROM e)
            GROUP BY namespace, left_id, right_id ORDER BY namespace, left_id, right_id
            """
            )
            .to_arrow_table()
            .cast(PAIR_SCHEMA)
        )
