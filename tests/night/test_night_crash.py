"""Whole nights, interrupted and undone.

A night killed in the middle of its apply (kill -9), then run again, ends where an uninterrupted night does: the
rerun finishes the interrupted change set from its ledger before it reads the store (`resume_interrupted`), so
nothing of the first set is lost and no second, different set is proposed from a half-applied store. A second
run of the same day changes nothing. `revert --night` undoes every set a night applied, in the right order.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_pipelines.demo.loader import load_demo
from engram_pipelines.store import open_store
from tests.support.memories import AS_OF

# Small batches: the kill lands between many transactions of the apply.
ENV = {**os.environ, "ENGRAM_APPLY_BATCH_SIZE": "10"}


def _run(url: str, warehouse: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "engram_pipelines.cli", "run", "--as-of", AS_OF.isoformat(), "--store", url]
        + ["--warehouse", str(warehouse), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=ENV,
    )


def _finished(url: str, warehouse: Path) -> dict:
    proc = _run(url, warehouse)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out
    return json.loads(out)


def _state(path: Path, skip: tuple[str, ...] = ("updated_at",)) -> tuple[list[tuple], list[tuple]]:
    """Every memory and link column, in a stable order (JSON documents compared as values, not text); not a
    memory's `updated_at`, the wall-clock time of its last write (the two runs write at different times)."""
    with sqlite3.connect(path) as con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(memories)") if r[1] not in skip]
        documents = [i for i, c in enumerate(columns) if c in ("metadata", "tags")]
        memories = [
            tuple(json.loads(v) if i in documents and v is not None else v for i, v in enumerate(row))
            for row in con.execute(f"SELECT {', '.join(columns)} FROM memories ORDER BY id")
        ]
        links = con.execute("SELECT * FROM memory_links ORDER BY src_id, dst_id, kind").fetchall()
    return memories, links


def _ledger_rows(path: Path) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM change_ledger").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is being created, or the writer holds an exclusive lock
        return 0


def _auto_changes(summary: dict) -> int:
    return int(summary["steps"]["change_set"]["auto_changes"])


@pytest.mark.slow
def test_a_night_killed_mid_apply_resumes_to_the_uninterrupted_store(tmp_path):
    base = tmp_path / "base.db"
    with open_store(f"sqlite:///{base}", migrate=True) as store:
        load_demo(store, size=600, seed=5, as_of=AS_OF)
    reference, killed = tmp_path / "reference.db", tmp_path / "killed.db"
    shutil.copy(base, reference)
    shutil.copy(base, killed)

    first = _finished(f"sqlite:///{reference}", tmp_path / "wh_reference")
    total = _auto_changes(first)
    assert total > 200, "the night must have enough to apply for a kill to land inside it"
    settled = _state(reference)
    again = _finished(f"sqlite:///{reference}", tmp_path / "wh_reference")
    assert _auto_changes(again) == 0 and _state(reference) == settled  # a second same-day run changes nothing

    kill_at = random.Random(7).randrange(20, total - 20)
    proc = _run(f"sqlite:///{killed}", tmp_path / "wh_killed")
    deadline = time.monotonic() + 600
    while proc.poll() is None and time.monotonic() < deadline and _ledger_rows(killed) < kill_at:
        time.sleep(0.01)
    assert proc.poll() is None, "the night finished before the kill: the test proved nothing"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    landed = _ledger_rows(killed)
    assert 0 < landed < total, f"killed with {landed} of {total} changes landed"

    rerun = _finished(f"sqlite:///{killed}", tmp_path / "wh_killed")
    assert _auto_changes(rerun) == 0  # the interrupted set was finished, not replaced by another
    assert _state(killed) == settled
    with open_store(f"sqlite:///{killed}") as store:
        assert not store.interrupted_change_sets()


def test_a_whole_night_reverts_in_one_command_to_the_store_before_it(tmp_path):
    path = tmp_path / "engram.db"
    url = f"sqlite:///{path}"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=600, seed=5, as_of=AS_OF)
    # A revert is a new write: each row's version moves on, and its updated_at is the revert's time.
    before = _state(path, skip=("updated_at", "version"))
    night = _finished(url, tmp_path / "wh")
    gated = night["steps"]["change_set"]["gated_change_set"]
    cli = [sys.executable, "-m", "engram_pipelines.cli"]
    for command in ("approve", "apply"):
        subprocess.run([*cli, command, gated, "--store", url], check=True, capture_output=True, env=ENV)
    assert _state(path, skip=("updated_at", "version")) != before

    done = subprocess.run(
        [*cli, "revert", "--night", AS_OF.isoformat(), "--store", url, "--json"],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(done.stdout)
    assert sorted(result["change_sets"]) == sorted([gated, night["steps"]["change_set"]["auto_change_set"]])
    # The demo plants links to memories that do not exist; the night deletes them (gc), and a revert never
    # puts back a link to a missing memory. Everything else is as it was, timestamps included.
    memories, links = before
    with sqlite3.connect(path) as con:
        ids = {row[0] for row in con.execute("SELECT id FROM memories")}
    joined = [link for link in links if link[1] in ids and link[2] in ids]
    assert 0 < len(links) - len(joined) == result["skipped_edited_since"]
    assert _state(path, skip=("updated_at", "version")) == (memories, joined)
