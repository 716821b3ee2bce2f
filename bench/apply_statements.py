"""Where a first night's apply spends its time: every statement and commit timed, on SQLite.

    .venv/bin/python bench/apply_statements.py                     # the demo at 100,000 memories
    .venv/bin/python bench/apply_statements.py --size 20000 --without memory_links_dst

Loads the demo corpus into a fresh store, copies the file, runs the nightly job on the original (its auto
set: stale marks, promotions, temporal edges, associations...), then registers that set in the copy (the
store as the night found it) and applies it there again, once as the store is and once with each index named
by `--without` dropped first, so an index's share of the apply is measured on the same changes. Printed: the
apply's seconds and changes/s, then the SQL grouped by statement (its first words) with the commits, and the
time outside SQL (reading and verifying the set, building the batches in Python).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import platform
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.changes.apply import apply_change_set  # noqa: E402
from engram_pipelines.demo.loader import load_demo  # noqa: E402
from engram_pipelines.orchestration.runner import execute_job  # noqa: E402
from engram_pipelines.store import open_store  # noqa: E402
from engram_pipelines.store.sqlite import SQLiteStore  # noqa: E402

AS_OF = dt.date(2026, 12, 1)


_last_statement = [""]  # the statement before a COMMIT: which kind of batch the commit ends


class _TimedCursor:
    """A cursor whose statements add their seconds to `seconds`, keyed by their first words."""

    def __init__(self, cursor: Any, seconds: defaultdict[str, float]) -> None:
        self._cursor, self._seconds = cursor, seconds

    def _timed(self, key: str, call: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self._seconds[key] += time.perf_counter() - started

    def execute(self, sql: str, *args: Any) -> Any:
        key = " ".join(sql.split())[:60]
        if key == "COMMIT":  # named for the batch it ends: a batch's last statement reads its batch table
            key = f"COMMIT after {_last_statement[0]}"
        else:
            _last_statement[0] = key[:36]
        return self._timed(key, self._cursor.execute, sql, *args)

    def executemany(self, sql: str, *args: Any) -> Any:
        return self._timed("(many) " + " ".join(sql.split())[:53], self._cursor.executemany, sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cursor, name)


class _TimedConnection:
    """The store's connection, its cursors timed: the store's own transactions run unchanged (BEGIN, COMMIT
    and ROLLBACK are statements of their cursor), so the commits are timed as the statements are."""

    def __init__(self, connection: Any, seconds: defaultdict[str, float]) -> None:
        self._connection, self._seconds = connection, seconds

    def cursor(self) -> _TimedCursor:
        return _TimedCursor(self._connection.cursor(), self._seconds)

    def execute(self, sql: str, *args: Any) -> Any:
        return self.cursor().execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


def timed_apply(
    store: SQLiteStore, change_set_id: str, batch_size: int
) -> tuple[float, int, defaultdict[str, float]]:
    seconds: defaultdict[str, float] = defaultdict(float)
    connection = store.conn
    store.conn = _TimedConnection(connection, seconds)
    try:
        started = time.perf_counter()
        result = apply_change_set(store, change_set_id, batch_size=batch_size)
        return time.perf_counter() - started, result.total, seconds
    finally:
        store.conn = connection


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument(
        "--without", nargs="*", default=["memory_links_dst"], help="indexes to drop in a second run"
    )
    parser.add_argument(
        "--batch-sizes", nargs="*", type=int, default=[1000], help="the apply's batch sizes, each run in turn"
    )
    args = parser.parse_args()
    print(f"# {dt.date.today()} {platform.machine()} Python {platform.python_version()}, demo {args.size:,}")
    with tempfile.TemporaryDirectory(prefix="engram-apply-") as tmp:
        root = Path(tmp)
        night_db, before_db = root / "night.db", root / "before.db"
        with open_store(f"sqlite:///{night_db}", migrate=True) as store:
            load_demo(store, size=args.size, seed=7, as_of=AS_OF)
        shutil.copy(night_db, before_db)
        night = execute_job(
            "nightly", AS_OF, store=f"sqlite:///{night_db}", warehouse=str(root / "wh"), config_path=None
        )
        if not night["success"]:
            raise SystemExit(f"the nightly failed: {night.get('error')}")
        change_set_id = night["steps"]["change_set"]["auto_change_set"]
        with open_store(f"sqlite:///{night_db}") as store:
            record = store.get_change_set(change_set_id)
        assert record is not None
        runs: list[tuple[int, list[str]]] = [(size, []) for size in args.batch_sizes]
        runs += [(args.batch_sizes[0], args.without)] if args.without else []
        for batch_size, dropped in runs:
            work_db = root / "work.db"
            shutil.copy(before_db, work_db)
            with open_store(f"sqlite:///{work_db}") as store:
                assert isinstance(store, SQLiteStore)
                for index in dropped:
                    store.conn.execute(f"DROP INDEX {index}")
                store.register_change_set(dataclasses.replace(record, status="proposed", applied_at=None))
                seconds, total, by_statement = timed_apply(store, change_set_id, batch_size)
            in_sql = sum(by_statement.values())
            label = f"batches of {batch_size:,}, " + (
                f"without {', '.join(dropped)}" if dropped else "as the store is"
            )
            print(f"\n## {label}: {total:,} changes in {seconds:.1f} s ({total / seconds:,.0f}/s)")
            for key, spent in sorted(by_statement.items(), key=lambda kv: -kv[1])[:12]:
                print(f"{spent:8.2f}  {key}")
            print(f"{in_sql:8.2f}  all SQL with the commits")
            print(
                f"{seconds - in_sql:8.2f}  outside SQL (reading and verifying the set, the batches in Python)"
            )
            work_db.unlink()


if __name__ == "__main__":
    main()
