"""Benchmark the CAS-guarded apply: changes/s on SQLite and PostgreSQL, alone and with concurrent agents.

    .venv/bin/python bench/apply.py                       # 10k and 100k changes, both stores
    .venv/bin/python bench/apply.py --sizes 10000 --stores sqlite --batch-sizes 250 1000

Each case builds a fresh store of N memories, a change set of N composed writes (a tag union and a metadata
mark on every row), then applies it; with `--writers` agents (threads, own connections) editing random rows
at the same time: version-checked edits, access bookkeeping, pins. Reported: changes/s, the outcome counts,
the agents' write latency p50/p99 during the apply, and lost agent edits (must be 0). The per-row baseline
(one CAS UPDATE and one audit INSERT per change, as a service loop would) runs on the same data for scale.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.changes.apply import apply_change_set  # noqa: E402
from engram_pipelines.changes.compose import compose  # noqa: E402
from engram_pipelines.changes.intents import intents_table  # noqa: E402
from engram_pipelines.changes.registry import load_change_set, store_change_set  # noqa: E402
from engram_pipelines.core.timestamps import end_of_day  # noqa: E402
from engram_pipelines.ingest.snapshot import take_snapshot  # noqa: E402
from engram_pipelines.store import Store, open_store  # noqa: E402
from engram_pipelines.testing.agents import latency_percentiles, lost_edits, run_with_agents  # noqa: E402
from engram_pipelines.warehouse.tables import Warehouse  # noqa: E402

AS_OF = dt.date(2026, 11, 29)
T0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


def seed_store(store: Store, n: int) -> list[str]:
    ids = [f"m{i:07d}" for i in range(n)]
    for start in range(0, n, 20_000):
        store.insert_memories(
            {
                "id": i,
                "namespace": f"ns{int(i[1:]) % 50}",
                "content": f"memory {i}",
                "created_at": T0,
                "tags": ["seed"],
            }
            for i in ids[start : start + 20_000]
        )
    return ids


def change_set(store: Store, warehouse: Warehouse, ids: list[str]) -> str:
    take_snapshot(store, warehouse, AS_OF, embedding_dim=384)
    rows = []
    for memory_id in ids:
        namespace = f"ns{int(memory_id[1:]) % 50}"
        for op, params in (
            ("union_tags", {"tags": ["pipeline"]}),
            ("set_metadata", {"values": {"bench": 1}}),
        ):
            rows.append(
                {
                    "namespace": namespace,
                    "target_id": memory_id,
                    "op": op,
                    "params": params,
                    "source": "bench",
                    "review_class": "auto",
                    "reason": "bench",
                }
            )
    sets = compose(
        intents_table(rows),
        warehouse.read_table("memories", AS_OF),
        as_of=AS_OF,
        at=end_of_day(AS_OF),
        job="bench",
    )
    return store_change_set(
        store, warehouse, sets["auto"], created_at=T0, config_fingerprint="bench"
    ).change_set_id


def per_row_baseline(store: Store, change_set_id: str, limit: int) -> float:
    """One CAS UPDATE + one audit INSERT per change, a transaction per batch of 100 (the seeds' services)."""
    _, table = load_change_set(store, change_set_id)
    rows = table.slice(0, limit).select(["target_id", "expected_version", "patch", "change_id"]).to_pylist()
    started = time.perf_counter()
    for start in range(0, len(rows), 100):
        with store.write_transaction() as cur:
            for row in rows[start : start + 100]:
                patch = json.loads(row["patch"])
                cur.execute(
                    store._sql(
                        "UPDATE memories SET tags = ?, metadata = ?, version = version + 1 WHERE id = ? AND version = ?"
                    ),
                    (
                        json.dumps(patch["tags"]),
                        json.dumps(patch["metadata"]),
                        row["target_id"],
                        row["expected_version"],
                    ),
                )
                cur.execute(
                    store._sql(
                        "INSERT INTO audit_log (at, actor, change_set_id, change_id, target_kind, target_id, op, "
                        "before, after) VALUES (?, 'baseline', ?, ?, 'memory', ?, 'update', NULL, ?)"
                    ),
                    (
                        store._to_db("created_at", T0),
                        change_set_id,
                        row["change_id"],
                        row["target_id"],
                        row["patch"],
                    ),
                )
    return len(rows) / (time.perf_counter() - started)


def one_case(url: str, n: int, writers: int, batch_size: int, work: Path) -> dict[str, object]:
    with open_store(url, migrate=True) as store:
        ids = seed_store(store, n)
        cs = change_set(store, Warehouse(work / "warehouse"), ids)
        if writers:
            agents, result = run_with_agents(
                url,
                ids,
                lambda: apply_change_set(store, cs, batch_size=batch_size),
                writers=writers,
                pause=0.002,
            )
            latency = latency_percentiles(agents)
            lost = lost_edits(store, agents, ids)
        else:
            result = apply_change_set(store, cs, batch_size=batch_size)
            latency, lost = {}, 0
    return {
        "changes": n,
        "writers": writers,
        "batch": batch_size,
        "changes_per_s": round(result.total / result.seconds),
        "applied": result.applied,
        "skipped": result.skipped_concurrent_edit,
        "ineligible": result.ineligible,
        "accounted": result.accounted,
        "agent_p50_ms": round(latency.get("p50_ms", 0.0), 1),
        "agent_p99_ms": round(latency.get("p99_ms", 0.0), 1),
        "agent_writes": latency.get("writes", 0),
        "lost_edits": lost,
    }


def baseline_case(url: str, n: int, work: Path) -> float:
    with open_store(url, migrate=True) as store:
        ids = seed_store(store, n)
        cs = change_set(store, Warehouse(work / "warehouse-baseline"), ids)
        return per_row_baseline(store, cs, limit=min(n, 10_000))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--stores", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1000])
    parser.add_argument("--writers", type=int, default=4)
    args = parser.parse_args()
    print(
        f"# apply benchmark, {dt.date.today()}, {platform.processor() or platform.machine()}, "
        f"python {platform.python_version()}"
    )
    server = None
    if "postgres" in args.stores:
        from engram_pipelines.testing.postgres import PostgresServer

        server = PostgresServer()
        server.start()
    header = (
        "store",
        "changes",
        "writers",
        "batch",
        "changes_per_s",
        "applied",
        "skipped",
        "ineligible",
        "accounted",
        "agent_p50_ms",
        "agent_p99_ms",
        "agent_writes",
        "lost_edits",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    counter = 0
    try:
        for kind in args.stores:
            for n in args.sizes:
                for batch in args.batch_sizes:
                    for writers in (0, args.writers):
                        counter += 1
                        work = Path(tempfile.mkdtemp(prefix="engram-bench-"))
                        url = (
                            f"sqlite:///{work}/bench.db"
                            if kind == "sqlite"
                            else server.create_database(f"bench_{counter}")
                        )
                        row = {"store": kind, **one_case(url, n, writers, batch, work)}
                        print("| " + " | ".join(str(row[h]) for h in header) + " |", flush=True)
                        shutil.rmtree(work, ignore_errors=True)
            work = Path(tempfile.mkdtemp(prefix="engram-bench-"))
            counter += 1
            url = (
                f"sqlite:///{work}/base.db" if kind == "sqlite" else server.create_database(f"base_{counter}")
            )
            rate = baseline_case(url, 10_000, work)
            print(
                f"| {kind} | per-row baseline (10000 changes, batches of 100) | | | {rate:.0f} |", flush=True
            )
            shutil.rmtree(work, ignore_errors=True)
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
