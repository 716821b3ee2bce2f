"""Benchmark of the all-pairs similarity engine (engram_pipelines.vectors.similarity) against exact and libraries.

    .venv/bin/python bench/similarity.py --sizes 100000 1000000      # full run: an hour or more at 1M
    .venv/bin/python bench/similarity.py --quick                     # 10k and 30k rows, about a minute
    .venv/bin/python bench/similarity.py --sizes 100000 --kinds uniform --layouts one --methods loop
    .venv/bin/python bench/similarity.py --sizes --real                 # only the real embeddings

Data: synthetic 384-d unit vectors shaped like sentence embeddings, cached in /tmp/engram-similarity-bench.
"clustered": a shared direction (random sentences are not orthogonal), n/300 topics (a few thousand at 1M) of
8 sub-topics each, with per-topic and per-row tightness so that same-sub-topic pairs spread from ~0.4 to ~0.95
and some pairs per row are >= 0.80, plus 5% near-duplicates (>= 0.97). "uniform": the shared direction and
isotropic noise only, plus 2% of rows planted as partners of another row at cosine 0.80-1.0 (the hard case
for cells: no structure to exploit). Namespaces: "one" puts every row in one group; "many" gives each
namespace a run of topics, with Zipf-like sizes, and moves 2.5% of rows to a random other namespace (twins
then straddle namespaces and must not pair). --real adds the MiniLM embeddings of the distinct sentences of
shared/data's STS-B and SNLI test splits (embedded once, cached), exact against the cell join forced on them.

Each method runs in a fresh process (clean timings; peak memory from VmHWM, since ru_maxrss of a process
started by subprocess inherits its parent's high-water mark) and prints seconds, pairs and recall against
exact for: our exact path (exact_cutoff above n), the same with one thread driving BLAS on both cores instead
of two threads with BLAS at one thread each, our engine as configured (cells above 20k rows), faiss IVF-Flat
range search and faiss IVF-SQ8 (candidates re-scored in float32; 100k and below), and the per-row loop (on a
sample of rows, extrapolated: said so in the table). When exact is too costly (one namespace of 1M: ~40 min
at the GEMM peak), recall is measured on a random sample of rows whose pairs are found by brute-force row
queries. The float32 GEMM peak is measured in the same run (start and end: the machine is shared) and our
exact path's effective GFLOP/s is reported as a share of it.

BLAS environment: on some processors this workplace sets OPENBLAS_CORETYPE (and OPENBLAS_L2_SIZE) so old
OpenBLAS builds pick a safe kernel; that slows a current numpy 4-5x. The run prints both variables and the
threadpoolctl report (the kernel in use) first. To measure the machine rather than that setting, unset both
together in that one command (never in tests or CI):
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/similarity.py ...
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.vectors import similarity  # noqa: E402
from engram_pipelines.vectors.similarity import pairs_per_row_loop, similar_pairs  # noqa: E402

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


# --- methods (each run in a fresh process: clean timings and peak memory) ------------------------------------


@dataclass
class Run:
    seconds: float
    pairs: int
    peak_rss_mb: float
    note: str = ""


def _keys(left: np.ndarray, right: np.ndarray, n: int) -> np.ndarray:
    return np.sort(left.astype(np.int64) * n + right.astype(np.int64))


def _run_engine(vectors: np.ndarray, groups: np.ndarray, exact: bool) -> tuple[np.ndarray, str]:
    n = len(vectors)
    started = time.perf_counter()
    result = similar_pairs(vectors, groups, THRESHOLD, exact_cutoff=n + 1 if exact else 20_000)
    seconds = time.perf_counter() - started
    if exact:
        sizes = np.bincount(np.unique(groups, return_inverse=True)[1])
        flops = 2.0 * DIM * float((sizes * (sizes - 1) / 2).sum())
        note = f"{flops / seconds / 1e9:.0f} GFLOP/s effective"
    else:
        cell_groups = [c for c, m in result.method_by_group.items() if m == "cells"]
        probes = [result.probes_by_group[c] for c in cell_groups]
        note = f"{len(cell_groups)} groups by cells" + (
            f" ({min(result.cells_by_group.values())}-{max(result.cells_by_group.values())} cells,"
            f" {min(probes):.2f}-{max(probes):.2f} cells joined per row)"
            if cell_groups
            else ""
        )
    return _keys(result.left, result.right, n), note


def _run_faiss(vectors: np.ndarray, quantizer: str, nprobe: int) -> tuple[np.ndarray, str]:
    """IVF range search, every row a query; SQ8 candidates (radius lowered by the code error) re-scored."""
    import faiss

    n = len(vectors)
    nlist = int(4 * np.sqrt(n))
    coarse = faiss.IndexFlatIP(DIM)
    if quantizer == "flat":
        index = faiss.IndexIVFFlat(coarse, DIM, nlist, faiss.METRIC_INNER_PRODUCT)
        radius = THRESHOLD
    else:
        index = faiss.IndexIVFScalarQuantizer(
            coarse, DIM, nlist, faiss.ScalarQuantizer.QT_8bit, faiss.METRIC_INNER_PRODUCT
        )
        radius = THRESHOLD - 0.02
    rng = np.random.default_rng(0)
    index.train(vectors[rng.choice(n, min(n, 64 * nlist), replace=False)])
    index.add(vectors)
    index.nprobe = nprobe
    lefts, rights = [], []
    for start in range(0, n, 32768):
        queries = vectors[start : start + 32768]
        limits, _, found = index.range_search(queries, np.float32(radius - 1e-6))
        query = start + np.repeat(np.arange(len(queries)), np.diff(limits.astype(np.int64)))
        later = found > query
        query, found = query[later], found[later]
        scores = np.einsum("ij,ij->i", vectors[query], vectors[found])  # float32 re-score (SQ8: exact)
        keep = scores >= np.float32(THRESHOLD)
        lefts.append(query[keep])
        rights.append(found[keep])
    return _keys(np.concatenate(lefts), np.concatenate(rights), n), f"nlist {nlist}, nprobe {nprobe}"


def _run_per_row_loop(vectors: np.ndarray, groups: np.ndarray, sample_rows: int) -> tuple[float, str]:
    """Times the seeds' one-query-per-row loop on a random sample of rows; returns the extrapolated seconds."""
    n = len(vectors)
    if n <= sample_rows:
        started = time.perf_counter()
        pairs_per_row_loop(vectors, groups, THRESHOLD)
        return time.perf_counter() - started, "all rows"
    rng = np.random.default_rng(4)
    codes, inverse = np.unique(groups, return_inverse=True)
    sizes = np.bincount(inverse)
    sampled = np.sort(rng.choice(n, sample_rows, replace=False))
    sample_work, seconds = 0, 0.0
    for code in np.unique(inverse[sampled]):
        members_rows = np.flatnonzero(inverse == code)
        members = vectors[members_rows]
        positions = np.searchsorted(members_rows, sampled[inverse[sampled] == code])
        started = time.perf_counter()
        for position in positions:  # exactly the loop body of pairs_per_row_loop
            sims = members[position + 1 :] @ members[position]
            np.flatnonzero(sims >= np.float32(THRESHOLD))
        seconds += time.perf_counter() - started
        sample_work += int((len(members) - 1 - positions).sum())
    total_work = float((sizes * (sizes - 1) / 2).sum())
    return seconds * total_work / max(sample_work, 1), f"{sample_rows} sampled rows, extrapolated"


def _sampled_truth(vectors: np.ndarray, groups: np.ndarray, rows: int) -> np.ndarray:
    """Keys of every >= threshold pair of a random sample of rows, by brute-force row queries."""
    n = len(vectors)
    rng = np.random.default_rng(5)
    sample = np.sort(rng.choice(n, min(n, rows), replace=False))
    keys = []
    for start in range(0, n, 65536):
        sims = vectors[sample] @ vectors[start : start + 65536].T
        q, o = np.nonzero(sims >= np.float32(THRESHOLD))
        a, b = sample[q], start + o
        same = (groups[a] == groups[b]) & (a != b)
        keys.append(np.minimum(a, b)[same] * n + np.maximum(a, b)[same])
    return np.unique(np.concatenate(keys))


def worker(args: argparse.Namespace) -> None:
    vectors, topic = dataset(args.kind, args.n)
    groups = namespaces_for(topic, args.layout)
    del topic
    keys = None
    started = time.perf_counter()
    if args.worker in ("exact", "engine"):
        keys, note = _run_engine(vectors, groups, exact=args.worker == "exact")
    elif args.worker == "exact-threaded-blas":
        similarity.THREADED_BLAS = True
        keys, note = _run_engine(vectors, groups, exact=True)
    elif args.worker in ("faiss-ivf-flat", "faiss-ivf-sq8"):
        keys, note = _run_faiss(vectors, args.worker.rsplit("-", 1)[1], args.faiss_nprobe)
    elif args.worker == "per-row-loop":
        seconds, note = _run_per_row_loop(vectors, groups, args.loop_sample)
        started = time.perf_counter() - seconds
    elif args.worker == "truth-sample":
        keys, note = _sampled_truth(vectors, groups, args.recall_sample), f"{args.recall_sample} rows"
    else:
        raise SystemExit(f"unknown worker {args.worker}")
    seconds = time.perf_counter() - started
    if keys is not None:
        np.save(args.keys_out, keys)
    peak = _peak_rss_mb()
    print(
        json.dumps(
            {"seconds": seconds, "pairs": 0 if keys is None else len(keys), "peak_rss_mb": peak, "note": note}
        )
    )


def _peak_rss_mb() -> float:
    """This process's peak resident memory. resource.getrusage's ru_maxrss would do, except that a process
    started by subprocess inherits the parent's high-water mark through fork; VmHWM is reset by exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_method(method: str, kind: str, n: int, layout: str, args: argparse.Namespace) -> Run | None:
    keys_out = CACHE / f"keys-{method}-{kind}-{n}-{layout}.npy"
    command = [
        sys.executable,
        __file__,
        "--worker",
        method,
        "--kind",
        kind,
        "--n",
        str(n),
        "--layout",
        layout,
    ]
    command += ["--keys-out", str(keys_out), "--loop-sample", str(args.loop_sample)]
    command += ["--recall-sample", str(args.recall_sample), "--faiss-nprobe", str(args.faiss_nprobe)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        print(f"  {method}: failed\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return Run(**json.loads(done.stdout.strip().splitlines()[-1]))


# --- the machine --------------------------------------------------------------------------------------------


def gemm_peak() -> dict[str, float]:
    """float32 GEMM GFLOP/s at this workload's shapes (d = 384) and a square one, best of three."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8192, DIM), dtype=np.float32)
    square = rng.standard_normal((4096, 4096), dtype=np.float32)

    def best(run: Callable[[], object], flops: float) -> float:
        run()
        times = []
        for _ in range(3):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return flops / min(times) / 1e9

    def two_python_threads() -> None:
        with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda half: half @ half.T, (a[:4096], a[4096:])))

    return {
        "blas_threads_2_8192x384x8192": best(lambda: a @ a.T, 2.0 * 8192 * 8192 * DIM),
        "python_threads_2_blas_1_4096x384x4096": best(two_python_threads, 2 * 2.0 * 4096 * 4096 * DIM),
        "blas_threads_2_square_4096": best(lambda: square @ square, 2.0 * 4096**3),
    }


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown processor"


def blas_report() -> list[dict[str, object]]:
    keep = ("internal_api", "prefix", "version", "architecture", "num_threads", "threading_layer")
    return [{k: lib.get(k) for k in keep} for lib in threadpool_info()]


# --- real embeddings -----------------------------------------------------------------------------------------

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def real_sentences() -> list[str]:
    """The distinct sentences of the STS-B and SNLI test splits (~15k)."""
    texts: list[str] = []
    with open(DATA / "stsb_test.csv", newline="") as f:
        texts += [t for row in csv.DictReader(f) for t in (row["sentence1"], row["sentence2"])]
    with open(DATA / "snli_test.csv", newline="") as f:
        texts += [t for row in csv.DictReader(f) for t in (row["premise"], row["hypothesis"])]
    return sorted({t.strip() for t in texts if t.strip()})


def real_vectors() -> np.ndarray | None:
    """MiniLM vectors of the real sentences, cached in /tmp (embedding runs at ~20-100 sentences/s here)."""
    path = CACHE / "real-minilm.npz"
    if path.exists():
        return np.load(path)["vectors"]
    try:
        from engram_pipelines.vectors.embeddings import MiniLMEmbedder
    except ImportError:
        print("engram_pipelines.vectors.embeddings is not there: no real-embedding run")
        return None
    texts = real_sentences()
    vectors = MiniLMEmbedder().embed(texts)
    np.savez(path, vectors=vectors, texts=np.array(texts))
    return vectors


def real_embeddings(seeds: int = 5) -> list[Row]:
    """Exact vs the cell join forced onto the real vectors (one namespace), over several seeds."""
    vectors = real_vectors()
    if vectors is None:
        return []
    n = len(vectors)
    groups = np.zeros(n, dtype=np.int64)
    started = time.perf_counter()
    exact = similar_pairs(vectors, groups, THRESHOLD, exact_cutoff=n + 1)
    rows = [Row("real MiniLM", n, 1, "exact", time.perf_counter() - started, len(exact), "1 (exact)", 0, "")]
    truth = exact.left * n + exact.right
    for seed in range(seeds):
        started = time.perf_counter()
        cells = similar_pairs(vectors, groups, THRESHOLD, exact_cutoff=1000, seed=seed)
        seconds = time.perf_counter() - started
        recall = np.isin(truth, cells.left * n + cells.right).mean()
        note = f"seed {seed}: {cells.cells_by_group[0]} cells, {cells.probes_by_group[0]:.2f} cells joined per row"
        rows.append(
            Row("real MiniLM", n, 1, "engine (cells forced)", seconds, len(cells), f"{recall:.4f}", 0, note)
        )
    return rows


# --- the table ----------------------------------------------------------------------------------------------


@dataclass
class Row:
    data: str
    n: int
    namespaces: int
    method: str
    seconds: float
    pairs: int
    recall: str
    peak_rss_mb: float
    note: str


def recall_against(keys_path: Path, truth: np.ndarray | None, exact: bool) -> str:
    if truth is None or not keys_path.exists():
        return "-"
    keys = np.load(keys_path)
    found = np.isin(truth, keys, assume_unique=True).mean() if len(truth) else 1.0
    extra = "" if not exact else f", {int((~np.isin(keys, truth, assume_unique=True)).sum())} false"
    return f"{found:.4f}{' (sample)' if not exact else ''}{extra}"


def benchmark(args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    for n in args.sizes:
        for kind in args.kinds:
            vectors, topic = dataset(kind, n)
            for layout in args.layouts:
                groups = namespaces_for(topic, layout)
                sizes = np.bincount(np.unique(groups, return_inverse=True)[1])
                exact_gflop = 2.0 * DIM * float((sizes * (sizes - 1) / 2).sum()) / 1e9
                print(f"{kind} n={n} {layout}: {len(sizes)} namespaces, largest {sizes.max()}", flush=True)
                results: dict[str, Run | None] = {}
                methods = ["engine"]
                methods += ["exact"] if exact_gflop <= args.exact_budget_gflop else []
                if "threaded-blas" in args.methods and exact_gflop <= args.exact_budget_gflop:
                    methods.append("exact-threaded-blas")
                if layout == "one" and "faiss" in args.methods:
                    methods += ["faiss-ivf-flat"] + (["faiss-ivf-sq8"] if n <= 200_000 else [])
                methods += ["per-row-loop"] if "loop" in args.methods else []
                if "exact" not in methods:
                    methods.append("truth-sample")
                for method in methods:
                    results[method] = run_method(method, kind, n, layout, args)
                    got = results[method]
                    print(f"  {method}: {got}", flush=True)
                exact = results.get("exact")
                truth_name = "exact" if exact else "truth-sample"
                truth_path = CACHE / f"keys-{truth_name}-{kind}-{n}-{layout}.npy"
                truth = np.load(truth_path) if truth_path.exists() and results.get(truth_name) else None
                for method, got in results.items():
                    if got is None or method == "truth-sample":
                        continue
                    keys_path = CACHE / f"keys-{method}-{kind}-{n}-{layout}.npy"
                    recall = (
                        "-"
                        if method == "per-row-loop"
                        else recall_against(keys_path, truth, exact is not None)
                    )
                    if method == "per-row-loop":
                        recall = "1 (exact)"
                    rows.append(
                        Row(
                            kind,
                            n,
                            len(sizes),
                            method,
                            got.seconds,
                            got.pairs,
                            recall,
                            got.peak_rss_mb,
                            got.note,
                        )
                    )
                for path in CACHE.glob(f"keys-*-{kind}-{n}-{layout}.npy"):
                    path.unlink()
            del vectors, topic
    return rows


def print_table(rows: list[Row]) -> None:
    print("| data | rows | namespaces | method | seconds | pairs >= 0.80 | recall | peak RSS MB | note |")
    print("|---|---:|---:|---|---:|---:|---|---:|---|")
    for r in rows:
        print(
            f"| {r.data} | {r.n:,} | {r.namespaces:,} | {r.method} | {r.seconds:,.1f} | {f'{r.pairs:,}' if r.pairs else '-'} | {r.recall} |"
            f" {r.peak_rss_mb:,.0f} | {r.note} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--quick", action="store_true", help="sizes 10k and 30k, about a minute")
    parser.add_argument("--kinds", nargs="+", default=["clustered", "uniform"])
    parser.add_argument("--layouts", nargs="+", default=["one", "many"])
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["faiss", "loop", "threaded-blas"],
        help="optional baselines: faiss, loop (the per-row loop), threaded-blas (our exact path on one thread"
        " with BLAS on every core)",
    )
    parser.add_argument("--real", action="store_true", help="also the real MiniLM embeddings of STS-B + SNLI")
    parser.add_argument("--exact-budget-gflop", type=float, default=40_000, help="skip exact above this")
    parser.add_argument("--loop-sample", type=int, default=2000)
    parser.add_argument("--recall-sample", type=int, default=1000)
    parser.add_argument("--faiss-nprobe", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    for hidden in ("--worker", "--kind", "--layout", "--keys-out"):
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.sizes = [10_000, 30_000]
        args.loop_sample = min(args.loop_sample, 500)

    print(f"# similarity benchmark {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} cores, {_cpu_model()}")
    print(
        f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE')} OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE')}"
    )
    for lib in blas_report():
        print(f"threadpoolctl: {lib}")
    print(f"load average at start: {os.getloadavg()}")
    peak = gemm_peak()
    print("float32 GEMM GFLOP/s: " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items()), flush=True)
    rows = benchmark(args)
    if args.real:
        rows += real_embeddings()
    peak_after = gemm_peak()
    print("float32 GEMM GFLOP/s at the end: " + ", ".join(f"{k} {v:.0f}" for k, v in peak_after.items()))
    print(f"load average at end: {os.getloadavg()}")
    best_peak = max(max(peak.values()), max(peak_after.values()))
    for row in rows:
        if row.method.startswith("exact") and "GFLOP/s" in row.note:
            effective = float(row.note.split()[0])
            row.note += f" = {effective / best_peak:.0%} of the {best_peak:.0f} GFLOP/s peak"
    print()
    print_table(rows)
    if args.json:
        args.json.write_text(
            json.dumps({"gemm": [peak, peak_after], "rows": [r.__dict__ for r in rows]}, indent=1)
        )


if __name__ == "__main__":
    main()
