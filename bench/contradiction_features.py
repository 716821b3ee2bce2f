"""Benchmark the contradiction step's reading of parsed features: `find_contradictions` over a night's rows and
pairs, against the simple method, which reads every feature of every row before the candidates are found.

    .venv/bin/python bench/contradiction_features.py --size 200000       # a demo store made for the run
    .venv/bin/python bench/contradiction_features.py --warehouse data/warehouse --as-of 2026-12-07

The input is what a night wrote: a warehouse's memories and similarity pairs of one as-of date, and its
contradiction features cache. Without `--warehouse`, `engram-pipelines demo --size N` makes one (the demo store
and its first night) in a temporary directory. The cache is copied to a temporary directory first, so the
warehouse is only read. Each method runs `--repeats` times, alternating; both must give the same
contradictions, intents and candidate counts.

The product looks up every row's claim (the 8 features the structural join reads) and every feature only of
the rows in a candidate pair; the simple method looks up all 28 features of every row, as the step did until
2026-12-07.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engram_pipelines.analyses.contradictions import policy  # noqa: E402
from engram_pipelines.analyses.contradictions.features import (  # noqa: E402
    FEATURES_VERSION,
    cached_memory_features,
)
from engram_pipelines.analyses.contradictions.rules import load_rules  # noqa: E402
from engram_pipelines.config.model import Config  # noqa: E402
from engram_pipelines.warehouse.tables import Warehouse  # noqa: E402

COLUMNS = ["id", "namespace", "content", "created_at", "metadata", "superseded_by", "pinned"]


def every_feature(
    memories: pa.Table, pairs: pa.Table, config: Config, cache_root: Path
) -> policy.ContradictionResult:
    """The simple method: every feature of every row looked up, then the candidates and the rules."""
    rules = load_rules(config.contradiction.rules_path)
    features = cached_memory_features(memories["id"], memories["content"], rules, cache_root)
    candidates = policy._candidates(memories, pairs, features, rules, config)
    return policy.confirmed(memories, candidates, features, rules, config)


def demo_warehouse(size: int, work: Path) -> tuple[Path, dt.date]:
    as_of = dt.datetime.now(dt.UTC).date()
    env = {
        **os.environ,
        "ENGRAM_STORE_URL": f"sqlite:///{work}/engram.db",
        "ENGRAM_WAREHOUSE": str(work / "warehouse"),
    }
    env.pop("ENGRAM_CONFIG", None)
    env.pop("DAGSTER_HOME", None)
    command = [str(ROOT / ".venv" / "bin" / "engram-pipelines"), "demo", "--size", str(size)]
    subprocess.run(
        [*command, "--as-of", as_of.isoformat(), "--json"], env=env, check=True, capture_output=True
    )
    return work / "warehouse", as_of


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--warehouse", type=Path, help="a warehouse a night wrote (default: a demo store made here)"
    )
    parser.add_argument("--as-of", type=dt.date.fromisoformat, help="its as-of date (with --warehouse)")
    parser.add_argument(
        "--size", type=int, default=200_000, help="the demo store's memories (without --warehouse)"
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if (args.warehouse is None) != (args.as_of is None):
        parser.error("--warehouse and --as-of go together")
    print(
        f"# contradiction features, {dt.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    config = Config()
    rules = load_rules(config.contradiction.rules_path)
    with tempfile.TemporaryDirectory(prefix="engram-contradiction-features-") as scratch:
        work = Path(scratch)
        if args.warehouse is None:
            started = time.perf_counter()
            root, as_of = demo_warehouse(args.size, work)
            print(
                f"demo store of {args.size:,} memories and its first night: {time.perf_counter() - started:.0f} s"
            )
        else:
            root, as_of = args.warehouse, args.as_of
        warehouse = Warehouse(root)
        memories = warehouse.read_table("memories", as_of, columns=COLUMNS)
        pairs = warehouse.read_table("similarity_pairs", as_of)
        cache = Path("contradiction_features") / f"v{FEATURES_VERSION}-{rules.fingerprint}"
        copy = work / "cache"
        if (root / cache).exists():
            shutil.copytree(root / cache, copy / cache)
        print(f"{memories.num_rows:,} memories, {pairs.num_rows:,} pairs, as of {as_of}")
        methods = {
            "ours (claims of every row, features of the paired)": lambda: policy.find_contradictions(
                memories, pairs, config, cache_root=copy
            ),
            "simple (every feature of every row)": lambda: every_feature(memories, pairs, config, copy),
        }
        every_feature(memories, pairs, config, copy)  # parses what the cache lacks, for both alike
        seconds: dict[str, list[float]] = {name: [] for name in methods}
        results: dict[str, policy.ContradictionResult] = {}
        for _ in range(args.repeats):
            for name, method in methods.items():
                started = time.perf_counter()
                results[name] = method()
                seconds[name].append(time.perf_counter() - started)
        ours, simple = results.values()
        same = (
            ours.table.equals(simple.table)
            and ours.intents.equals(simple.intents)
            and ours.candidate_counts.equals(simple.candidate_counts)
        )
        print(
            f"contradictions {ours.table.num_rows:,}, intents {ours.intents.num_rows:,}, same results: {same}"
        )
        print("| method | best s | all s |\n|---|---:|---|")
        for name, times in seconds.items():
            print(f"| {name} | {min(times):.2f} | {', '.join(f'{t:.2f}' for t in times)} |")
        ratio = min(seconds[list(methods)[1]]) / min(seconds[list(methods)[0]])
        print(f"simple / ours: {ratio:.2f}x")
        if not same:
            raise SystemExit("the two methods gave different results")


if __name__ == "__main__":
    main()
