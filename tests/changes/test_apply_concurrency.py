"""The apply under real concurrency: agents editing while 10,000+ changes land; and kill -9 mid-apply.

Agents here are threads with their own connections doing what agents do: version-checked edits (told when
they conflict), access bookkeeping, pins. Afterwards no agent's edit may be lost. A deliberately unguarded
control apply in the same conditions must lose edits, or this test could not fail.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.registry import load_change_set
from engram_pipelines.store import Store, open_store
from engram_pipelines.testing.agents import lost_edits, run_with_agents
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.changes import intent, propose
from tests.support.memories import memory

N_ROWS = 10_000 if os.environ.get("ENGRAM_STRESS") != "full" else 50_000
WRITERS = 4


def _seed(store: Store, n: int) -> None:
    store.insert_memories([memory(i, tags=["seed"], embedding=None, embedding_model=None) for i in range(n)])


def _change_set(store: Store, warehouse: Warehouse, n: int) -> str:
    intents = []
    for i in range(n):
        intents.append(intent(f"m{i}", "union_tags", tags=["pipeline"]))
        intents.append(intent(f"m{i}", "set_metadata", values={"pipeline": "seen"}))
    return propose(store, warehouse, intents)


def _ids() -> list[str]:
    return [f"m{i}" for i in range(N_ROWS)]


def test_no_agent_edit_is_lost_while_the_apply_runs(store, warehouse):
    _seed(store, N_ROWS)
    cs = _change_set(store, warehouse, N_ROWS)
    assert load_change_set(store, cs)[1].num_rows == N_ROWS
    agents, result = run_with_agents(store.url, _ids(), lambda: apply_change_set(store, cs), writers=WRITERS)
    assert sum(len(a.edits) for a in agents) > 100, "the agents must really have been writing"
    assert lost_edits(store, agents, _ids()) == 0
    assert result.accounted and result.total == N_ROWS
    assert result.applied + result.skipped_concurrent_edit + result.ineligible == N_ROWS
    assert result.retried > 0, "some changes must have met a concurrent edit"
    rows = store.read_memories([f"m{i}" for i in range(N_ROWS)])
    applied = [t for t, o in store.ledger(cs).items() if o[0] == "applied"]
    assert len(applied) == result.applied
    assert sum("pipeline" in r["tags"] for r in rows.values()) == result.applied


def test_no_edited_row_is_purged_while_agents_write(store, warehouse):
    """Purges decided by neglect, agents editing the same rows throughout: an edited row is skipped, never
    deleted (the purge is not re-derived on the fresh row), so no accepted edit is lost."""
    n = N_ROWS // 5
    store.insert_memories(
        [memory(i, tags=["seed"], zone="purge_queue", embedding=None, embedding_model=None) for i in range(n)]
    )
    ids = [f"m{i}" for i in range(n)]
    cs = propose(store, warehouse, [intent(i, "purge") for i in ids])
    agents, result = run_with_agents(
        store.url, ids, lambda: apply_change_set(store, cs, batch_size=50), writers=WRITERS
    )
    assert sum(len(a.edits) for a in agents) > 10, "the agents must really have been writing"
    assert lost_edits(store, agents, ids) == 0
    assert result.accounted and result.applied + result.skipped_concurrent_edit + result.ineligible == n
    assert result.skipped_concurrent_edit > 0, "some purges must have met an edit"


def _unguarded_apply(store: Store, change_set_id: str) -> None:
    """The control: the same patches written without version or guard checks (what must never ship)."""
    _, table = load_change_set(store, change_set_id)
    rows = table.select(["target_id", "patch"]).to_pylist()
    for start in range(0, len(rows), 1000):
        with store.write_transaction() as cur:
            params = []
            for row in rows[start : start + 1000]:
                patch = json.loads(row["patch"])
                params.append((json.dumps(patch["tags"]), json.dumps(patch["metadata"]), row["target_id"]))
            cur.executemany(store._sql("UPDATE memories SET tags = ?, metadata = ? WHERE id = ?"), params)


def test_an_unguarded_control_apply_does_lose_edits(store, warehouse):
    _seed(store, N_ROWS)
    cs = _change_set(store, warehouse, N_ROWS)
    agents, _ = run_with_agents(store.url, _ids(), lambda: _unguarded_apply(store, cs), writers=WRITERS)
    assert lost_edits(store, agents, _ids()) > 0


# -- crash: kill -9 in the middle, rerun, compare with an uninterrupted run ------------------------------


def _final_state(store: Store) -> tuple[list[tuple], list[tuple]]:
    ids = [f"m{i}" for i in range(N_ROWS)]
    rows = store.read_memories(ids)
    memories = sorted(
        (r["id"], r["version"], tuple(r["tags"]), json.dumps(r["metadata"], sort_keys=True))
        for r in rows.values()
    )
    audit = sorted(
        (a["change_id"], a["target_id"], a["op"], json.dumps(a["after"], sort_keys=True))
        for a in store.audit_rows()
    )
    return memories, audit


@pytest.mark.slow
def test_a_killed_apply_resumes_to_the_same_result(store_url, tmp_path, request):
    def prepared(url: str, where: Path) -> tuple[Store, str]:
        s = open_store(url, migrate=True)
        _seed(s, N_ROWS)
        return s, _change_set(s, Warehouse(where), N_ROWS)

    killed, cs = prepared(store_url, tmp_path / "wh1")
    other_url = (
        f"sqlite:///{tmp_path}/reference.db"
        if store_url.startswith("sqlite")
        else request.getfixturevalue("pg_server").create_database(f"reference_{os.getpid()}")
    )
    reference, cs_ref = prepared(other_url, tmp_path / "wh2")
    assert cs == cs_ref
    apply_change_set(reference, cs_ref, batch_size=200)

    rng = random.Random(3)
    kills = 0
    for _ in range(3):
        before = len(killed.ledger(cs))
        kill_at = before + rng.randrange(200, 3000)  # changes landed when the process dies
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_pipelines.cli", "apply", cs, "--store", store_url, "--json"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "ENGRAM_APPLY_BATCH_SIZE": "200"},
        )
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if len(killed.ledger(cs)) >= kill_at:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.005)
        proc.wait()
    assert kills >= 1, "the apply finished before any kill: the test proved nothing"
    done = subprocess.run(
        [sys.executable, "-m", "engram_pipelines.cli", "apply", cs, "--store", store_url, "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    final = json.loads(done.stdout)
    assert final["applied"] == N_ROWS and final["accounted"]
    assert _final_state(killed) == _final_state(reference)
    killed.close()
    reference.close()
