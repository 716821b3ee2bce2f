"""Benchmark the content cache's lookup: every key of a night's rows found in the parts earlier nights wrote.

    .venv/bin/python bench/content_cache.py                  # the demo corpus of 1M memories
    .venv/bin/python bench/content_cache.py --rows 200000

The cache is the contradiction step's parsed features (`analyses/contradictions/features.py`), written by the
product's own `computed_by_content` over three nights (90%, 7% and 3% of the demo's distinct contents, so three
parts, as a store's cache holds them after a first night and two nights of writes). Then each night's lookup of
every distinct content, in a random order, is timed three times two ways: `ContentCache.lookup` (the rows
found, made distinct only when a key was found twice) and the simple method, the query that keeps the first row
of each key with a window over every row found. Both must answer the same rows.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing import repeated  # noqa: E402
from engram_pipelines.analyses.contradictions.features import memory_features  # noqa: E402
from engram_pipelines.analyses.contradictions.rules import load_rules  # noqa: E402
from engram_pipelines.core.digests import content_sha_sql  # noqa: E402
from engram_pipelines.core.duck import duck  # noqa: E402
from engram_pipelines.demo.corpus import generate  # noqa: E402
from engram_pipelines.warehouse.content_cache import ContentCache, computed_by_content  # noqa: E402


def windowed(cache: ContentCache, shas: pa.Array) -> pa.Table:
    """The lookup as it was: one row per key kept by a window over every row found."""
    files = [str(f) for f in sorted(cache.directory.glob("*.parquet"))]
    with duck() as con:
        con.register("wanted", pa.table({"sha": shas}))
        return con.sql(
            f"SELECT * FROM read_parquet({files}) c SEMI JOIN wanted w ON w.sha = c.sha "
            "QUALIFY row_number() OVER (PARTITION BY c.sha) = 1"
        ).to_arrow_table()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(
        f"# content cache lookup, {dt.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    started = time.perf_counter()
    contents = pc.unique(generate(args.rows, dim=16).memories["content"])
    order = np.random.default_rng(7).permutation(len(contents))
    print(
        f"{args.rows:,} demo memories, {len(contents):,} distinct contents ({time.perf_counter() - started:.1f} s)"
    )
    rules = load_rules(None)
    with tempfile.TemporaryDirectory(prefix="engram-content-cache-") as work:
        cache = ContentCache(Path(work) / "features")
        bounds = [0, int(len(contents) * 0.90), int(len(contents) * 0.97), len(contents)]
        started = time.perf_counter()
        for night, (low, high) in enumerate(zip(bounds, bounds[1:], strict=False), 1):
            computed_by_content(
                contents.take(pa.array(order[:high])),
                lambda texts: memory_features(texts, texts, rules).drop_columns(["id"]),
                cache,
            )
            print(
                f"night {night}: {high - low:,} contents parsed into the cache ({time.perf_counter() - started:.1f} s)"
            )
        with duck() as con:
            con.register("c", pa.table({"content": contents.take(pa.array(order))}))
            shas = con.sql(f"SELECT {content_sha_sql('content')} AS sha FROM c").to_arrow_table()["sha"]
        shas = shas.combine_chunks()
        ours, found = repeated(lambda: cache.lookup(shas), args.repeats)
        simple, expected = repeated(lambda: windowed(cache, shas), args.repeats)
        if found is None:
            raise SystemExit("the lookup found none of the keys")
        same = found.sort_by("sha").equals(expected.sort_by("sha"))
        if not same or found.num_rows != len(shas):
            raise SystemExit("the two lookups answered different rows")
        parts = len(list(cache.directory.glob("*.parquet")))
        print("| method | keys | parts | seconds (each run) | best |\n|---|---:|---:|---|---:|")
        for name, seconds in (
            ("lookup (made distinct only when needed)", ours),
            ("window over every row", simple),
        ):
            runs = ", ".join(f"{s:.2f}" for s in seconds)
            print(f"| {name} | {len(shas):,} | {parts} | {runs} | {min(seconds):.2f} |")
        print(f"window / lookup: {min(simple) / min(ours):.2f}x (same rows)")


if __name__ == "__main__":
    main()
