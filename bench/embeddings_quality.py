"""How good and how fast is the configured sentence embedder? Measured on real labelled sentence pairs.

    .venv/bin/python bench/embeddings_quality.py [--spec minilm] [--data-dir DIR] [--no-cache]

- STS Benchmark test split (1,379 pairs, gold similarity 0-5): Spearman correlation of cosine with the gold
  score, and the merge band as a classifier: precision and recall of "cosine >= 0.85" for "gold >= 4" (pairs a
  person calls mostly or fully equivalent).
- SNLI test split (9,824 pairs labelled entailment / neutral / contradiction): the cosine distribution per label,
  and how many contradictions land in the contradiction-candidate band [0.80, 0.97).
- Throughput in sentences/s, timed afresh on every run (the quality numbers reuse cached vectors).
- A scikit-learn TF-IDF baseline in the same run (Spearman only: its cosines live on another scale, so the
  thresholds of neural embeddings mean nothing for it).

The data are third-party test splits kept outside the package (see the README beside them).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from sklearn.feature_extraction.text import TfidfVectorizer

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import SHARED_DATA  # noqa: E402
from engram_pipelines.core.progress import BarProgress  # noqa: E402
from engram_pipelines.vectors.embeddings import Embedder, embed_in_batches, load_embedder  # noqa: E402

DEFAULT_DATA_DIR = SHARED_DATA  # ENGRAM_QUALITY_DATA, else ../shared/data beside the repository
DEFAULT_CACHE_DIR = Path("/tmp/engram-bench-embeddings")

# The bands of the similarity config (engram_pipelines/config/model.py SimilarityConfig defaults).
MERGE_THRESHOLD = 0.85
DUPLICATE_THRESHOLD = 0.97
CONTRADICTION_BAND = (0.80, 0.97)
# STS-B: 4 = "mostly equivalent", 5 = "completely equivalent": the pairs a merge should catch.
EQUIVALENT_SCORE = 4.0
THROUGHPUT_SAMPLE = 512


@dataclass
class Row:
    label: str
    value: str


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    stsb = pd.read_csv(args.data_dir / "stsb_test.csv")
    snli = pd.read_csv(args.data_dir / "snli_test.csv", keep_default_na=False)

    load_seconds, embedder = _timed_load(args.spec)
    cache = None if args.no_cache else args.cache_dir
    rows = [Row("embedder", f"{embedder.name} ({embedder.dim}-d), loaded in {load_seconds:.2f} s")]
    rows += _throughput(embedder, stsb)
    rows += _stsb_rows(embedder, stsb, cache)
    rows += _snli_rows(embedder, snli, cache)
    rows += _tfidf_rows(stsb)
    _print_table(rows)
    return 0


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spec", default=None, help="embedder spec: 'minilm' (default), 'minilm-l3' or 'module:attribute'"
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--no-cache", action="store_true", help="recompute every vector")
    return parser.parse_args(argv)


def _timed_load(spec: str | None) -> tuple[float, Embedder]:
    """Construct the embedder and embed one text: lazy embedders load their files on first use."""
    started = time.perf_counter()
    embedder = load_embedder(spec)
    embedder.embed(["warm-up"])
    return time.perf_counter() - started, embedder


# -- measurements ---------------------------------------------------------------------------------------------


def _throughput(embedder: Embedder, stsb: pd.DataFrame) -> list[Row]:
    sample = _unique(list(stsb["sentence1"]) + list(stsb["sentence2"]))[:THROUGHPUT_SAMPLE]
    started = time.perf_counter()
    embed_in_batches(embedder, sample)
    rate = len(sample) / (time.perf_counter() - started)
    return [
        Row("throughput", f"{rate:,.0f} sentences/s ({len(sample)} STS-B sentences, {os.cpu_count()} cores)")
    ]


def _stsb_rows(embedder: Embedder, stsb: pd.DataFrame, cache: Path | None) -> list[Row]:
    cosine = _pair_cosines(embedder, stsb["sentence1"], stsb["sentence2"], cache, "STS-B")
    gold = stsb["score"].to_numpy()
    equivalent = gold >= EQUIVALENT_SCORE
    merged = cosine >= MERGE_THRESHOLD
    hits = int((merged & equivalent).sum())
    below, band, above = _band_shares(cosine[equivalent])
    return [
        Row(
            "STS-B Spearman (cosine vs gold)", f"{spearmanr(cosine, gold).statistic:.3f} ({len(stsb)} pairs)"
        ),
        Row(
            f"STS-B merge band: cosine >= {MERGE_THRESHOLD} for gold >= {EQUIVALENT_SCORE:g}",
            f"precision {_ratio(hits, merged.sum())}, recall {_ratio(hits, equivalent.sum())}",
        ),
        Row(
            f"STS-B gold >= {EQUIVALENT_SCORE:g}: cosine < {MERGE_THRESHOLD} / band / >= {DUPLICATE_THRESHOLD}",
            f"{below:.0%} / {band:.0%} / {above:.0%} (median {np.median(cosine[equivalent]):.2f})",
        ),
    ]


def _snli_rows(embedder: Embedder, snli: pd.DataFrame, cache: Path | None) -> list[Row]:
    cosine = _pair_cosines(embedder, snli["premise"], snli["hypothesis"], cache, "SNLI")
    rows = []
    low, high = CONTRADICTION_BAND
    for label in ("entailment", "neutral", "contradiction"):
        values = cosine[(snli["label"] == label).to_numpy()]
        p10, median, p90 = np.percentile(values, [10, 50, 90])
        in_band = ((values >= low) & (values < high)).mean()
        rows.append(
            Row(
                f"SNLI {label} cosine p10 / median / p90; in [{low}, {high})",
                f"{p10:.2f} / {median:.2f} / {p90:.2f}; {in_band:.1%} (n={len(values)})",
            )
        )
    return rows


def _tfidf_rows(stsb: pd.DataFrame) -> list[Row]:
    """Word TF-IDF fitted on the test sentences themselves (the most it can know), cosine of sparse rows."""
    first, second = list(stsb["sentence1"]), list(stsb["sentence2"])
    started = time.perf_counter()
    vectorizer = TfidfVectorizer().fit(first + second)
    left, right = vectorizer.transform(first), vectorizer.transform(second)  # rows are L2-normalised
    cosine = np.asarray(left.multiply(right).sum(axis=1)).ravel()
    rate = 2 * len(stsb) / (time.perf_counter() - started)
    spearman = spearmanr(cosine, stsb["score"]).statistic
    return [Row("baseline: scikit-learn TF-IDF, STS-B Spearman", f"{spearman:.3f} ({rate:,.0f} sentences/s)")]


def _pair_cosines(
    embedder: Embedder, first: pd.Series, second: pd.Series, cache: Path | None, dataset: str
) -> np.ndarray:
    """Cosine of each pair; every distinct sentence is embedded once (SNLI repeats each premise three times)."""
    texts = _unique(list(first) + list(second))
    vectors = _cached_vectors(embedder, texts, cache, dataset)
    index = {text: i for i, text in enumerate(texts)}
    left = vectors[[index[text] for text in first]]
    right = vectors[[index[text] for text in second]]
    return np.einsum("ij,ij->i", left, right)


def _cached_vectors(embedder: Embedder, texts: list[str], cache: Path | None, dataset: str) -> np.ndarray:
    # Keyed by model name and the exact texts, so a different model or data set never reuses stale vectors.
    key = hashlib.sha256("\n".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = cache / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', embedder.name)}-{dataset}-{key}.npy" if cache else None
    if path is not None and path.is_file():
        return np.load(path)
    progress = BarProgress()
    vectors = embed_in_batches(embedder, texts, progress=progress)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    return vectors


# -- helpers --------------------------------------------------------------------------------------------------


def _unique(texts: list[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def _band_shares(cosine: np.ndarray) -> tuple[float, float, float]:
    below = (cosine < MERGE_THRESHOLD).mean()
    above = (cosine >= DUPLICATE_THRESHOLD).mean()
    return below, 1.0 - below - above, above


def _ratio(numerator: int, denominator: int) -> str:
    return f"{numerator / denominator:.3f} ({numerator}/{denominator})" if denominator else "n/a (0 pairs)"


def _print_table(rows: list[Row]) -> None:
    width = max(len(row.label) for row in rows)
    print(f"| {'measure':<{width}} | value |")
    print(f"|{'-' * (width + 2)}|-------|")
    for row in rows:
        print(f"| {row.label:<{width}} | {row.value} |")


if __name__ == "__main__":
    sys.exit(main())
