"""Benchmark decay scoring: N rows from Parquet with DuckDB, next to a per-row Python loop over a sample.

    .venv/bin/python bench/decay.py                 # 10M rows (generates /tmp/engram-decay-bench.parquet once)
    .venv/bin/python bench/decay.py --rows 1000000

Both methods compute the `engram` policy (seed 000) as of the same instant; the loop is the shape of the seeds'
services (one score per row in Python). Their scores are compared on the sample, so the speed-up is for the
same answer. Rows/s for both; the aim is >= 5M rows/s for the DuckDB path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import resource
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.config import Config  # noqa: E402
from engram_pipelines.decay import decay_scores  # noqa: E402
from engram_pipelines.records import TIMESTAMP  # noqa: E402

AS_OF = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)
CONTENTS = np.array(
    [
        "User prefers dark mode in the editor",
        "We decided to move the API to OAuth2",
        "Incident: the nightly import failed with an error",
        "Release 2.3 ships on Friday, deadline is firm",
        "The team meets on Tuesdays",
        "Alice lives in Berlin",
        "Bug in the retry loop of the uploader",
        "Standup is at 9am",
    ]
)


def generate(path: Path, rows: int, seed: int = 1) -> None:
    rng = np.random.default_rng(seed)
    chunk = 1_000_000
    schema = pa.schema(
        [
            ("id", pa.string()),
            ("namespace", pa.string()),
            ("kind", pa.string()),
            ("content", pa.string()),
            ("importance", pa.float64()),
            ("score", pa.float64()),
            ("access_count", pa.int64()),
            ("last_accessed_at", TIMESTAMP),
            ("created_at", TIMESTAMP),
            ("pinned", pa.bool_()),
            ("stale", pa.bool_()),
            ("tags", pa.string()),
        ]
    )
    base = int(AS_OF.timestamp() * 1e6)
    with pq.ParquetWriter(path, schema) as writer:
        for start in range(0, rows, chunk):
            n = min(chunk, rows - start)
            created = base - rng.integers(0, 200 * 86_400_000_000, n)
            has_access = rng.random(n) < 0.6
            accessed = np.where(has_access, created + (base - created) * rng.random(n), 0).astype(np.int64)
            writer.write_table(
                pa.table(
                    {
                        "id": pa.array([f"m{start + i:09d}" for i in range(n)]),
                        "namespace": pa.array(np.char.add("ns", (rng.integers(0, 100, n)).astype(str))),
                        "kind": pa.array(np.where(rng.random(n) < 0.01, "block", "episodic")),
                        "content": pa.array(CONTENTS[rng.integers(0, len(CONTENTS), n)]),
                        "importance": pa.array(rng.random(n)),
                        "score": pa.nulls(n, pa.float64()),
                        "access_count": pa.array(np.where(has_access, rng.integers(1, 30, n), 0)),
                        "last_accessed_at": pa.array(accessed, type=pa.int64(), mask=~has_access).cast(
                            TIMESTAMP
                        ),
                        "created_at": pa.array(created, type=pa.int64()).cast(TIMESTAMP),
                        "pinned": pa.array(rng.random(n) < 0.02),
                        "stale": pa.array(rng.random(n) < 0.5),
                        "tags": pa.array(np.where(rng.random(n) < 0.1, '["critical"]', "[]")),
                    },
                    schema=schema,
                )
            )


def loop_score(row: dict, config: Config) -> float | None:
    """The per-row method: the engram policy in plain Python, one row at a time."""
    p = config.decay.engram
    if row["kind"] == "block":
        return None
    last = row["last_accessed_at"] or row["created_at"]
    age = max(0.0, (AS_OF - last).total_seconds() / 86400)
    recency = 1.0 if row["pinned"] else math.exp(-math.log(2) * age / p.half_life_days)
    text = row["content"].lower()
    cues = 0.0
    for rule in p.cues:
        if any(f" {w}" in f" {text}" for w in rule.words):
            cues += rule.weight
    tags = row["tags"]
    tag_cue = p.cue_tag_weight if any(f'"{t}"' in tags for t in p.cue_tags) else 0.0
    boost = min(p.access_boost_cap, p.access_boost_per_log2 * math.log2(row["access_count"] + 1))
    raw = (p.base + boost + cues + tag_cue + (p.pin_boost if row["pinned"] else 0.0)) * recency
    score = min(1.0, max(0.0, raw))
    return max(p.pinned_floor, score) if row["pinned"] else score


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--sample", type=int, default=200_000)
    parser.add_argument("--path", type=Path, default=Path("/tmp/engram-decay-bench.parquet"))
    args = parser.parse_args()
    config = Config()
    if not args.path.exists() or pq.ParquetFile(args.path).metadata.num_rows != args.rows:
        started = time.perf_counter()
        generate(args.path, args.rows)
        print(f"generated {args.rows:,} rows in {time.perf_counter() - started:.1f}s -> {args.path}")

    started = time.perf_counter()
    table = pq.read_table(args.path)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    scores = decay_scores(table, config, AS_OF)
    score_s = time.perf_counter() - started

    sample = table.slice(0, args.sample).to_pylist()
    started = time.perf_counter()
    loop = [loop_score(row, config) for row in sample]
    loop_s = time.perf_counter() - started
    ours = dict(
        zip(
            scores["id"].to_pylist()[: args.sample * 2],
            scores["score"].to_pylist()[: args.sample * 2],
            strict=True,
        )
    )
    diffs = [abs(ours[r["id"]] - s) for r, s in zip(sample, loop, strict=True) if s is not None]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"# decay benchmark, {dt.date.today()}, {platform.machine()}, {args.rows:,} rows")
    print("| method | rows | seconds | rows/s |")
    print("|---|---|---|---|")
    print(f"| Parquet read (pyarrow) | {args.rows:,} | {read_s:.2f} | {args.rows / read_s:,.0f} |")
    print(
        f"| DuckDB decay_scores (engram policy) | {args.rows:,} | {score_s:.2f} | {args.rows / score_s:,.0f} |"
    )
    print(
        f"| read + score | {args.rows:,} | {read_s + score_s:.2f} | {args.rows / (read_s + score_s):,.0f} |"
    )
    print(f"| per-row Python loop (sample) | {len(sample):,} | {loop_s:.2f} | {len(sample) / loop_s:,.0f} |")
    print(
        f"\nspeed-up of DuckDB over the loop: {(args.rows / score_s) / (len(sample) / loop_s):.0f}x; "
        f"max |score difference| on the sample: {max(diffs):.2e}; peak RSS {peak_mb:,.0f} MB"
    )


if __name__ == "__main__":
    main()
