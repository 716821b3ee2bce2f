"""Benchmark the revert of a first night: changes/s on SQLite and PostgreSQL.

    .venv/bin/python bench/revert.py                      # the demo at 20,000 memories, both stores
    .venv/bin/python bench/revert.py --size 5000 --stores sqlite

Each case loads the demo corpus into a fresh store, runs the nightly job (its auto set: stale marks,
promotions, temporal edges, associations...), then reverts that set: every row and link back from its audit
pre-image, each guarded by what the apply left (links by weight, origin and timestamps, read for a whole batch
in one statement). Reported: the set's size, its link changes, what was reverted and skipped, seconds and
changes/s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines import api  # noqa: E402
from engram_pipelines.demo.loader import load_demo  # noqa: E402
from engram_pipelines.orchestration.runner import execute_job  # noqa: E402
from engram_pipelines.store import open_store  # noqa: E402

AS_OF = dt.date(2026, 11, 29)


def run_case(url: str, warehouse: Path, size: int) -> dict:
    with open_store(url, migrate=True) as store:
        load_demo(store, size=size, seed=5, as_of=AS_OF)
    night = execute_job("nightly", AS_OF, store=url, warehouse=str(warehouse), config_path=None)
    if not night["success"]:
        raise SystemExit(f"the nightly failed: {night.get('error')}")
    auto = night["steps"]["change_set"]["auto_change_set"]
    with open_store(url) as store:
        record = store.get_change_set(auto)
        links = sum(n for op, n in record.counts["by_op"].items() if "link" in op)
        started = time.perf_counter()
        result = api.revert(store, auto, actor="bench")
        seconds = time.perf_counter() - started
    return {
        "changes": record.total,
        "link_changes": links,
        "reverted": result.reverted,
        "skipped": len(result.skipped_edited_since),
        "seconds": round(seconds, 2),
        "changes_per_second": round(result.reverted / seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=20_000, help="demo memories (default 20,000)")
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    args = parser.parse_args()
    print(
        f"# revert of a first night's auto set, demo {args.size:,} memories, {platform.machine()}, "
        f"{dt.datetime.now(dt.UTC):%Y-%m-%d}"
    )
    with tempfile.TemporaryDirectory(prefix="engram-bench-revert-") as tmp:
        root = Path(tmp)
        for kind in args.stores:
            if kind == "sqlite":
                result = run_case(f"sqlite:///{root}/engram.db", root / "wh-sqlite", args.size)
            else:
                from engram_pipelines.testing.postgres import PostgresServer

                server = PostgresServer()
                server.start()
                try:
                    url = server.create_database("bench_revert")
                    result = run_case(url, root / "wh-postgres", args.size)
                finally:
                    server.stop()
            print(json.dumps({"store": kind, **result}))


if __name__ == "__main__":
    main()
