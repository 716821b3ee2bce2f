"""Benchmark of the all-pairs similarity engine (engram_pipelines.similarity) against exact and libraries.

    .venv/bin/python bench/similarity.py --sizes 100000 1000000      # full run: tens of minutes at 1M
    .venv/bin/python bench/similarity.py --quick                     # small sizes, a minute or two

Data: synthetic 384-d unit vectors shaped like sentence embeddings. "clustered": a shared direction (random
sentences are not orthogonal), n/300 topics (a few thousand at 1M) of 8 sub-topics each with per-topic and
per-row tightness, so same-sub-topic pairs spread from ~0.4 to ~0.95 and a realistic few pairs per row are
>= 0.80, plus 5% near-duplicates (>= 0.97). "uniform": the shared direction and isotropic noise only, plus 2%
of rows planted as partners of another row at cosine 0.80-1.0 (the hard case for cells: no structure to
exploit). Namespaces: "one" puts every row in one group; "many" gives each namespace a run of topics, with
Zipf-like sizes (2 to ~10% of the rows), and sends half of the near-duplicates to a random other namespace.

Per configuration it prints seconds, pairs and recall against exact for: our exact path (exact_cutoff above
n), our engine as configured (cells above 20k rows), faiss IVF-Flat range search, faiss IVF-SQ8 (candidates
re-scored in float32), and the per-row loop (on a sample of rows, extrapolated: said so in the table). When
exact is too costly (one namespace of 1M: ~40 min), recall is measured on a random sample of rows whose pairs
are found by brute-force row queries. It also measures this machine's float32 GEMM peak in the same run and
reports our exact path's effective GFLOP/s as a share of it, and the peak resident memory (maxrss).

BLAS environment: on some processors this workplace sets OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) so old
OpenBLAS builds pick a safe kernel; that slows a current numpy 4-5x. The threadpoolctl report at the start
names the kernel in use. To measure the machine rather than that setting, unset both together in that one
command (never in tests or CI):  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/...
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.similarity import PairResult, pairs_per_row_loop, similar_pairs  # noqa: E402

DIM = 384
THRESHOLD = 0.80
CACHE = Path("/tmp/engram-similarity-bench")


# --- data ---------------------------------------------------------------------------------------------------


def _unit(rows: np.ndarray) -> np.ndarray:
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return rows


def _random_directions(rng: np.random.Generator, count: int, dim: int = DIM) -> np.ndarray:
    return _unit(rng.standard_normal((count, dim), dtype=np.float32))


def clustered_vectors(n: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors and each row's topic. See the module docstring for the shape of the data."""
    rng = np.random.default_rng(seed)
    topics = max(4, n // 300)
    subtopics = 8
    shared = _random_directions(rng, 1)[0]
    topic_dirs = _random_directions(rng, topics)
    sub_dirs = _random_directions(rng, topics * subtopics)
    topic_weight = rng.uniform(0.2, 0.5, topics).astype(np.float32)  # squared norms of each component
    sub_weight = rng.uniform(0.1, 0.5, topics).astype(np.float32)
    popularity = 1.0 / np.arange(1, topics + 1) ** 0.7
    topic = rng.choice(topics, n, p=popularity / popularity.sum())
    sub = topic * subtopics + rng.integers(0, subtopics, n)
    noise_weight = rng.uniform(0.05, 0.6, n).astype(np.float32)

    vectors = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 65536):  # in blocks: the noise of 1M rows at once would be another 1.5 GB
        part = slice(start, start + 65536)
        t, s = topic[part], sub[part]
        block = rng.standard_normal((len(t), DIM), dtype=np.float32)
        block *= np.sqrt(noise_weight[part] / DIM)[:, None]
        block += np.sqrt(0.1) * shared
        block += np.sqrt(topic_weight[t])[:, None] * topic_dirs[t]
        block += np.sqrt(sub_weight[t])[:, None] * sub_dirs[s]
        vectors[part] = _unit(block)

    duplicates = rng.choice(n, n // 20, replace=False)
    sources = rng.integers(0, n, len(duplicates))
    noise = rng.standard_normal((len(duplicates), DIM), dtype=np.float32)
    noise *= rng.uniform(0.05, 0.2, len(duplicates)).astype(np.float32)[:, None] / np.sqrt(DIM)
    vectors[duplicates] = _unit(vectors[sources] + noise)
    topic[duplicates] = topic[sources]
    return vectors, topic


def uniform_vectors(n: int, seed: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """Near-uniform unit vectors (a weak shared direction) with 2% of rows planted at cosine 0.80-1.0."""
    rng = np.random.default_rng(seed)
    shared = _random_directions(rng, 1)[0]
    vectors = np.empty((n, DIM), dtype=np.float32)
    for start in range(0, n, 65536):
        block = rng.standard_normal((min(65536, n - start), DIM), dtype=np.float32) / np.sqrt(DIM)
        block *= np.sqrt(0.9)
        block += np.sqrt(0.1) * shared
        vectors[start : start + len(block)] = _unit(block)
    partners = rng.choice(n, n // 50, replace=False)
    sources = rng.integers(0, n, len(partners))
    cosine = rng.uniform(0.80, 1.0, len(partners)).astype(np.float32)
    away = rng.standard_normal((len(partners), DIM), dtype=np.float32)
    away -= (away * vectors[sources]).sum(axis=1, keepdims=True) * vectors[sources]  # orthogonal to source
    away = _unit(away)
    vectors[partners] = _unit(cosine[:, None] * vectors[sources] + np.sqrt(1 - cosine**2)[:, None] * away)
    return vectors, rng.integers(0, max(4, n // 300), n)  # "topics" only to lay out namespaces


def namespaces_for(topic: np.ndarray, layout: str, seed: int = 3) -> np.ndarray:
    """Group codes: all zero ("one"), or runs of topics per namespace with Zipf-like sizes ("many")."""
    if layout == "one":
        return np.zeros(len(topic), dtype=np.int64)
    rng = np.random.default_rng(seed)
    topics = int(topic.max()) + 1
    namespace_count = max(2, topics // 3)
    weights = 1.0 / np.arange(1, namespace_count + 1) ** 1.2
    topics_per_namespace = np.maximum(1, np.round(weights / weights.sum() * topics)).astype(int)
    namespace_of_topic = np.repeat(np.arange(namespace_count), topics_per_namespace)[:topics]
    namespace_of_topic = np.pad(namespace_of_topic, (0, topics - len(namespace_of_topic)), mode="edge")
    namespace_of_topic = rng.permutation(namespace_of_topic)
    groups = namespace_of_topic[topic].astype(np.int64)
    strays = rng.choice(len(topic), len(topic) // 40, replace=False)  # near-duplicates in other namespaces
    groups[strays] = rng.integers(0, namespace_count, len(strays))
    return groups


def dataset(kind: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Cached in /tmp: generating 1M rows takes longer than some of the joins."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{kind}-{n}.npz"
    if path.exists():
        data = np.load(path)
        return data["vectors"], data["topic"]
    vectors, topic = (clustered_vectors if kind == "clustered" else uniform_vectors)(n)
    np.savez(path, vectors=vectors, topic=topic)
    return vectors, topic
