"""Throughput of contradiction detection: pairs/s of `detect` over 1M candidate pairs.

    .venv/bin/python bench/contradictions.py                          # 200k memories, 1M pairs
    .venv/bin/python bench/contradictions.py --memories 20000 --pairs 100000 --naive-sample 5000

Synthetic memories from templates covering every rule (relational, copular and assignment claims, negations,
change words, polar words, numbers, times, dates, elaborations, pronoun subjects, free text), spread over 50
namespaces. Pairs are drawn within a namespace; half of them share a subject (so the claim comparisons and
subset checks run, as they do on cosine-band candidates), half are random.

Timed separately: `memory_features` (once per memory) and `detect` (per pair, features given). Two per-pair
loops run on a sample (20k pairs) and are extrapolated to the full pair count, as the table says:
- the naive baseline, what a per-pair service does: for each pair, each rule runs its own regexes on both texts
  (it approximates the guards, so its answers are compared as an agreement rate);
- the reference: parse both sides with `memory_row`, then `rule_for_pair`; its answers must equal `detect`'s
  on every pair of the sample (the count of disagreements is printed, and must be 0).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import random
import re
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.analyses.contradictions.detect import detect  # noqa: E402
from engram_pipelines.analyses.contradictions.features import (  # noqa: E402
    clean_value,
    memory_features,
    memory_row,
    normalise,
    tokens_of,
)
from engram_pipelines.analyses.contradictions.reference import rule_for_pair  # noqa: E402
from engram_pipelines.analyses.contradictions.rules import (  # noqa: E402
    CHANGE,
    COPULA,
    NEGATION,
    STRONG_RELATION,
    WEAK_RELATION,
    RuleBook,
    load_rules,
)

NAMESPACES = 50
T0 = dt.datetime(2026, 1, 1)

PEOPLE = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy"]
THINGS = ["editor", "shell", "database", "queue", "api", "build tool", "ci", "logger", "cache", "dashboard"]
CITIES = ["paris", "berlin", "london", "madrid", "rome", "oslo", "lisbon", "vienna", "prague", "dublin"]
COMPANIES = [
    "acme",
    "globex",
    "initech",
    "umbrella",
    "hooli",
    "stark",
    "wayne",
    "wonka",
    "tyrell",
    "cyberdyne",
]
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
        return (
            f"{s} release is on {rng.choice(WEEKDAYS)}"
            if rng.random() < 0.5
            else (f"{s} release date: 2026-0{rng.randrange(1, 10)}-1{rng.randrange(0, 10)}")
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


def _alternation(phrases: set[str]) -> str:
    return "|".join(re.escape(p) for p in sorted(phrases, key=len, reverse=True))


def _word_regex(phrases: set[str]) -> str:
    return r"\b(?:" + _alternation(phrases) + r")\b"


class RegexPerRule:
    """The naive baseline: what a per-pair service does. For every pair, each rule runs its own regexes on
    both texts (negation, change, one pattern per polar pair, the claim patterns, the quantity pattern).
    Same word lists as the rule book; its guards and rules follow `rule_for_pair` closely but not to the
    letter, so its answers are compared with `detect` as an agreement rate, not as a correctness check."""

    def __init__(self, rules: RuleBook) -> None:
        self.rules = rules
        phrases: dict[str, set[str]] = {}
        for entries in rules.cues.by_first.values():
            for phrase, category in entries:
                phrases.setdefault(category, set()).add(" ".join(phrase))
        self.negation = re.compile(_word_regex(phrases.get(NEGATION, set())) + r"|\b\w+n't\b")
        self.change = re.compile(_word_regex(phrases.get(CHANGE, set())))
        claim = r"^(?P<subject>.+?)\s+(?P<op>{})\s+(?P<value>.+)$"
        self.claims = [
            (re.compile(claim.format(_alternation(phrases[c]))), c)
            for c in (STRONG_RELATION, WEAK_RELATION, COPULA)
            if phrases.get(c)
        ]
        forms: dict[tuple[int, int], set[str]] = {}
        for form, labels in rules.pole_labels_of_form.items():
            for label in labels:
                for pair_side in rules.poles_of_label[label]:
                    forms.setdefault(pair_side, set()).add(form)
        self.polar = [
            (re.compile(_word_regex(forms[(k, 0)])), re.compile(_word_regex(forms[(k, 1)])))
            for k in range(rules.polar_pair_count)
        ]

    def claim(self, text: str) -> tuple[str, str, str] | None:
        for pattern, category in self.claims:
            match = pattern.match(text)
            if match:
                subject = " ".join(t for t in tokens_of(match["subject"]) if t not in self.rules.possessives)
                value = clean_value(match["value"], self.rules)
                relation = (
                    "is" if category == COPULA else self.rules.relation_of_form[tuple(match["op"].split())]
                )
                if subject and value:
                    return subject, relation, value
        return None

    def quantities(self, text: str) -> tuple[str, list[str]]:
        found: list[str] = []
        template = self.rules.quantity.sub(lambda m: found.append(m.group(0)) or "#", text)
        return template, found

    def pair(self, older_text: str, newer_text: str) -> str | None:
        older, newer = normalise(older_text), normalise(newer_text)
        neg_o, neg_n = self.negation.search(older), self.negation.search(newer)
        change_o, change_n = self.change.search(older), self.change.search(newer)
        if (neg_o and neg_n) or (change_o and change_n):
            return None
        claim_o, claim_n = self.claim(older), self.claim(newer)
        if any(c and c[0] in self.rules.pronouns for c in (claim_o, claim_n)):
            return None
        same = bool(claim_o and claim_n and claim_o[:2] == claim_n[:2])
        if claim_o and claim_n and not same:
            return None
        if bool(neg_o) != bool(neg_n):
            return "negation"
        if change_n and not (same and claim_o[2] == claim_n[2]):
            return "change"
        for first, second in self.polar:
            if (first.search(older) and second.search(newer)) or (
                second.search(older) and first.search(newer)
            ):
                return "polar"
        template_o, numbers_o = self.quantities(claim_o[2] if claim_o else older)
        template_n, numbers_n = self.quantities(claim_n[2] if claim_n else newer)
        if same and claim_o[2] != claim_n[2] and not (numbers_o and template_o == template_n):
            return "value_swap"
        if numbers_o and template_o == template_n and numbers_o != numbers_n:
            return "numeric"
        return None


def naive_detect(
    index_pairs: np.ndarray, contents: list[str], created: np.ndarray, naive: RegexPerRule
) -> list:
    results = []
    for a, b in index_pairs:
        older, newer = (a, b) if created[b] >= created[a] else (b, a)
        results.append(naive.pair(contents[older], contents[newer]))
    return results


def reference_detect(
    index_pairs: np.ndarray, contents: list[str], created: np.ndarray, rules: RuleBook
) -> list:
    """`rule_for_pair` after parsing both sides, pair by pair: the same answers as `detect`, one at a time."""
    results = []
    for a, b in index_pairs:
        older, newer = (a, b) if created[b] >= created[a] else (b, a)
        older_row = memory_row(str(older), contents[older], rules)
        results.append(rule_for_pair(older_row, memory_row(str(newer), contents[newer], rules), rules))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--memories", type=int, default=200_000)
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--naive-sample", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3, help="detect runs; the median is reported")
    args = parser.parse_args()

    rules = load_rules()
    ids, contents, namespaces, groups = synthetic_memories(args.memories)
    created = np.datetime64(T0, "us") + np.random.default_rng(3).integers(
        0, 365 * 86400, len(ids)
    ) * np.timedelta64(1, "s")
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
    naive = naive_detect(sample, contents, created, RegexPerRule(rules))
    naive_rate = len(sample) / (time.perf_counter() - started)
    started = time.perf_counter()
    reference = reference_detect(sample, contents, created, rules)
    reference_rate = len(sample) / (time.perf_counter() - started)

    sample_result = detect(pairs.slice(0, len(sample)), features, rules)
    vectorised = {(r["left_id"], r["right_id"]): (r["rule"], r["reason"]) for r in sample_result.to_pylist()}
    keys = [(ids[a], ids[b]) for a, b in sample]
    reference_disagreements = sum(
        vectorised.get(k) != expected for k, expected in zip(keys, reference, strict=True)
    )
    naive_agreement = np.mean(
        [(vectorised[k][0] if k in vectorised else None) == got for k, got in zip(keys, naive, strict=True)]
    )

    pair_count = pairs.num_rows
    rows = [
        (
            "memory_features (once per memory)",
            f"{len(ids):,} memories",
            features_seconds,
            f"{len(ids) / features_seconds:,.0f} memories/s",
        ),
        (
            f"detect, features given (median of {args.repeats})",
            f"{pair_count:,} pairs",
            detect_seconds,
            f"{pair_count / detect_seconds:,.0f} pairs/s",
        ),
        (
            "memory_features + detect",
            f"{pair_count:,} pairs",
            features_seconds + detect_seconds,
            f"{pair_count / (features_seconds + detect_seconds):,.0f} pairs/s",
        ),
        (
            f"naive: regexes per pair per rule ({len(sample):,}-pair sample, extrapolated)",
            f"{pair_count:,} pairs",
            pair_count / naive_rate,
            f"{naive_rate:,.0f} pairs/s",
        ),
        (
            f"per-pair reference: parse both sides + rule_for_pair ({len(sample):,}-pair sample, extrapolated)",
            f"{pair_count:,} pairs",
            pair_count / reference_rate,
            f"{reference_rate:,.0f} pairs/s",
        ),
    ]
    counts = dict(
        zip(*np.unique(result["rule"].to_numpy(zero_copy_only=False), return_counts=True), strict=True)
    )
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"memories: {len(ids):,}  pairs: {pair_count:,}  fired: {result.num_rows:,} "
        f"({', '.join(f'{k} {v:,}' for k, v in sorted(counts.items()))})"
    )
    print()
    print("| step | work | seconds | rate |")
    print("|---|---:|---:|---:|")
    for name, work, seconds, rate in rows:
        print(f"| {name} | {work} | {seconds:.2f} | {rate} |")
    print()
    print(
        f"detect vs the naive loop: {pair_count / detect_seconds / naive_rate:,.0f}x faster "
        f"({pair_count / (features_seconds + detect_seconds) / naive_rate:,.0f}x counting memory_features)"
    )
    print(
        f"on the sample: detect vs per-pair reference {reference_disagreements} disagreements (must be 0); "
        f"naive regex loop agrees on {naive_agreement:.1%} of pairs (it approximates the guards)"
    )


if __name__ == "__main__":
    main()
