"""All-pairs cosine similarity within groups (namespace + embedding model): every pair at or above a threshold.

Two engines behind one function, chosen per group:

- exact: blocked matrix products over the upper triangle of the group, tiles of ~4096 rows. Groups of a few
  rows are padded to a common size and joined in batches (one batched matmul for hundreds of groups), so ten
  thousand namespaces of 20 rows cost what their rows cost, not ten thousand Python round trips.
- cells: spherical k-means cells trained on a sample; each row is owned by its nearest cell and probed into its
  `nprobe` nearest cells; each cell's owners are joined (matrix products) with its owners and its probers. A
  pair is found when either row probes the other's cell. `nprobe` is calibrated per group on a random sample of
  rows whose pairs are found by brute force, so that recall of the >= threshold pairs meets `recall_target` on
  clustered and near-uniform data alike; when the calibrated join would not be clearly cheaper than exact, the
  group falls back to exact.

Membership is decided in float32: a pair is in when its score, rounded to float32, is >= float32(threshold).
Pairs within a hair of the threshold are re-scored in float64 from the float32 rows, so the exact and cell
paths (and different tile shapes) agree on them. Work runs on one Python thread per core, each with BLAS at
one thread (measured faster here than one thread driving a 2-thread BLAS). Memory: tiles are streamed; the
largest transient objects are one reordered copy of the biggest cell-joined group (rows x dim float32) and its
probe table (rows x nprobe int32); only the returned pairs grow with the output.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from engram_pipelines.progress import Progress, SilentProgress

TILE_ROWS = 4096
"""Rows per side of an exact tile: 2k-8k measured the same here; 4096 keeps a tile at 64 MB of float32."""

SMALL_GROUP_MAX = 256
"""Groups up to this many rows are padded and joined in batches instead of tile by tile."""

_PAD_LADDER = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_BATCH_ROWS = 8192  # rows (groups x padded size) in one batched matmul

EDGE_BAND = 1e-5
"""Scores within this of the threshold are re-scored in float64: float32 GEMM error at d=384 is ~1e-6."""

DEFAULT_RECALL_TARGET = 0.99
_MIN_CELLS = 16
_MIN_ROWS_PER_CELL = 160
_MAX_CELLS = 4096
_TRAIN_ROWS_PER_CELL = 32
_KMEANS_ITERATIONS = 8
_CALIBRATION_ROWS = (512, 1024, 2048)  # grown while too few pairs are seen
_MIN_CALIBRATION_PAIRS = 400  # fewer cannot show a 0.99 recall with any margin
_MIN_CALIBRATION_UNITS = 30  # sampled rows that have pairs
_CALIBRATION_Z = 2.0
# A cell join estimated to cost more than this share of exact is not worth its recall loss.
_FALLBACK_RATIO = 0.5

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]  # left, right (original row indices), score


@dataclass
class PairResult:
    left: np.ndarray  # int64 row indices into the input, left < right
    right: np.ndarray  # int64
    score: np.ndarray  # float32 cosine (inputs are L2-normalised)
    method_by_group: dict[int, str] = field(default_factory=dict)  # group code -> "exact" | "cells"
    nprobe_by_group: dict[int, int] = field(default_factory=dict)  # cell-joined groups: probes used
    cells_by_group: dict[int, int] = field(default_factory=dict)  # cell-joined groups: number of cells

    def __len__(self) -> int:
        return len(self.left)


def similar_pairs(
    vectors: np.ndarray,
    groups: np.ndarray,
    threshold: float,
    *,
    exact_cutoff: int = 20_000,
    progress: Progress | None = None,
    seed: int = 0,
    recall_target: float = DEFAULT_RECALL_TARGET,
    nprobe: int | None = None,
    cells: int | None = None,
) -> PairResult:
    """Every pair i < j with groups[i] == groups[j] and cosine >= threshold, sorted by (left, right).

    Groups of up to `exact_cutoff` rows are joined exactly; bigger ones by the cell join (recall of the
    >= threshold pairs at least `recall_target`, calibrated per group unless `nprobe` is given). Deterministic
    for the same input and seed.
    """
    matrix, codes = _validated(vectors, groups, threshold, recall_target)
    progress = progress or SilentProgress()
    t32 = np.float32(threshold)
    sorted_rows, starts, sizes, group_codes = _group_layout(codes)
    methods = {int(code): "exact" for code in group_codes}
    result = PairResult(*_empty_hits(), method_by_group=methods)
    workers = _worker_count()

    exact_items: list[Callable[[], Hits]] = []
    exact_items += _small_group_items(matrix, sorted_rows, starts, sizes, t32)
    large: list[tuple[int, np.ndarray]] = []
    for start, size, code in zip(starts, sizes, group_codes, strict=True):
        rows = sorted_rows[start : start + size]
        if SMALL_GROUP_MAX < size <= exact_cutoff:
            exact_items += _exact_group_items(matrix, rows, t32)
        elif size > exact_cutoff:
            large.append((int(code), rows))
    chunks = _run_items(exact_items, progress, "similar pairs: exact tiles", workers)

    for code, rows in large:
        plan = _plan_cell_join(matrix, rows, t32, recall_target, nprobe, cells, seed, workers)
        if plan is None:
            items = _exact_group_items(matrix, rows, t32)
            chunks += _run_items(items, progress, f"similar pairs: group {code} exact tiles", workers)
            continue
        methods[code] = "cells"
        result.nprobe_by_group[code] = plan.nprobe
        result.cells_by_group[code] = plan.cells
        chunks += _run_items(plan.items, progress, f"similar pairs: group {code} cells", workers)
        del plan  # the reordered copy of the group goes before the next group's is built

    result.left, result.right, result.score = _sorted_pairs(chunks, len(matrix))
    return result


def pairs_per_row_loop(vectors: np.ndarray, groups: np.ndarray, threshold: float) -> PairResult:
    """The seeds' method: one similarity query (a matrix-vector product) per memory. For benchmarks only."""
    matrix, codes = _validated(vectors, groups, threshold, DEFAULT_RECALL_TARGET)
    t32 = np.float32(threshold)
    sorted_rows, starts, sizes, group_codes = _group_layout(codes)
    lefts, rights, scores = [], [], []
    for start, size in zip(starts, sizes, strict=True):
        rows = sorted_rows[start : start + size]
        members = matrix[rows]
        for position in range(size - 1):  # deliberately one query per row
            sims = members[position + 1 :] @ members[position]
            hit = np.flatnonzero(sims >= t32)
            lefts.append(np.full(hit.size, rows[position], dtype=np.int64))
            rights.append(rows[position + 1 + hit])
            scores.append(sims[hit])
    chunks = [(np.concatenate(lefts), np.concatenate(rights), np.concatenate(scores))] if lefts else []
    left, right, score = _sorted_pairs(chunks, len(matrix))
    return PairResult(left, right, score, method_by_group={int(c): "per-row" for c in group_codes})


# --- input, layout, output --------------------------------------------------------------------------------


def _validated(
    vectors: np.ndarray, groups: np.ndarray, threshold: float, recall_target: float
) -> tuple[np.ndarray, np.ndarray]:
    matrix = np.ascontiguousarray(vectors, dtype=np.float32)
    codes = np.ascontiguousarray(groups, dtype=np.int64)
    if matrix.ndim != 2:
        raise ValueError(f"vectors must be 2-d (rows x dim), got shape {matrix.shape}")
    if codes.shape != (matrix.shape[0],):
        raise ValueError(f"groups must have one code per row: {codes.shape} vs {matrix.shape[0]} rows")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if not 0.0 < recall_target <= 1.0:
        raise ValueError(f"recall_target must be in (0, 1], got {recall_target}")
    return matrix, codes


def _group_layout(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by group (ascending row index inside a group), and each group's start, size and code."""
    sorted_rows = np.argsort(codes, kind="stable").astype(np.int64)
    sorted_codes = codes[sorted_rows]
    if len(codes) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return sorted_rows, empty, empty, empty
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_codes)) + 1])
    sizes = np.diff(np.concatenate([starts, [len(codes)]]))
    return sorted_rows, starts, sizes, sorted_codes[starts]


def _empty_hits() -> Hits:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32)


def _sorted_pairs(chunks: Sequence[Hits], n_rows: int) -> Hits:
    chunks = [c for c in chunks if len(c[0])]
    if not chunks:
        return _empty_hits()
    left = np.concatenate([c[0] for c in chunks])
    right = np.concatenate([c[1] for c in chunks])
    score = np.concatenate([c[2] for c in chunks])
    order = np.argsort(left * np.int64(n_rows) + right)
    return left[order], right[order], score[order]


def _worker_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _run_items(items: list[Callable[[], Hits]], progress: Progress, task: str, workers: int) -> list[Hits]:
    """Runs the tiles on one thread per core with BLAS at one thread each; results in item order."""
    if not items:
        return []
    progress.start(task, len(items))
    results: list[Hits] = []
    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        for hits in pool.map(lambda item: item(), items):
            results.append(hits)
            progress.advance(1)
    progress.finish()
    return results


# --- tiles --------------------------------------------------------------------------------------------------


def _tile_hits(a: np.ndarray, b: np.ndarray, t32: np.float32, diagonal_offset: int | None = None) -> Hits:
    """(r, c, score) with a[r] . b[c] >= t32, positions in a and b.

    With `diagonal_offset`, a[r] is b[r + diagonal_offset] (a tile on the diagonal of a self-join) and only
    c > r + diagonal_offset is kept. A per-row max check comes first: most rows of a tile have no hit, and
    extracting indices from the whole tile costs far more than one max pass.
    """
    scores = a @ b.T
    if diagonal_offset is not None:
        own = np.arange(max(0, -diagonal_offset), min(len(a), len(b) - diagonal_offset))
        scores[own, own + diagonal_offset] = -2.0
    low = np.float32(t32 - EDGE_BAND)
    rows_with_hits = np.flatnonzero(scores.max(axis=1) >= low)
    if rows_with_hits.size == 0:
        return _empty_hits()
    candidate_rows = scores[rows_with_hits]
    r, c = np.nonzero(candidate_rows >= low)
    r = rows_with_hits[r]
    if diagonal_offset is not None:
        upper = c > r + diagonal_offset
        r, c = r[upper], c[upper]
    s, keep = _settle_edge(a, b, r, c, scores[r, c], t32)
    return r[keep].astype(np.int64), c[keep].astype(np.int64), s[keep]


def _settle_edge(
    a: np.ndarray, b: np.ndarray, r: np.ndarray, c: np.ndarray, s: np.ndarray, t32: np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """Scores and keep-mask of candidates (a[r], b[c]) with score `s` from a tile.

    Candidates within EDGE_BAND of the threshold are re-scored in float64 from the float32 rows, so that every
    path and tile shape decides them the same way.
    """
    near = np.abs(s - t32) < EDGE_BAND
    if near.any():
        rescored = np.einsum("ij,ij->i", a[r[near]].astype(np.float64), b[c[near]].astype(np.float64))
        s = s.copy()
        s[near] = rescored.astype(np.float32)
    return s, s >= t32


def _gather(matrix: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """matrix[rows], as a view when the rows are consecutive (one namespace, a cell's owners)."""
    if len(rows) and rows[-1] - rows[0] == len(rows) - 1:
        return matrix[rows[0] : rows[-1] + 1]
    return matrix[rows]


def _exact_group_items(matrix: np.ndarray, rows: np.ndarray, t32: np.float32) -> list[Callable[[], Hits]]:
    """Upper-triangle tiles of one group; `rows` ascending, so a later position is a larger row index."""
    bounds = list(range(0, len(rows), TILE_ROWS)) + [len(rows)]
    items = []
    for i in range(len(bounds) - 1):
        for j in range(i, len(bounds) - 1):
            row_block, col_block = rows[bounds[i] : bounds[i + 1]], rows[bounds[j] : bounds[j + 1]]
            items.append(_exact_tile_item(matrix, row_block, col_block, i == j, t32))
    return items


def _exact_tile_item(
    matrix: np.ndarray, row_block: np.ndarray, col_block: np.ndarray, diagonal: bool, t32: np.float32
) -> Callable[[], Hits]:
    def run() -> Hits:
        a = _gather(matrix, row_block)
        b = a if diagonal else _gather(matrix, col_block)
        r, c, s = _tile_hits(a, b, t32, 0 if diagonal else None)
        return row_block[r], col_block[c], s

    return run


def _small_group_items(
    matrix: np.ndarray, sorted_rows: np.ndarray, starts: np.ndarray, sizes: np.ndarray, t32: np.float32
) -> list[Callable[[], Hits]]:
    """Groups of 2..SMALL_GROUP_MAX rows, padded to a size of the ladder and joined many per batched matmul."""
    small = (sizes >= 2) & (sizes <= SMALL_GROUP_MAX)
    ladder = np.array(_PAD_LADDER)
    padded_sizes = ladder[np.searchsorted(ladder, sizes[small])]
    items = []
    for pad in np.unique(padded_sizes):
        chosen = padded_sizes == pad
        group_starts, group_sizes = starts[small][chosen], sizes[small][chosen]
        per_batch = max(1, _BATCH_ROWS // int(pad))
        for b in range(0, len(group_starts), per_batch):
            table = _padded_row_table(
                sorted_rows, group_starts[b : b + per_batch], group_sizes[b : b + per_batch], int(pad)
            )
            items.append(_small_batch_item(matrix, table, t32))
    return items


def _padded_row_table(sorted_rows: np.ndarray, starts: np.ndarray, sizes: np.ndarray, pad: int) -> np.ndarray:
    """(groups, pad) original row indices, -1 where a group is shorter than the pad."""
    offsets = np.arange(pad)
    present = offsets[None, :] < sizes[:, None]
    positions = np.where(present, starts[:, None] + offsets[None, :], 0)
    return np.where(present, sorted_rows[positions], -1)


def _small_batch_item(matrix: np.ndarray, table: np.ndarray, t32: np.float32) -> Callable[[], Hits]:
    def run() -> Hits:
        padding = table < 0
        stacked = matrix[np.where(padding, 0, table)]
        stacked[padding] = 0.0  # a zero row scores 0 against everything, below any allowed threshold
        scores = np.matmul(stacked, stacked.transpose(0, 2, 1))
        pad = table.shape[1]
        upper = np.triu(np.ones((pad, pad), dtype=bool), k=1)
        g, r, c = np.nonzero((scores >= np.float32(t32 - EDGE_BAND)) & upper)
        left, right = table[g, r], table[g, c]
        real = (left >= 0) & (right >= 0)
        g, r, c = g[real], r[real], c[real]
        flat = stacked.reshape(-1, stacked.shape[2])  # row (g, r) of the stack is flat row g * pad + r
        s, keep = _settle_edge(flat, flat, g * pad + r, g * pad + c, scores[g, r, c], t32)
        return left[real][keep], right[real][keep], s[keep]

    return run


# --- cell join ----------------------------------------------------------------------------------------------


@dataclass
class _CellPlan:
    items: list[Callable[[], Hits]]
    nprobe: int
    cells: int


def _plan_cell_join(
    matrix: np.ndarray,
    rows: np.ndarray,
    t32: np.float32,
    recall_target: float,
    nprobe: int | None,
    cells: int | None,
    seed: int,
    workers: int,
) -> _CellPlan | None:
    """Trains the cells, calibrates the probes and lays out the tiles; None when exact is the better deal."""
    size = len(rows)
    rng = np.random.default_rng(seed)
    cells = min(size, _default_cells(size) if cells is None else max(1, cells))
    train_rows = np.sort(rng.choice(size, min(size, cells * _TRAIN_ROWS_PER_CELL), replace=False))
    centroids, train_labels = _train_centroids(matrix[rows[train_rows]], cells, rng)
    cell_share = np.bincount(train_labels, minlength=cells) / len(train_labels)

    if nprobe is None:
        nprobe, sample_centroid_sims = _calibrate(matrix, rows, centroids, t32, recall_target, rng)
    else:
        nprobe = int(np.clip(nprobe, 1, cells))
        sample = rows[np.sort(rng.choice(size, min(size, _CALIBRATION_ROWS[0]), replace=False))]
        sample_centroid_sims = matrix[sample] @ centroids.T
    if _cell_cost(sample_centroid_sims, cell_share, nprobe, size) > _FALLBACK_RATIO * size * size / 2:
        return None

    owner, probes = _assign(matrix, rows, centroids, nprobe, workers)
    return _CellPlan(_cell_items(matrix, rows, owner, probes, cells, t32), nprobe, cells)


def _default_cells(size: int) -> int:
    """About sqrt(2 x rows) cells: assigning rows to cells costs rows x cells, the join rows x nprobe x
    rows / cells, and nprobe is ~2 on clustered data, so this balances the two; at least _MIN_ROWS_PER_CELL
    rows a cell so that the products stay big enough for BLAS to run near its peak."""
    balanced = round(math.sqrt(2 * size))
    return int(np.clip(min(balanced, size // _MIN_ROWS_PER_CELL), _MIN_CELLS, _MAX_CELLS))


def _train_centroids(
    sample: np.ndarray, cells: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Spherical k-means (cosine): unit centroids, and the sample's labels under them."""
    centroids = sample[rng.choice(len(sample), cells, replace=False)].copy()
    labels = np.zeros(len(sample), dtype=np.int64)
    for _ in range(_KMEANS_ITERATIONS):
        labels, best = _nearest(sample, centroids)
        centroids = _unit_means(sample, labels, cells)
        empty = np.flatnonzero(~centroids.any(axis=1))
        if empty.size:  # restart empty cells on the worst-served rows
            centroids[empty] = sample[np.argsort(best, kind="stable")[: empty.size]]
    labels, _ = _nearest(sample, centroids)
    return centroids, labels


def _nearest(vectors: np.ndarray, centroids: np.ndarray, block: int = 16384) -> tuple[np.ndarray, np.ndarray]:
    labels = np.empty(len(vectors), dtype=np.int64)
    best = np.empty(len(vectors), dtype=np.float32)
    for start in range(0, len(vectors), block):
        sims = vectors[start : start + block] @ centroids.T
        labels[start : start + block] = sims.argmax(axis=1)
        best[start : start + block] = sims[np.arange(len(sims)), labels[start : start + block]]
    return labels, best


def _unit_means(vectors: np.ndarray, labels: np.ndarray, cells: int) -> np.ndarray:
    order = np.argsort(labels, kind="stable")
    present, starts = np.unique(labels[order], return_index=True)
    means = np.zeros((cells, vectors.shape[1]), dtype=np.float32)
    means[present] = np.add.reduceat(vectors[order], starts, axis=0)
    norms = np.linalg.norm(means, axis=1, keepdims=True)
    return np.divide(means, norms, out=np.zeros_like(means), where=norms > 0)


def _calibrate(
    matrix: np.ndarray,
    rows: np.ndarray,
    centroids: np.ndarray,
    t32: np.float32,
    recall_target: float,
    rng: np.random.Generator,
) -> tuple[int, np.ndarray]:
    """Smallest nprobe whose recall on the pairs of a random row sample clears `recall_target` with margin,
    and the sample's centroid similarities (for the cost estimate).

    Pairs of random rows are a uniform sample of all pairs, so the share of them that n probes find estimates
    the recall of n probes. Where pairs are too rare to show the target that way (near-uniform
    data), pairs made at exactly the threshold in random directions stand in: the hardest pairs a row can
    have, so the probes they need are a conservative bound.
    """
    size = len(rows)
    for sample_size in _CALIBRATION_ROWS:
        sample = rows[np.sort(rng.choice(size, min(size, sample_size), replace=False))]
        source_row, needs = _probes_needed(matrix, rows, sample, centroids, t32)
        biggest_sample_pairs = len(needs) * min(size, _CALIBRATION_ROWS[-1]) / len(sample)
        if len(needs) >= _MIN_CALIBRATION_PAIRS or biggest_sample_pairs < _MIN_CALIBRATION_PAIRS:
            break  # enough pairs, or so few that no affordable sample would have enough
    sample_sims = matrix[sample] @ centroids.T
    cells = len(centroids)
    chosen = _smallest_sufficient_nprobe(source_row, needs, recall_target, cells)
    if chosen is None:
        made_source, made = _made_pair_needs(matrix[sample], sample_sims, centroids, float(t32), rng)
        chosen = _smallest_sufficient_nprobe(made_source, made, recall_target, cells) or cells
        if len(needs):
            chosen = max(chosen, int(np.quantile(needs, recall_target, method="higher")))
    return chosen, sample_sims


def _made_pair_needs(
    queries: np.ndarray,
    query_sims: np.ndarray,
    centroids: np.ndarray,
    threshold: float,
    rng: np.random.Generator,
    partners_per_row: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """Probes needed by partners made for each query row at cosine `threshold`, in random directions."""
    needs = []
    query_owner = query_sims.argmax(axis=1)
    for _ in range(partners_per_row):
        away = rng.standard_normal(queries.shape, dtype=np.float32)
        away -= (away * queries).sum(axis=1, keepdims=True) * queries  # orthogonal to the query row
        away /= np.linalg.norm(away, axis=1, keepdims=True)
        partners = threshold * queries + np.float32(math.sqrt(1.0 - threshold * threshold)) * away
        partner_sims = partners @ centroids.T
        partner_owner = partner_sims.argmax(axis=1)
        q_rank, p_rank = _rank_of(query_sims, partner_owner), _rank_of(partner_sims, query_owner)
        needs.append(1 + np.minimum(q_rank, p_rank))
    return np.tile(np.arange(len(queries)), partners_per_row), np.concatenate(needs)


def _probes_needed(
    matrix: np.ndarray, rows: np.ndarray, sample: np.ndarray, centroids: np.ndarray, t32: np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of the sampled rows (found by brute force against the group) as (sampled row's index in
    `sample`, probes needed to find the pair): 1 + the better of the two rows' rank of the other's cell."""
    queries = matrix[sample]
    pair_query, pair_other = [], []
    for start in range(0, len(rows), 2 * TILE_ROWS):
        block = rows[start : start + 2 * TILE_ROWS]
        q, o = np.nonzero(queries @ _gather(matrix, block).T >= t32)
        distinct = sample[q] != block[o]
        pair_query.append(q[distinct])
        pair_other.append(block[o[distinct]])
    query_of_pair, other_row = np.concatenate(pair_query), np.concatenate(pair_other)
    if query_of_pair.size == 0:
        return query_of_pair, np.zeros(0, dtype=np.int64)
    others, other_of_pair = np.unique(other_row, return_inverse=True)
    query_sims = queries @ centroids.T
    other_sims = matrix[others] @ centroids.T
    query_owner, other_owner = query_sims.argmax(axis=1), other_sims.argmax(axis=1)
    needs = np.empty(len(query_of_pair), dtype=np.int64)
    for start in range(0, len(needs), 4096):
        part = slice(start, start + 4096)
        qp, op = query_of_pair[part], other_of_pair[part]
        q_rank = _rank_of(query_sims[qp], other_owner[op])
        o_rank = _rank_of(other_sims[op], query_owner[qp])
        needs[part] = 1 + np.minimum(q_rank, o_rank)
    return query_of_pair, needs


def _rank_of(sims: np.ndarray, cell: np.ndarray) -> np.ndarray:
    """0-based rank of `cell` in each row of centroid similarities (0 = the row's nearest cell)."""
    return (sims > sims[np.arange(len(sims)), cell][:, None]).sum(axis=1)


def _smallest_sufficient_nprobe(
    source_row: np.ndarray, needs: np.ndarray, recall_target: float, cells: int
) -> int | None:
    """Smallest nprobe whose estimated recall, less its margin, clears `recall_target`; None if the sample
    is too small to show it.

    A sampled row's pairs are not independent draws (one sub-topic split between two cells costs many of them
    at once), so the margin is that of a ratio estimator with the sampled rows as clusters: the spread of the
    rows' miss counts, not a binomial over pairs.
    """
    if len(needs) < _MIN_CALIBRATION_PAIRS:
        return None
    _, unit = np.unique(source_row, return_inverse=True)
    units = int(unit.max()) + 1
    if units < _MIN_CALIBRATION_UNITS:
        return None
    per_need = np.bincount(unit * (cells + 1) + np.minimum(needs, cells), minlength=units * (cells + 1))
    found = np.cumsum(per_need.reshape(units, cells + 1), axis=1)  # column k: pairs found with k probes
    pairs = found[:, -1].astype(np.float64)
    misses = pairs[:, None] - found
    miss_rate = misses.sum(axis=0) / pairs.sum()
    residual = misses - miss_rate[None, :] * pairs[:, None]
    standard_error = np.sqrt(units / (units - 1) * (residual**2).sum(axis=0)) / pairs.sum()
    enough = miss_rate + _CALIBRATION_Z * standard_error <= 1.0 - recall_target
    enough[0] = False  # column 0 is "no probes"
    return int(np.argmax(enough)) if enough.any() else None


def _cell_cost(sample_centroid_sims: np.ndarray, cell_share: np.ndarray, nprobe: int, size: int) -> float:
    """Estimated row-pair products of the join (each row against the owners of the cells it probes) plus the
    assignment (each row against every centroid)."""
    cells = sample_centroid_sims.shape[1]
    probed = _top_cells(sample_centroid_sims, nprobe)
    owners_probed = cell_share[probed].sum(axis=1).mean() * size
    return size * owners_probed + size * cells


def _top_cells(sims: np.ndarray, count: int) -> np.ndarray:
    if count >= sims.shape[1]:
        return np.broadcast_to(np.arange(sims.shape[1]), sims.shape)
    return np.argpartition(sims, sims.shape[1] - count, axis=1)[:, -count:]


def _assign(
    matrix: np.ndarray, rows: np.ndarray, centroids: np.ndarray, nprobe: int, workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's owner (nearest cell) and its `nprobe` nearest cells (owner included), as int32."""
    owner = np.empty(len(rows), dtype=np.int32)
    probes = np.empty((len(rows), nprobe), dtype=np.int32)

    def assign_block(start: int) -> None:
        block = slice(start, start + 8192)
        sims = _gather(matrix, rows[block]) @ centroids.T
        owner[block] = sims.argmax(axis=1)
        probes[block] = _top_cells(sims, nprobe)

    with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
        list(pool.map(assign_block, range(0, len(rows), 8192)))
    return owner, probes


def _cell_items(
    matrix: np.ndarray, rows: np.ndarray, owner: np.ndarray, probes: np.ndarray, cells: int, t32: np.float32
) -> list[Callable[[], Hits]]:
    """Tiles of every cell: its owners against its later owners (upper triangle) and against its probers.

    The group is copied once in owner order, so a cell's owners are consecutive rows (views, no gathers).
    """
    by_owner = np.argsort(owner, kind="stable")
    ordered = matrix[rows[by_owner]]
    original = rows[by_owner]  # position in `ordered` -> row of the input
    owner_at = owner[by_owner]
    probes_at = probes[by_owner]
    owner_start = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=cells))])

    prober_pos, prober_cell = np.nonzero(probes_at != owner_at[:, None])
    prober_cell = probes_at[prober_pos, prober_cell]
    by_cell = np.argsort(prober_cell, kind="stable")
    prober_pos, prober_cell = prober_pos[by_cell], prober_cell[by_cell]
    prober_start = np.searchsorted(prober_cell, np.arange(cells + 1))

    context = _CellContext(ordered, original, owner_at, probes_at, t32)
    items = []
    for cell in range(cells):
        lo, hi = owner_start[cell], owner_start[cell + 1]
        if hi == lo:
            continue
        probers = prober_pos[prober_start[cell] : prober_start[cell + 1]]
        for r0 in range(lo, hi, TILE_ROWS):
            r1 = min(r0 + TILE_ROWS, hi)
            for c0 in range(r0, hi, TILE_ROWS):
                items.append(context.owner_tile(r0, r1, c0, min(c0 + TILE_ROWS, hi)))
            for p0 in range(0, len(probers), 2 * TILE_ROWS):
                items.append(context.prober_tile(cell, r0, r1, probers[p0 : p0 + 2 * TILE_ROWS]))
    return items


@dataclass
class _CellContext:
    ordered: np.ndarray  # the group's rows in owner order
    original: np.ndarray  # position -> input row
    owner_at: np.ndarray  # position -> owner cell
    probes_at: np.ndarray  # position -> probed cells
    t32: np.float32

    def owner_tile(self, r0: int, r1: int, c0: int, c1: int) -> Callable[[], Hits]:
        def run() -> Hits:
            diagonal = 0 if c0 == r0 else None  # the first column tile starts at the row tile: same rows
            r, c, s = _tile_hits(self.ordered[r0:r1], self.ordered[c0:c1], self.t32, diagonal)
            return self._as_pairs(r0 + r, c0 + c, s)

        return run

    def prober_tile(self, cell: int, r0: int, r1: int, probers: np.ndarray) -> Callable[[], Hits]:
        def run() -> Hits:
            r, c, s = _tile_hits(self.ordered[r0:r1], self.ordered[probers], self.t32)
            owner_pos, prober_pos = r0 + r, probers[c]
            # The pair is also found in the prober's own cell when the owner row probes it; keep it once,
            # in the lower-numbered cell.
            prober_cell = self.owner_at[prober_pos]
            seen_there = (self.probes_at[owner_pos] == prober_cell[:, None]).any(axis=1) & (
                prober_cell < cell
            )
            keep = ~seen_there
            return self._as_pairs(owner_pos[keep], prober_pos[keep], s[keep])

        return run

    def _as_pairs(self, p: np.ndarray, q: np.ndarray, s: np.ndarray) -> Hits:
        a, b = self.original[p], self.original[q]
        return np.minimum(a, b), np.maximum(a, b), s
