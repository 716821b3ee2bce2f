"""How well do the contradiction rules separate contradictions from the rest? Measured on SNLI.

    .venv/bin/python bench/contradictions_quality.py [--data-dir DIR] [--no-band] [--examples 3]

SNLI test split: 9,824 human-labelled (premise, hypothesis) pairs, entailment / neutral / contradiction. The
premise is taken as the older memory, the hypothesis as the newer one. For each rule: how often it fires, on
which labels, precision (fired pairs that are contradictions) and recall (contradictions it catches), first over
all pairs, then over the pairs whose cosine lies in the candidate band [0.80, 0.97) (the pairs the pipeline
actually checks), when the sentence embedder (engram_pipelines/vectors/embeddings.py) is installed.

STS Benchmark test split (1,379 pairs, similarity 0-5): pairs scored >= 4 are paraphrases ("mostly" or fully
equivalent), the near-duplicates a memory store is full of; any rule firing on one is a false alarm. Reported:
how often each rule fires on them (all, and in the band).

Vectors come from the cache bench/embeddings_quality.py writes (same key: model name and the exact texts), or
are computed once (about 100 sentences/s here) and cached there. SNLI describes photos ("A man is sleeping" vs
"A man is running"), not an agent's memories: its contradictions are mostly scene changes, few are value swaps
of a stated fact. The numbers say what fires on real sentences, not what the rules were tuned for.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import SHARED_DATA  # noqa: E402
from engram_pipelines.analyses.contradictions.detect import detect
from engram_pipelines.analyses.contradictions.features import memory_features
from engram_pipelines.analyses.contradictions.rules import RULE_ORDER, load_rules

DEFAULT_DATA_DIR = SHARED_DATA  # ENGRAM_QUALITY_DATA, else ../shared/data beside the repository
DEFAULT_CACHE_DIR = Path("/tmp/engram-bench-embeddings")
BAND = (0.80, 0.97)  # SimilarityConfig contradiction_threshold, contradiction_threshold_max
POSITIVE = "contradiction"


@dataclass(frozen=True)
class RuleScore:
    rule: str
    fired: int
    by_label: Counter
    positives: int

    @property
    def precision(self) -> float:
        return self.by_label[POSITIVE] / self.fired if self.fired else float("nan")

    @property
    def recall(self) -> float:
        return self.by_label[POSITIVE] / self.positives if self.positives else float("nan")


def load_snli(data_dir: Path) -> pd.DataFrame:
    # keep_default_na=False as bench/embeddings_quality.py reads it: the same texts give the same cache key.
    return pd.read_csv(data_dir / "snli_test.csv", keep_default_na=False)


def load_stsb(data_dir: Path) -> pd.DataFrame:
    return pd.read_csv(data_dir / "stsb_test.csv")  # as bench/embeddings_quality.py reads it


def detect_pairs(frame: pd.DataFrame, first: str, second: str) -> pd.DataFrame:
    """The rule and reason (or None) for every pair; the `first` sentence older, the `second` newer."""
    rules = load_rules()
    texts = list(dict.fromkeys([*frame[first], *frame[second]]))
    ids = [f"t{i}" for i in range(len(texts))]
    id_of = dict(zip(texts, ids, strict=True))
    started = time.perf_counter()
    features = memory_features(ids, texts, rules)
    parse_seconds = time.perf_counter() - started
    count = len(frame)
    pairs = pa.table(
        {
            "left_id": [id_of[t] for t in frame[first]],
            "right_id": [id_of[t] for t in frame[second]],
            "left_created_at": pa.array(np.zeros(count, dtype="datetime64[us]")),
            "right_created_at": pa.array(np.ones(count, dtype="datetime64[us]")),
            "pair": np.arange(count),
        }
    )
    started = time.perf_counter()
    fired = detect(pairs, features, rules).to_pandas()
    detect_seconds = time.perf_counter() - started
    print(
        f"parsed {len(texts):,} sentences in {parse_seconds:.2f}s, detect on {count:,} pairs in {detect_seconds:.3f}s"
    )
    out = frame.copy()
    out["rule"] = None
    out["reason"] = None
    out.loc[fired["pair"].to_numpy(), "rule"] = fired["rule"].to_numpy()
    out.loc[fired["pair"].to_numpy(), "reason"] = fired["reason"].to_numpy()
    return out


def band_cosines(
    frame: pd.DataFrame, first: str, second: str, dataset: str, cache_dir: Path
) -> np.ndarray | None:
    """Cosine of each pair with the default embedder, or None when it is not installed."""
    try:
        from engram_pipelines.vectors.embeddings import embed_in_batches, load_embedder
    except ImportError as exc:
        print(f"no embedder ({exc}): the band section is skipped")
        return None
    embedder = load_embedder()
    texts = list(dict.fromkeys([*frame[first], *frame[second]]))
    key = hashlib.sha256("\n".join([embedder.name, *texts]).encode()).hexdigest()[:16]
    path = cache_dir / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', embedder.name)}-{dataset}-{key}.npy"
    if path.is_file():
        vectors = np.load(path)
    else:
        print(f"embedding {len(texts):,} sentences (cached afterwards in {path}) ...")
        vectors = embed_in_batches(embedder, texts)
        path.parent.mkdir(parents=True, exist_ok=True)
        np.save(path, vectors)
    index = {text: i for i, text in enumerate(texts)}
    left = vectors[[index[t] for t in frame[first]]]
    right = vectors[[index[t] for t in frame[second]]]
    return np.einsum("ij,ij->i", left, right)


def scores(frame: pd.DataFrame) -> list[RuleScore]:
    positives = int((frame["label"] == POSITIVE).sum())
    result = []
    for rule in [*RULE_ORDER[:-1], "any rule"]:
        chosen = frame[frame["rule"].notna()] if rule == "any rule" else frame[frame["rule"] == rule]
        result.append(RuleScore(rule, len(chosen), Counter(chosen["label"]), positives))
    return result


def print_scores(title: str, frame: pd.DataFrame) -> None:
    labels = Counter(frame["label"])
    print(f"\n### {title}\n")
    print(
        f"{len(frame):,} pairs: {labels[POSITIVE]:,} contradiction, {labels['entailment']:,} entailment, "
        f"{labels['neutral']:,} neutral (base rate {labels[POSITIVE] / max(len(frame), 1):.1%})\n"
    )
    print("| rule | fired | contradiction | entailment | neutral | precision | recall |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for s in scores(frame):
        precision = f"{s.precision:.1%}" if s.fired else "-"
        recall = f"{s.recall:.1%}" if s.positives else "-"
        print(
            f"| {s.rule} | {s.fired:,} | {s.by_label[POSITIVE]:,} | {s.by_label['entailment']:,} | "
            f"{s.by_label['neutral']:,} | {precision} | {recall} |"
        )


def print_false_alarms(title: str, frame: pd.DataFrame) -> None:
    print(f"\n### {title}\n")
    fired = Counter(frame["rule"].dropna())
    total = sum(fired.values())
    print(f"{len(frame):,} pairs; a rule fires on {total:,} ({total / max(len(frame), 1):.1%})\n")
    print("| rule | fired | share of pairs |")
    print("|---|---:|---:|")
    for rule in RULE_ORDER[:-1]:
        print(f"| {rule} | {fired[rule]:,} | {fired[rule] / max(len(frame), 1):.1%} |")


def print_examples(frame: pd.DataFrame, per_rule: int) -> None:
    print("\n### Examples (first fired pairs per rule, gold label in brackets)\n")
    for rule in RULE_ORDER[:-1]:
        chosen = frame[frame["rule"] == rule].head(per_rule)
        for row in chosen.itertuples():
            print(f'- {rule} [{row.label}]: "{row.premise}" -> "{row.hypothesis}" ({row.reason})')


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA_DIR)
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--no-band", action="store_true", help="skip the embedding band section")
    parser.add_argument("--examples", type=int, default=3)
    args = parser.parse_args()

    band = f"[{BAND[0]:.2f}, {BAND[1]:.2f})"
    snli = detect_pairs(load_snli(args.data_dir), "premise", "hypothesis")
    print_scores("SNLI test, all pairs", snli)
    cosine = None if args.no_band else band_cosines(snli, "premise", "hypothesis", "SNLI", args.cache_dir)
    if cosine is not None:
        print_scores(
            f"SNLI test, pairs with cosine in {band}", snli[(cosine >= BAND[0]) & (cosine < BAND[1])]
        )
        print_scores(f"SNLI test, pairs with cosine below {BAND[0]:.2f}", snli[cosine < BAND[0]])

    stsb = detect_pairs(load_stsb(args.data_dir), "sentence1", "sentence2")
    paraphrases = (stsb["score"] >= 4.0).to_numpy()
    print_false_alarms(
        "STS-B test, paraphrases (score >= 4): every firing is a false alarm", stsb[paraphrases]
    )
    cosine = None if args.no_band else band_cosines(stsb, "sentence1", "sentence2", "STS-B", args.cache_dir)
    if cosine is not None:
        in_band = paraphrases & (cosine >= BAND[0]) & (cosine < BAND[1])
        print_false_alarms(f"STS-B test, paraphrases with cosine in {band}", stsb[in_band])
    print_examples(snli, args.examples)


if __name__ == "__main__":
    main()
