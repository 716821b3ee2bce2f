"""The similarity engine's k-means cells: its own spherical k-means against scikit-learn's KMeans, same sample.

The engine trains about sqrt(rows) cells on 32 sampled rows per cell, 8 Lloyd iterations (vectors/similarity.py).
This prints, for the cell counts of a 100k and a 1M namespace, the seconds of each and the objective the cells
serve (the mean cosine of a row to its own cell's centroid: higher is better), on clustered unit vectors like
bench/similarity.py's. scikit-learn's KMeans is Euclidean; on unit vectors its centroids are normalised after.

    .venv/bin/python bench/cells.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.vectors.similarity import (  # noqa: E402
    _KMEANS_ITERATIONS,
    _TRAIN_ROWS_PER_CELL,
    _nearest,
    _train_centroids,
)


def clustered(rows: int, dim: int, clusters: int, rng: np.random.Generator) -> np.ndarray:
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    vectors = centres[rng.integers(0, clusters, rows)] + 0.6 * rng.standard_normal((rows, dim)).astype(
        np.float32
    )
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def objective(vectors: np.ndarray, centroids: np.ndarray) -> float:
    _, best = _nearest(vectors, centroids)
    return float(best.mean())


def sklearn_cells(sample: np.ndarray, cells: int, seed: int) -> np.ndarray:
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=cells, init="random", n_init=1, max_iter=_KMEANS_ITERATIONS, random_state=seed)
    centroids = model.fit(sample).cluster_centers_.astype(np.float32)
    return centroids / np.maximum(np.linalg.norm(centroids, axis=1, keepdims=True), 1e-12)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        "| namespace rows | cells | training rows | ours s | scikit-learn s | ours objective | scikit-learn objective |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for rows in (100_000, 1_000_000):
        cells = round(np.sqrt(rows))
        rng = np.random.default_rng(7)
        sample = clustered(cells * _TRAIN_ROWS_PER_CELL, 384, 2_000, rng)
        ours, theirs = [], []
        for attempt in range(args.repeat):
            started = time.perf_counter()
            centroids, _ = _train_centroids(sample, cells, np.random.default_rng(attempt))
            ours.append((time.perf_counter() - started, objective(sample, centroids)))
            started = time.perf_counter()
            other = sklearn_cells(sample, cells, attempt)
            theirs.append((time.perf_counter() - started, objective(sample, other)))
        o, t = min(ours), min(theirs)
        print(
            f"| {rows:,} | {cells:,} | {len(sample):,} | {o[0]:.2f} | {t[0]:.2f} | "
            f"{np.mean([x[1] for x in ours]):.4f} | {np.mean([x[1] for x in theirs]):.4f} |"
        )


if __name__ == "__main__":
    main()
