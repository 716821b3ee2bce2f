"""End-to-end benchmark of the nightly job: generated corpora, every stage timed, peak memory, rows/s.

    .venv/bin/python bench/nightly.py --sizes 100000 --stores sqlite
    .venv/bin/python bench/nightly.py --sizes 100000 1000000 --stores sqlite postgres

Each step of a case runs in a child process of its own (so its peak memory is its own): a fresh store, the demo
corpus of N memories with 384-d vectors (four big namespaces plus many small ones above 20k rows) loaded, then
the full nightly job (snapshot, every analysis, change set, apply of the auto class, health report) for the as-of date;
then the nightly of the next day (no agent wrote anything, but the first night's apply created rows: semantic
facts, merged rows, summaries, which this night embeds and compares), of the day after (nothing new at all),
which shows what the incremental path costs, and of the day after that, once agents edited or read 1% of the
rows (`--changed-share`). Per-stage seconds come from Dagster's step events.

Each later night also runs, in the same run, as a full recompute (`execution.reuse: false`: a full read of the
store, every analysis from scratch) on a copy of the store and warehouse as that night found them; the two must
propose the same change sets (checked: the benchmark stops otherwise) and the table prints the ratio.

Disk: a case holds its store, its warehouse and a copy of both for the full recompute, under the temporary
directory (`TMPDIR`); a 1M case on PostgreSQL took up to 53 GB at once (2026-12-07).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CLI = str(ROOT / ".venv" / "bin" / "engram-pipelines")
AS_OF = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=3)  # the last night is today: a valid partition


def run_cli(args: list[str], env: dict[str, str]) -> tuple[dict, float, float]:
    """(the command's JSON, wall seconds, peak RSS in MB of that child)."""
    out, seconds, peak = _child([CLI, *args, "--json"], env)
    return json.loads(out), seconds, peak


def _child(command: list[str], env: dict[str, str]) -> tuple[str, float, float]:
    """(stdout, wall seconds, peak RSS in MB) of one child process. Its own peak, from wait4: the children's
    rusage is the largest of all children so far (the demo load's 11 GB stood for every later night)."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, text=True, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            raise RuntimeError(f"{' '.join(command[1:])} failed:\n{err.read()[-3000:]}")
        return out.read(), seconds, usage.ru_maxrss / 1024


class Copies:
    """A copy of a case's store and warehouse as they are now: where the full recompute of a night runs."""

    def __init__(self, url: str, work: Path, server: object | None) -> None:
        self.url, self.work, self.server = url, work, server

    def take(self, name: str) -> tuple[str, Path]:
        target = self.work.parent / f"{self.work.name}-{name}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(
            self.work, target
        )  # the SQLite file (the CLI closed it: no WAL left) and the warehouse
        if self.url.startswith("sqlite"):
            return f"sqlite:///{target}/engram.db", target
        database = self.url.rsplit("/", 1)[1].split("?")[0]
        return self.server.create_database(f"{database}_{name}", copy_of=database), target  # type: ignore[attr-defined]


def one_case(
    n: int, copies: Copies, later_nights: bool = True, text: bool = False, changed_share: float = 0.01
) -> Iterator[dict[str, object]]:
    """The case's rows, each as soon as it is measured (a 1M case runs for an hour)."""
    env = _env(copies.url, copies.work)
    # The corpus is loaded by a child of its own, so that the first night's peak is the night's.
    _, load_wall, load_peak = _child([sys.executable, "-c", _LOAD, str(n), AS_OF.isoformat(), str(text)], env)
    yield _row("load of the demo corpus", n, {"seconds": load_wall}, load_wall, load_peak)
    first, wall, peak = run_cli(["run", "--as-of", AS_OF.isoformat()], env)
    yield _row("first night", n, first, wall, peak)
    if not later_nights:
        return
    full_config = copies.work.parent / f"{copies.work.name}-full.yaml"
    full_config.write_text("execution:\n  reuse: false\n")
    # The second night embeds and compares what the first night's apply created (semantic facts, merged rows,
    # summaries); the third has nothing new at all: the incremental path alone; before the fourth, agents edit
    # and read `changed_share` of the rows.
    nights = ((1, "second night (the first's new rows)"), (2, "quiet third night"))
    nights += ((3, f"fourth night ({changed_share:.0%} of rows written by agents)"),)
    for day, label in nights:
        as_of = (AS_OF + dt.timedelta(days=day)).isoformat()
        if day == 3:
            _agents_write(copies.url, changed_share)
        url, target = copies.take("full")
        full, full_wall, full_peak = run_cli(
            ["run", "--as-of", as_of], {**_env(url, target), "ENGRAM_CONFIG": str(full_config)}
        )
        later, wall, peak = run_cli(["run", "--as-of", as_of], env)
        same = _proposed(copies.url, as_of) == _proposed(url, as_of)
        if not same:
            raise SystemExit(
                f"{label}: the incremental night and the full recompute proposed different changes"
            )
        yield _row(label, n, later, wall, peak, versus=float(full["seconds"]))
        yield _row(f"{label}, full recompute", n, full, full_wall, full_peak)
        shutil.rmtree(target, ignore_errors=True)


_LOAD = """
import datetime as dt, os, sys
from engram_pipelines.demo.loader import load_demo
from engram_pipelines.store import open_store
with open_store(os.environ["ENGRAM_STORE_URL"], migrate=True) as store:
    load_demo(store, size=int(sys.argv[1]), seed=7, as_of=dt.date.fromisoformat(sys.argv[2]),
              vectors=sys.argv[3] != "True")
"""


def _agents_write(url: str, share: float) -> None:
    """Agents' writes between two nights: `share` of all rows, evenly spread over the visible ones by id; every
    other one edited (new text: embedded again), the rest read (access count and time)."""
    from engram_pipelines.store import open_store

    with open_store(url) as store:
        total = store.count("memories")
        rows = store.query(
            "SELECT id, version, content FROM memories WHERE zone = 'active' AND superseded_by IS NULL ORDER BY id"
        )
        count = min(len(rows), round(share * total))
        for k, index in enumerate(np.linspace(0, len(rows) - 1, count).round().astype(int)):
            memory_id, version, content = rows[index]
            if k % 2:
                store.record_access(memory_id)
            else:
                store.update_memory(memory_id, int(version), content=f"{content} Updated by the agent.")


def _env(url: str, work: Path) -> dict[str, str]:
    env = {**os.environ, "ENGRAM_STORE_URL": url, "ENGRAM_WAREHOUSE": str(work / "warehouse")}
    env.pop("DAGSTER_HOME", None)
    env.pop("ENGRAM_CONFIG", None)
    return env


def _proposed(url: str, as_of: str) -> set[tuple[str, str]]:
    """Every change the night proposed, with its class (the change ids are content hashes)."""
    from engram_pipelines.changes.registry import read_changes
    from engram_pipelines.store import open_store

    with open_store(url) as store:
        return {
            (record.review_class, change_id)
            for record in store.list_change_sets()
            if record.as_of == as_of
            for change_id in read_changes(record, ["change_id"]).column("change_id").to_pylist()
        }


def _row(
    label: str, n: int, summary: dict, wall: float, peak: float, versus: float | None = None
) -> dict[str, object]:
    steps = summary.get("step_seconds", {})
    job = float(summary["seconds"])
    return {
        "run": label,
        "memories": n,
        "wall_s": round(wall, 1),
        "job_s": round(job, 1),
        "full_recompute_over_this": f"{versus / job:.1f}x" if versus else "",
        "rows_per_s": round(n / job),
        "peak_mb": round(peak),
        "steps": {k: v for k, v in steps.items() if not k.endswith(tuple(_CHECKS))},
        "applied": summary.get("steps", {}).get("applied_changes", {}).get("applied"),
    }


_CHECKS = (
    "_snapshot_invalid_fraction",
    "_no_destructive_op_on_pinned",
    "_nothing_across_namespaces",
    "_one_write_per_row",
    "_apply_accounting_closes",
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000])
    parser.add_argument("--stores", nargs="+", default=["sqlite"], choices=["sqlite", "postgres"])
    parser.add_argument("--executor", default="in_process", choices=["in_process", "multiprocess", "dask"])
    parser.add_argument("--shards", type=int, help="execution.shards (default: 1 in process, else 4)")
    parser.add_argument("--first-night-only", action="store_true", help="skip the two later nights")
    parser.add_argument(
        "--text",
        action="store_true",
        help="no vectors given: the first night embeds every text (real sentences)",
    )
    parser.add_argument(
        "--changed-share",
        type=float,
        default=0.01,
        help="share of the rows agents edit or read before the fourth night (default 0.01)",
    )
    args = parser.parse_args()
    os.environ["ENGRAM_EXECUTOR"] = args.executor
    if args.shards is not None:
        os.environ["ENGRAM_SHARDS"] = str(args.shards)
    print(
        f"# nightly benchmark, {dt.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"executor {args.executor}, shards {args.shards or 'default'}, load average {os.getloadavg()[0]:.1f}"
    )
    print(
        "| store | run | memories | wall s | job s | full recompute / this | rows/s | peak MB | applied | "
        "steps |\n|---|---|---|---|---|---|---|---|---|---|"
    )
    server = None
    if "postgres" in args.stores:
        from engram_pipelines.testing.postgres import PostgresServer

        server = PostgresServer()
        server.start()
    try:
        for kind in args.stores:
            for n in args.sizes:
                work = Path(tempfile.mkdtemp(prefix="engram-nightly-"))
                url = (
                    f"sqlite:///{work}/engram.db"
                    if kind == "sqlite"
                    else server.create_database(f"nightly_{n}")
                )
                copies = Copies(url, work, server)
                for row in one_case(
                    n,
                    copies,
                    later_nights=not args.first_night_only,
                    text=args.text,
                    changed_share=args.changed_share,
                ):
                    steps = ", ".join(
                        f"{k} {v:.1f}s" for k, v in sorted(row.pop("steps").items(), key=lambda kv: -kv[1])
                    )
                    print(
                        f"| {kind} | " + " | ".join(str(v) for v in row.values()) + f" | {steps} |",
                        flush=True,
                    )
                shutil.rmtree(work, ignore_errors=True)
                for leftover in work.parent.glob(f"{work.name}-*"):
                    shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink()
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
