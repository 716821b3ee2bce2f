"""All-pairs cosine similarity within groups (namespace + embedding model): every pair at or above a threshold.

Two engines behind one function, chosen per group:

- exact: blocked matrix products over the upper triangle of the group, tiles of ~4096 rows. Groups of a few
  rows are padded to a common size and joined in batches (one batched matmul for hundreds of groups), so ten
  thousand namespaces of 20 rows cost what their rows cost, not ten thousand Python round trips.
- cells: spherical k-means cells trained on a sample; each row is owned by its nearest cell and also probes
  every cell whose centroid is within a margin of its nearest one's (rows deep inside a cell probe none,
  rows on a border probe their neighbours: measured half the work of a fixed number of nearest cells for
  the same recall); each cell's owners are joined (matrix products) with its later owners and its probers. A
  pair is found when either row probes the other's cell. The margin is calibrated per group on a random
  sample of rows whose pairs are found by brute force, so that recall of the >= threshold pairs meets
  `recall_target` on clustered and near-uniform data alike; when the calibrated join would not be clearly
  cheaper than exact, the group falls back to exact.

Membership is decided in float32: a pair is in when its score, rounded to float32, is >= float32(threshold).
Pairs within a hair of the threshold are re-scored in float64 from the float32 rows, so the exact and cell
paths (and different tile shapes) agree on them; and every pair found is given its float64 score rounded to
float32, so a pair's score does not depend on the tile that found it (`exact_scores`). Work runs on one Python
thread per core, each with BLAS at one thread (measured faster here than one thread driving a 2-thread BLAS).
Memory: tiles are streamed; the largest transient objects are the biggest cell-joined group's probe list and
position arrays (a few int64 per row); only the returned pairs grow with the output.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from threadpoolctl import threadpool_limits

from engram_pipelines.core.progress import Progress, SilentProgress

TILE_ROWS = 4096
"""Rows per side of an exact tile: 2k-8k measured the same here; 4096 keeps a tile at 64 MB of float32."""

SMALL_GROUP_MAX = 256
"""Groups up to this many rows are padded and joined in batches instead of tile by tile."""

_PAD_LADDER = (4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256)
_BATCH_ROWS = 8192  # rows (groups x padded size) in one batched matmul

THREADED_BLAS = False
"""False: tiles run on one Python thread per core, BLAS at one thread each (measured faster here: the threads
also share the index extraction, which is single-threaded numpy). True: one thread, BLAS on every core."""

EDGE_BAND = 1e-5
"""Scores within this of the threshold are re-scored in float64: float32 GEMM error at d=384 is ~1e-6."""

DEFAULT_RECALL_TARGET = 0.99
_MIN_CELLS = 16
_MIN_ROWS_PER_CELL = 160
_MAX_CELLS = 4096
_TRAIN_ROWS_PER_CELL = 32
_KMEANS_ITERATIONS = 8
_CALIBRATION_ROWS = (512, 1024, 2048)  # grown while too few pairs are seen
_MIN_CALIBRATION_PAIRS = 400  # fewer cannot show a 0.99 recall at all (Wilson bound, z = 2, no miss)
_WANTED_CALIBRATION_PAIRS = 1000  # the sample grows towards this many: fewer pairs, a wider (costlier) margin
_MIN_CALIBRATION_UNITS = 30  # sampled rows that have pairs
_MIN_SEEN_COSINES = 20  # real pairs whose cosines made partners copy; fewer: made at the threshold
_CALIBRATION_Z = 2.0
_MAX_PROBES = 128  # cells a row may probe (own included): bounds the probe table and the cost of a bad case
_ASSIGN_ROWS = 8192
# A cell join estimated to cost more than this share of exact is not worth its recall loss.
_FALLBACK_RATIO = 0.5

Hits = tuple[np.ndarray, np.ndarray, np.ndarray]  # left, right (original row indices), score


@dataclass
class PairResult:
    left: np.ndarray  # int64 row indices into the input, left < right
    right: np.ndarray  # int64
    score: np.ndarray  # float32 cosine (inputs are L2-normalised)
    method_by_group: dict[int, str] = field(default_factory=dict)  # group code -> "exact" | "cells"
    # Cell-joined groups: number of cells, the probe margin used, cells joined per row (own included).
    cells_by_group: dict[int, int] = field(default_factory=dict)
    margin_by_group: dict[int, float] = field(default_factory=dict)
    probes_by_group: dict[int, float] = field(default_factory=dict)

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
    margin: float | None = None,
    cells: int | None = None,
    rows: np.ndarray | None = None,
) -> PairResult:
    """Every pair i < j with groups[i] == groups[j] and cosine >= threshold, sorted by (left, right); of the
    `rows` only (a boolean mask), when given.

    Groups of up to `exact_cutoff` rows are joined exactly; bigger ones by the cell join, with `cells` cells
    (default about sqrt(rows)) and a row probing every cell within `margin` cosine of its nearest (by
    default calibrated per group so that recall of the >= threshold pairs is at least `recall_target`; a
    group where that would not be clearly cheaper than exact is joined exactly). Deterministic for the same
    input and seed.
    """
    matrix, codes = _validated(vectors, groups, threshold, recall_target)
    progress = progress or SilentProgress()
    t32 = np.float32(threshold)
    taking_part = None if rows is None else _flags(rows, codes, "rows")
    sorted_rows, starts, sizes, group_codes = _group_layout(codes, taking_part)
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
        plan = _plan_cell_join(matrix, rows, t32, recall_target, margin, cells, seed, workers)
        if plan is None:
            items = _exact_group_items(matrix, rows, t32)
            chunks += _run_items(items, progress, f"similar pairs: group {code} exact tiles", workers)
            continue
        methods[code] = "cells"
        result.cells_by_group[code] = plan.cells
        result.margin_by_group[code] = plan.margin
        result.probes_by_group[code] = plan.probes_per_row
        chunks += _run_items(plan.items, progress, f"similar pairs: group {code} cells", workers)
        del plan  # its probe and position arrays go before the next group's are built

    result.left, result.right, result.score = _sorted_pairs(chunks, len(matrix))
    result.score = exact_scores(matrix, result.left, result.right)
    return result


def pairs_touching(
    vectors: np.ndarray,
    groups: np.ndarray,
    changed: np.ndarray,
    threshold: float,
    *,
    progress: Progress | None = None,
    rows: np.ndarray | None = None,
) -> PairResult:
    """Every pair i < j with groups[i] == groups[j], cosine >= threshold and row i or row j `changed` (of the
    `rows` only, when given).

    Exactly the pairs an exact join of the groups finds that a changed row takes part in, with the same
    scores, at the cost of changed rows x group rows: with the pairs found before among the unchanged rows, a
    group's pairs after a few of its rows moved (`vectors/pair_cache.py`).
    """
    matrix, codes = _validated(vectors, groups, threshold, DEFAULT_RECALL_TARGET)
    changed = _flags(changed, codes, "changed")
    progress = progress or SilentProgress()
    t32 = np.float32(threshold)
    taking_part = None if rows is None else _flags(rows, codes, "rows")
    sorted_rows, starts, sizes, group_codes = _group_layout(codes, taking_part)
    items: list[Callable[[], Hits]] = []
    for start, size in zip(starts, sizes, strict=True):
        members = sorted_rows[start : start + size]
        mine = members[changed[members]]
        for i in range(0, len(mine), TILE_ROWS):
            for j in range(0, size, TILE_ROWS):
                block, against = mine[i : i + TILE_ROWS], members[j : j + TILE_ROWS]
                items.append(_touching_tile_item(matrix, block, against, changed, t32))
    chunks = _run_items(items, progress, "similar pairs: changed rows", _worker_count())
    left, right, _ = _sorted_pairs(chunks, len(matrix))
    methods = {int(code): "exact" for code in group_codes}
    return PairResult(left, right, exact_scores(matrix, left, right), method_by_group=methods)


_SCORE_ROWS = 16_384  # pairs re-scored per step: two float64 blocks of 48 MB at d = 384


def exact_scores(matrix: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The float32 rounding of each pair's cosine computed in float64: a function of the two vectors alone.

    A tile's float32 product depends on the tile's shape in its last bits, so a pair found by a whole-group
    join and by a changed-rows join (or in a tile of another size) could carry scores a few ulps apart, and a
    decision at another threshold (the merge band's, say) could differ. 157,515 pairs (the demo's at 1M) of 1M
    x 384 vectors take 0.46 s here, against 22 s for the join that finds them."""
    out = np.empty(len(left), dtype=np.float32)
    for start in range(0, len(left), _SCORE_ROWS):
        a = matrix[left[start : start + _SCORE_ROWS]].astype(np.float64)
        b = matrix[right[start : start + _SCORE_ROWS]].astype(np.float64)
        out[start : start + _SCORE_ROWS] = np.einsum("ij,ij->i", a, b)
    return out


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


def _flags(flags: np.ndarray, codes: np.ndarray, name: str) -> np.ndarray:
    """`flags` as one boolean per row."""
    flags = np.asarray(flags, dtype=bool)
    if flags.shape != codes.shape:
        raise ValueError(f"{name} must have one flag per row: {flags.shape} vs {codes.shape[0]} rows")
    return flags


def _group_layout(
    codes: np.ndarray, rows: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows sorted by group (ascending row index inside a group), and each group's start, size and code. With
    `rows` (a boolean mask), only those rows: a caller's others take no part, and are not copied out."""
    taking_part = np.arange(len(codes), dtype=np.int64) if rows is None else np.flatnonzero(rows)
    sorted_rows = taking_part[np.argsort(codes[taking_part], kind="stable")].astype(np.int64)
    sorted_codes = codes[sorted_rows]
    if len(sorted_rows) == 0:
        empty = np.zeros(0, dtype=np.int64)
        return sorted_rows, empty, empty, empty
    starts = np.concatenate([[0], np.flatnonzero(np.diff(sorted_codes)) + 1])
    sizes = np.diff(np.concatenate([starts, [len(sorted_rows)]]))
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
    keys = left * np.int64(n_rows) + right
    order = np.argsort(keys)
    keys = keys[order]
    # The cell join finds a pair twice when each of its rows probes the other's cell: keep the first.
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    order = order[first]
    return left[order], right[order], score[order]


def _worker_count() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@contextmanager
def _parallel(workers: int) -> Iterator[ThreadPoolExecutor]:
    """A pool for tiles: one Python thread per core with BLAS at one thread each, or (THREADED_BLAS, for
    comparison) one Python thread driving BLAS on every core."""
    if THREADED_BLAS:
        with ThreadPoolExecutor(1) as pool:
            yield pool
    else:
        with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(workers) as pool:
            yield pool


def _run_items(items: list[Callable[[], Hits]], progress: Progress, task: str, workers: int) -> list[Hits]:
    """Runs the tiles on one thread per core with BLAS at one thread each; results in item order."""
    if not items:
        return []
    progress.start(task, len(items))
    results: list[Hits] = []
    with _parallel(workers) as pool:
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


def _touching_tile_item(
    matrix: np.ndarray, row_block: np.ndarray, col_block: np.ndarray, changed: np.ndarray, t32: np.float32
) -> Callable[[], Hits]:
    """Changed rows (`row_block`) against a block of their group: each pair once (a pair of two changed rows
    from its lower row), as (lower, higher) row indices."""

    def run() -> Hits:
        r, c, s = _tile_hits(_gather(matrix, row_block), _gather(matrix, col_block), t32)
        mine, other = row_block[r], col_block[c]
        keep = (mine != other) & (~changed[other] | (mine < other))
        mine, other, s = mine[keep], other[keep], s[keep]
        return np.minimum(mine, other), np.maximum(mine, other), s

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
    cells: int
    margin: float
    probes_per_row: float  # cells a row is joined against on average, its own included


def _plan_cell_join(
    matrix: np.ndarray,
    rows: np.ndarray,
    t32: np.float32,
    recall_target: float,
    margin: float | None,
    cells: int | None,
    seed: int,
    workers: int,
) -> _CellPlan | None:
    """Trains the cells, calibrates the probe margin and lays out the tiles; None when exact is the better deal
    (only decided for a calibrated margin: one given by the caller is obeyed)."""
    size = len(rows)
    rng = np.random.default_rng(seed)
    cells = min(size, _default_cells(size) if cells is None else max(1, cells))
    train_rows = np.sort(rng.choice(size, min(size, cells * _TRAIN_ROWS_PER_CELL), replace=False))
    centroids, train_labels = _train_centroids(matrix[rows[train_rows]], cells, rng)
    owners_per_cell = np.bincount(train_labels, minlength=cells) * (size / len(train_labels))

    if margin is None:
        margin, sample_sims = _calibrate(matrix, rows, centroids, t32, recall_target, rng)
        join_cost = size * (_probed(sample_sims, margin) @ owners_per_cell).mean()
        if join_cost + size * cells > _FALLBACK_RATIO * size * size / 2:
            return None
    owner, prober_row, prober_cell = _assign(matrix, rows, centroids, margin, workers)
    items = _cell_items(matrix, rows, owner, prober_row, prober_cell, cells, t32)
    return _CellPlan(items, cells, margin, 1.0 + len(prober_row) / size)


def _default_cells(size: int) -> int:
    """About sqrt(rows) cells: training and assigning the cells grow with their number, the join shrinks with
    it; measured at 100k and 1M rows, sqrt(rows) balances them. At least _MIN_ROWS_PER_CELL rows a cell so
    that the products stay big enough for BLAS to run near its peak."""
    balanced = round(math.sqrt(size))
    return int(np.clip(min(balanced, size // _MIN_ROWS_PER_CELL), _MIN_CELLS, _MAX_CELLS))


def _train_centroids(
    sample: np.ndarray, cells: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Spherical k-means (cosine): unit centroids, and the sample's labels under them. (scikit-learn's KMeans is
    as fast here but Euclidean, and serves the cosine cells slightly worse: bench/cells.py.)"""
    centroids = sample[rng.choice(len(sample), cells, replace=False)].copy()
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


def _probed(sims: np.ndarray, margin: float) -> np.ndarray:
    """Which cells each row probes: those whose centroid similarity is within `margin` of the row's best
    (its own cell's), at most _MAX_PROBES of them (the nearest)."""
    probed = sims >= sims.max(axis=1, keepdims=True) - np.float32(margin)
    crowded = np.flatnonzero(probed.sum(axis=1) > _MAX_PROBES)
    if crowded.size:
        nearest = np.argpartition(-sims[crowded], _MAX_PROBES - 1, axis=1)[:, :_MAX_PROBES]
        probed[crowded] = False
        probed[crowded[:, None], nearest] = True
    return probed


def _calibrate(
    matrix: np.ndarray,
    rows: np.ndarray,
    centroids: np.ndarray,
    t32: np.float32,
    recall_target: float,
    rng: np.random.Generator,
) -> tuple[float, np.ndarray]:
    """Smallest probe margin whose recall on the pairs of a random row sample clears `recall_target` with
    margin to spare, and the sample's centroid similarities (for the cost estimate).

    Pairs of random rows are a uniform sample of all pairs, so the share of them that a margin finds estimates
    its recall. Where pairs are too rare to show the target that way (near-uniform data), pairs made for the
    sampled rows stand in: partners in random directions (the hardest direction for cells, which follow the
    data), at the cosines of the real pairs seen (at the threshold itself when too few were seen), so the
    margin they need is a conservative one.
    """
    size = len(rows)
    for sample_size in _CALIBRATION_ROWS:
        sample = rows[np.sort(rng.choice(size, min(size, sample_size), replace=False))]
        source_row, needs, scores = _sample_pair_needs(matrix, rows, sample, centroids, t32)
        biggest_sample_pairs = len(needs) * min(size, _CALIBRATION_ROWS[-1]) / len(sample)
        if len(needs) >= _WANTED_CALIBRATION_PAIRS or biggest_sample_pairs < _MIN_CALIBRATION_PAIRS:
            break  # enough pairs, or so few that no affordable sample would have enough
    sample_sims = matrix[sample] @ centroids.T
    chosen = _smallest_sufficient_margin(source_row, needs, recall_target)
    if chosen is None:
        cosines = scores if len(scores) >= _MIN_SEEN_COSINES else np.array([t32])
        made_source, made = _made_pair_needs(matrix[sample], sample_sims, centroids, cosines, rng)
        chosen = _smallest_sufficient_margin(made_source, made, recall_target)
        chosen = math.inf if chosen is None else chosen
        finite = needs[np.isfinite(needs)]
        if finite.size:
            chosen = max(chosen, float(np.quantile(finite, recall_target, method="higher")))
    return chosen, sample_sims


def _sample_pair_needs(
    matrix: np.ndarray, rows: np.ndarray, sample: np.ndarray, centroids: np.ndarray, t32: np.float32
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pairs of the sampled rows (found by brute force against the group) as (sampled row's index in
    `sample`, probe margin needed to find the pair, the pair's cosine)."""
    queries = matrix[sample]
    pair_query, pair_other, pair_score = [], [], []
    for start in range(0, len(rows), 2 * TILE_ROWS):
        block = rows[start : start + 2 * TILE_ROWS]
        scores = queries @ _gather(matrix, block).T
        q, o = np.nonzero(scores >= t32)
        distinct = sample[q] != block[o]
        pair_query.append(q[distinct])
        pair_other.append(block[o[distinct]])
        pair_score.append(scores[q[distinct], o[distinct]])
    query_of_pair, other_row = np.concatenate(pair_query), np.concatenate(pair_other)
    pair_scores = np.concatenate(pair_score)
    needs = np.empty(len(query_of_pair), dtype=np.float32)
    if query_of_pair.size == 0:
        return query_of_pair, needs, pair_scores
    others, other_of_pair = np.unique(other_row, return_inverse=True)
    query_sims = queries @ centroids.T
    other_sims = matrix[others] @ centroids.T
    for start in range(0, len(needs), 4096):
        part = slice(start, start + 4096)
        needs[part] = _margin_needed(query_sims[query_of_pair[part]], other_sims[other_of_pair[part]])
    return query_of_pair, needs, pair_scores


def _margin_needed(first_sims: np.ndarray, second_sims: np.ndarray) -> np.ndarray:
    """The smallest margin that finds each pair (row i of both): one of the two rows must probe the other's
    cell; 0 when they share a cell, inf when the probe cap would cut both off."""
    first_owner, second_owner = first_sims.argmax(axis=1), second_sims.argmax(axis=1)
    return np.minimum(_gap_to(first_sims, second_owner), _gap_to(second_sims, first_owner))


def _gap_to(sims: np.ndarray, cell: np.ndarray) -> np.ndarray:
    at_cell = sims[np.arange(len(sims)), cell]
    gap = sims.max(axis=1) - at_cell
    gap[(sims > at_cell[:, None]).sum(axis=1) >= _MAX_PROBES] = np.inf
    return gap


def _made_pair_needs(
    queries: np.ndarray,
    query_sims: np.ndarray,
    centroids: np.ndarray,
    cosines: np.ndarray,
    rng: np.random.Generator,
    partners_per_row: int = 2,
) -> tuple[np.ndarray, np.ndarray]:
    """Margins needed by partners made for each query row in random directions, at cosines drawn from
    `cosines`."""
    needs = []
    for _ in range(partners_per_row):
        away = rng.standard_normal(queries.shape, dtype=np.float32)
        away -= (away * queries).sum(axis=1, keepdims=True) * queries  # orthogonal to the query row
        away /= np.linalg.norm(away, axis=1, keepdims=True)
        cosine = np.minimum(rng.choice(cosines, len(queries)), 1.0).astype(np.float32)[:, None]
        partners = cosine * queries + np.sqrt(1.0 - cosine * cosine) * away
        needs.append(_margin_needed(query_sims, partners @ centroids.T))
    return np.tile(np.arange(len(queries)), partners_per_row), np.concatenate(needs)


def _smallest_sufficient_margin(
    source_row: np.ndarray, needs: np.ndarray, recall_target: float
) -> float | None:
    """Smallest margin whose estimated recall, less its uncertainty, clears `recall_target`; None if the
    sample is too small to show it.

    A sampled row's pairs are not independent draws (one sub-topic split between two cells costs many of them
    at once): the spread of the rows' miss counts (a ratio estimator with the sampled rows as clusters) gives
    the design effect, and a Wilson upper bound on the miss rate over the effective number of pairs gives the
    margin of error, which stays honest when only a handful of misses are seen.
    """
    finite = needs[np.isfinite(needs)]
    if len(needs) < _MIN_CALIBRATION_PAIRS or finite.size == 0:
        return None
    _, unit = np.unique(source_row, return_inverse=True)
    units = int(unit.max()) + 1
    if units < _MIN_CALIBRATION_UNITS:
        return None
    quantiles = np.linspace(max(0.0, recall_target - 0.02), 1.0, 401)
    candidates = np.unique(np.concatenate([[0.0], np.quantile(finite, quantiles, method="higher")]))
    column = np.searchsorted(candidates, needs)  # first candidate that finds the pair; inf: none
    width = len(candidates) + 1
    per_column = np.bincount(unit * width + column, minlength=units * width).reshape(units, width)
    found = np.cumsum(per_column, axis=1)[:, :-1]  # column j: pairs found with margin candidates[j]
    pairs = per_column.sum(axis=1).astype(np.float64)
    misses = pairs[:, None] - found
    miss_rate = misses.sum(axis=0) / pairs.sum()
    residual = misses - miss_rate[None, :] * pairs[:, None]
    clustered_variance = units / (units - 1) * (residual**2).sum(axis=0) / pairs.sum() ** 2
    binomial_variance = miss_rate * (1 - miss_rate) / pairs.sum()
    design_effect = np.maximum(
        1.0,
        np.divide(
            clustered_variance, binomial_variance, where=binomial_variance > 0, out=np.ones_like(miss_rate)
        ),
    )
    upper = _wilson_upper(miss_rate, pairs.sum() / design_effect, _CALIBRATION_Z)
    enough = upper <= 1.0 - recall_target
    return float(candidates[np.argmax(enough)]) if enough.any() else None


def _wilson_upper(rate: np.ndarray, trials: np.ndarray, z: float) -> np.ndarray:
    z2 = z * z
    centre = rate + z2 / (2 * trials)
    spread = z * np.sqrt(rate * (1 - rate) / trials + z2 / (4 * trials * trials))
    return (centre + spread) / (1 + z2 / trials)


def _assign(
    matrix: np.ndarray, rows: np.ndarray, centroids: np.ndarray, margin: float, workers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row's owner (nearest cell), and the (row, cell) probes beyond it, rows as positions in `rows`."""
    owner = np.empty(len(rows), dtype=np.int32)

    def assign_block(start: int) -> tuple[np.ndarray, np.ndarray]:
        sims = _gather(matrix, rows[start : start + _ASSIGN_ROWS]) @ centroids.T
        own = sims.argmax(axis=1)
        owner[start : start + len(own)] = own
        probed = _probed(sims, margin)
        probed[np.arange(len(own)), own] = False
        r, c = np.nonzero(probed)
        return start + r, c.astype(np.int32)

    with _parallel(workers) as pool:
        parts = list(pool.map(assign_block, range(0, len(rows), _ASSIGN_ROWS)))
    prober_row = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, dtype=np.int64)
    prober_cell = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, dtype=np.int32)
    return owner, prober_row, prober_cell


def _cell_items(
    matrix: np.ndarray,
    rows: np.ndarray,
    owner: np.ndarray,
    prober_row: np.ndarray,
    prober_cell: np.ndarray,
    cells: int,
    t32: np.float32,
) -> list[Callable[[], Hits]]:
    """Tiles of every cell: its owners against its later owners (upper triangle) and against its probers.

    Tiles gather their own rows (a few MB each, into memory the allocator reuses) rather than the group
    being copied in owner order up front: at 1M rows that copy is 1.5 GB of fresh pages, which cost ~5 s
    on this machine's VM before any work. A pair found from both sides (each row probes the other's cell)
    comes out twice; the final sort drops the second. Biggest tiles first, so the two threads finish
    together.
    """
    by_owner = np.argsort(owner, kind="stable")
    original = rows[by_owner]  # position in owner order -> row of the input
    position = np.empty(len(rows), dtype=np.int64)
    position[by_owner] = np.arange(len(rows))
    owner_start = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=cells))])
    by_cell = np.argsort(prober_cell, kind="stable")
    prober_pos = position[prober_row[by_cell]]
    prober_start = np.searchsorted(prober_cell[by_cell], np.arange(cells + 1))

    context = _CellContext(matrix, original, t32)
    sized_items: list[tuple[int, Callable[[], Hits]]] = []
    for cell in range(cells):
        lo, hi = owner_start[cell], owner_start[cell + 1]
        probers = prober_pos[prober_start[cell] : prober_start[cell + 1]]
        for r0 in range(lo, hi, TILE_ROWS):
            r1 = min(r0 + TILE_ROWS, hi)
            for c0 in range(r0, hi, TILE_ROWS):
                c1 = min(c0 + TILE_ROWS, hi)
                sized_items.append(((r1 - r0) * (c1 - c0), context.owner_tile(r0, r1, c0, c1)))
            for p0 in range(0, len(probers), 2 * TILE_ROWS):
                block = probers[p0 : p0 + 2 * TILE_ROWS]
                sized_items.append(((r1 - r0) * len(block), context.prober_tile(r0, r1, block)))
    sized_items.sort(key=lambda sized: -sized[0])  # stable: ties keep their (deterministic) order
    return [item for _, item in sized_items]


@dataclass
class _CellContext:
    matrix: np.ndarray  # the input
    original: np.ndarray  # position in owner order -> input row; a cell's owners are consecutive positions
    t32: np.float32

    def owner_tile(self, r0: int, r1: int, c0: int, c1: int) -> Callable[[], Hits]:
        def run() -> Hits:
            owners = _gather(self.matrix, self.original[r0:r1])
            if c0 == r0:  # the first column tile starts at the row tile: the same rows
                r, c, s = _tile_hits(owners, owners, self.t32, 0)
            else:
                r, c, s = _tile_hits(owners, _gather(self.matrix, self.original[c0:c1]), self.t32)
            return self._as_pairs(self.original[r0 + r], self.original[c0 + c], s)

        return run

    def prober_tile(self, r0: int, r1: int, probers: np.ndarray) -> Callable[[], Hits]:
        def run() -> Hits:
            owners = _gather(self.matrix, self.original[r0:r1])
            r, c, s = _tile_hits(owners, self.matrix[self.original[probers]], self.t32)
            return self._as_pairs(self.original[r0 + r], self.original[probers[c]], s)

        return run

    @staticmethod
    def _as_pairs(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> Hits:
        return np.minimum(a, b), np.maximum(a, b), s
