"""Throughput of contradiction detection: pairs/s of `detect` over 1M candidate pairs.

    .venv/bin/python bench/contradictions.py                          # 200k memories, 1M pairs
    .venv/bin/python bench/contradictions.py --memories 20000 --pairs 100000 --naive-sample 5000

Synthetic memories from templates covering every rule (relational, copular and assignment claims, negations,
change words, polar words, numbers, times, dates, elaborations, pronoun subjects, free text), spread over 50
namespaces. Pairs are drawn within a namespace; half of them share a subject (so the claim comparisons and
subset checks run, as they do on cosine-band candidates), half are random.

Timed separately: `memory_features` (once per memory) and `detect` (per pair, features given). The naive
baseline parses both sides of every pair and applies the rules in a Python loop (`memory_row` twice plus
`rule_for_pair`: regexes per pair per rule); it runs on a sample and is extrapolated to the full pair count,
and its answers are compared with `detect` on the same sample (they must agree).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.contradictions import (  # noqa: E402
    detect,
    load_rules,
    memory_features,
    memory_row,
    rule_for_pair,
)

NAMESPACES = 50
T0 = dt.datetime(2026, 1, 1)

PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
THINGS = ["editor", "shell", "database", "queue", "api", "build tool", "ci", "logger", "cache", "dashboard"]
CITIES = ["paris", "berlin", "london", "madrid", "rome", "oslo", "lisbon", "vienna", "prague", "dublin"]
COMPANIES = ["acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka", "tyrell", "cyberdyne"]
TOOLS = ["vim", "emacs", "vscode", "postgres", "mysql", "redis", "kafka", "oauth2", "saml", "grpc", "rest"]
ADJECTIVES = ["enabled", "disabled", "fast", "slow", "stable", "flaky", "public", "private", "green", "red"]
UNITS = ["people", "servers", "replicas", "retries", "days", "tickets"]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]
FREE_TEXT = [
    "Remember to check the logs before deploying",
    "The retrospective notes are in the shared folder",
    "Ask about the migration plan next week",
    "Keep answers short and cite the source",
]


def subject_of(rng: random.Random, group: int) -> str:
    """A subject drawn from a group id: people and things, some with an owner or a project suffix."""
    base = (PEOPLE + THINGS)[group % 20]
    suffix = group // 20
    name = f"{base} {suffix}" if suffix and rng.random() < 0.9 else base
    return rng.choice(["", "the ", "my ", "our "]) + name if base in THINGS else name


def sentence(rng: random.Random, group: int) -> str:
    s = subject_of(rng, group)
    neg = rng.random() < 0.12
    change = rng.random() < 0.10
    kind = rng.randrange(12)
    tool = rng.choice(TOOLS) + (" with plugins" if rng.random() < 0.1 else "")
    if kind == 0:
        verb = "doesn't live in" if neg else ("now lives in" if change else "lives in")
        return f"{s} {verb} {rng.choice(CITIES)}"
    if kind == 1:
        return f"{s} {'no longer works' if neg else 'works'} at {rng.choice(COMPANIES)}"
    if kind == 2:
        return f"{s} {'switched to' if change else ('never uses' if neg else 'uses')} {tool}"
    if kind == 3:
        return f"{s} {'is not' if neg else 'is'} {rng.choice(ADJECTIVES)}"
    if kind == 4:
        return f"{s}: {tool}"
    if kind == 5:
        return f"{s} = {rng.randrange(1, 200)}"
    if kind == 6:
        return f"{s} has {rng.randrange(2, 12)} {rng.choice(UNITS)}"
    if kind == 7:
        return f"{s} standup is at {rng.randrange(7, 12)}{rng.choice(['am', ':30', ':00'])}"
    if kind == 8:
        return f"{s} {'dislikes' if rng.random() < 0.5 else 'likes'} {tool}"
    if kind == 9:
        return f"{s} release is on {rng.choice(WEEKDAYS)}" if rng.random() < 0.5 else (
            f"{s} release date: 2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 10)}"
        )
    if kind == 10:
        return rng.choice(["this is fine", "this is terrible", "it works", "it doesn't work"])
    return rng.choice(FREE_TEXT) + (" now" if change else "")


def synthetic_memories(count: int, seed: int = 7) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """ids, contents, namespace index and subject group per memory."""
    rng = random.Random(seed)
    groups = np.array([rng.randrange(400) for _ in range(count)])
    contents = [sentence(rng, int(g)) for g in groups]
    namespaces = np.array([rng.randrange(NAMESPACES) for _ in range(count)])
    return [f"m{i:07d}" for i in range(count)], contents, namespaces, groups


def synthetic_pairs(namespaces: np.ndarray, groups: np.ndarray, count: int, seed: int = 11) -> np.ndarray:
    """(count, 2) memory indices, both sides in one namespace; the second half also in one subject group."""
    rng = np.random.default_rng(seed)
    halves = []
    for key, size in ((namespaces, count // 2), (namespaces * 1000 + groups, count - count // 2)):
        order = np.argsort(key, kind="stable")
        sorted_key = key[order]
        start = np.searchsorted(sorted_key, sorted_key, side="left")
        span = np.searchsorted(sorted_key, sorted_key, side="right") - start
        eligible = np.flatnonzero(span >= 2)  # sorted positions whose group has a partner
        left = eligible[rng.integers(0, len(eligible), size)]
        # Another member of the same group: a random offset in [1, span) from the left one, wrapped around.
        offset = 1 + rng.integers(0, 1 << 62, size) % (span[left] - 1)
        right = start[left] + (left - start[left] + offset) % span[left]
        halves.append(np.stack([order[left], order[right]], axis=1))
    return np.concatenate(halves)


def pairs_table(index_pairs: np.ndarray, ids: list[str], created: np.ndarray) -> pa.Table:
    id_array = pa.array(ids, pa.string())
    left, right = pa.array(index_pairs[:, 0]), pa.array(index_pairs[:, 1])
    created_array = pa.array(created, pa.timestamp("us"))
    return pa.table(
        {
            "left_id": id_array.take(left),
            "right_id": id_array.take(right),
            "left_created_at": created_array.take(left),
            "right_created_at": created_array.take(right),
        }
    )


def naive_detect(index_pairs: np.ndarray, contents: list[str], created: np.ndarray, rules) -> list:
    """The per-pair baseline: parse both sides and try the rules, in Python, pair by pair."""
    results = []
    for a, b in index_pairs:
        older, newer = (a, b) if created[b] >= created[a] else (b, a)
        results.append(
            rule_for_pair(memory_row(str(older), contents[older], rules), memory_row(str(newer), contents[newer], rules), rules)
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--naive-sample", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3, help="detect runs; the median is reported")
    args = parser.parse_args()

    rules = load_rules()
    ids, contents, namespaces, groups = synthetic_memories(args.memories)
    created = np.datetime64(T0, "us") + np.random.default_rng(3).integers(0, 365 * 86400, len(ids)) * np.timedelta64(
        1, "s"
    )
    index_pairs = synthetic_pairs(namespaces, groups, args.pairs)
    pairs = pairs_table(index_pairs, ids, created)

    started = time.perf_counter()
    features = memory_features(ids, contents, rules)
    features_seconds = time.perf_counter() - started

    timings, result = [], None
    for _ in range(args.repeats):
        started = time.perf_counter()
        result = detect(pairs, features, rules)
        timings.append(time.perf_counter() - started)
    detect_seconds = float(np.median(timings))

    sample = index_pairs[: args.naive_sample]
    started = time.perf_counter()
    naive = naive_detect(sample, contents, created, rules)
    naive_seconds = time.perf_counter() - started
    naive_rate = len(sample) / naive_seconds

    sample_result = detect(pairs.slice(0, len(sample)), features, rules)
    vectorised = {(r["left_id"], r["right_id"]): (r["rule"], r["reason"]) for r in sample_result.to_pylist()}
    disagreements = sum(
        vectorised.get((ids[a], ids[b])) != expected for (a, b), expected in zip(sample, naive, strict=True)
    )

    counts = dict(zip(*np.unique(result["rule"].to_numpy(zero_copy_only=False), return_counts=True), strict=True))
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"memories: {len(ids):,}  pairs: {pairs.num_rows:,}  fired: {result.num_rows:,}")
    print(f"rules fired: {', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))}")
    print()
    print(f"| step | items | seconds | rate |")
    print(f"|---|---:|---:|---:|")
    print(f"| memory_features (once per memory) | {len(ids):,} memories | {features_seconds:.2f} | "
          f"{len(ids) / features_seconds:,.0f} memories/s |")
    print(f"| detect (median of {args.repeats}) | {pairs.num_rows:,} pairs | {detect_seconds:.2f} | "
          f"{pairs.num_rows / detect_seconds:,.0f} pairs/s |")
    print(f"| features + detect | {pairs.num_rows:,} pairs | {features_seconds + detect_seconds:.2f} | "
          f"{pairs.num_rows / (features_seconds + detect_seconds):,.0f} pairs/s |")
    print(f"| naive per-pair loop (measured on {len(sample):,} pairs) | {len(sample):,} pairs | {naive_seconds:.2f} | "
          f"{naive_rate:,.0f} pairs/s |")
    print(f"| naive, extrapolated to {pairs.num_rows:,} pairs | {pairs.num_rows:,} pairs | "
          f"{pairs.num_rows / naive_rate:.0f} | {naive_rate:,.0f} pairs/s |")
    print()
    print(f"speed-up of detect over the naive loop: {pairs.num_rows / detect_seconds / naive_rate:,.0f}x "
          f"(with features: {pairs.num_rows / (features_seconds + detect_seconds) / naive_rate:,.0f}x)")
    print(f"detect vs naive on the {len(sample):,}-pair sample: {disagreements} disagreements")


if __name__ == "__main__":
    main()
