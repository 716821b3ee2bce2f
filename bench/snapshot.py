"""The snapshot: incremental (only the rows written since the previous snapshot) against a full read, same run.

A demo store of N memories gets a first (full) snapshot; then, per scenario, the store changes and the same
state is snapshotted twice, incrementally and fully, into two warehouses; the partitions must be equal. Prints
the seconds of each and the ratio.

Scenarios: a quiet night (nothing written), and two nights where 1% of the rows changed (half edited by an
agent, half read: access bookkeeping), plus 0.1% new rows and 0.1% deleted, and 0.7% of the links written
(re-weighted, deleted, new). Two links per memory are added to the demo's (2.2 in all; a first night at 1M
leaves 2.9). An incremental night writes only the rows written since the last full read beside that read's
file (a layered partition); the second such night keeps the same file; the links journaled since the last
snapshot are read again and merged into its links. Also timed: reading the whole partition back (vectors
included), layered against plain.

    .venv/bin/python bench/snapshot.py [--size 100000] [--postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.demo.loader import load_demo  # noqa: E402
from engram_pipelines.ingest.snapshot import take_snapshot  # noqa: E402
from engram_pipelines.store import Store, open_store  # noqa: E402
from engram_pipelines.warehouse.tables import Warehouse  # noqa: E402

AS_OF = dt.date(2026, 11, 29)


@contextlib.contextmanager
def store_url(postgres: bool, root: Path) -> Iterator[str]:
    if not postgres:
        yield f"sqlite:///{root}/engram.db"
        return
    from engram_pipelines.testing.postgres import PostgresServer

    with PostgresServer() as server:
        yield server.create_database("engram_bench_snapshot")


def link_up(store: Store) -> None:
    """Links as a first night leaves them (2.9M at 1M memories, three per memory; the demo has one per four):
    each memory to the next and to the one after in its namespace by creation time."""
    for kind, step in (("temporal", 1), ("associated", 2)):
        with store.write_transaction() as cur:
            cur.execute(
                store._sql(
                    "INSERT INTO memory_links (namespace, src_id, dst_id, kind, weight, origin, created_at, "
                    "updated_at) SELECT namespace, id, next_id, ?, 0.5, 'pipeline', created_at, created_at FROM "
                    f"(SELECT namespace, id, created_at, lead(id, {step}) OVER (PARTITION BY namespace "
                    "ORDER BY created_at, id) AS next_id FROM memories) t WHERE next_id IS NOT NULL "
                    "ON CONFLICT (src_id, dst_id, kind) DO NOTHING"
                ),
                (kind,),
            )


def change_links(store: Store, size: int, rng: np.random.Generator) -> None:
    """A night's link writes: 0.5% of the links re-weighted, 0.1% deleted, as many new."""
    keys = store.query("SELECT src_id, dst_id, kind FROM memory_links ORDER BY src_id, dst_id, kind")
    picked = rng.choice(len(keys), max(2, size // 200 + size // 1000), replace=False)
    with store.write_transaction() as cur:
        for n, i in enumerate(picked):
            sql = (
                "UPDATE memory_links SET weight = weight / 2 WHERE src_id = ? AND dst_id = ? AND kind = ?"
                if n >= size // 1000
                else "DELETE FROM memory_links WHERE src_id = ? AND dst_id = ? AND kind = ?"
            )
            cur.execute(store._sql(sql), keys[i])
    ids = [row[0] for row in store.query("SELECT id FROM memories ORDER BY id")]
    pairs = rng.choice(len(ids), (max(1, size // 1000), 2))
    store.insert_links(
        [{"namespace": "bench", "src_id": ids[a], "dst_id": ids[b], "kind": "bench"} for a, b in pairs]
    )


def change(store: Store, size: int, rng: np.random.Generator) -> None:
    ids = [row[0] for row in store.query("SELECT id FROM memories ORDER BY id")]
    picked = rng.choice(len(ids), max(1, size // 100), replace=False)
    edited, read = picked[: len(picked) // 2], picked[len(picked) // 2 :]
    for i in edited:
        row = store.get(ids[i])
        assert row is not None
        store.update_memory(ids[i], row["version"], importance=round(float(rng.uniform(0.1, 0.9)), 3))
    for i in read:
        store.record_access(ids[i])
    gone = [ids[i] for i in rng.choice(len(ids), max(1, size // 1000), replace=False)]
    with store.write_transaction() as cur:
        for memory_id in gone:
            cur.execute(store._sql("DELETE FROM memories WHERE id = ?"), (memory_id,))
    new = store.get(ids[0])
    assert new is not None
    store.insert_memories(
        [
            {
                **{k: new[k] for k in ("namespace", "content", "created_at", "updated_at")},
                "id": f"bench-new-{i}",
            }
            for i in range(max(1, size // 1000))
        ]
    )


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    out = fn()
    return time.perf_counter() - started, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="engram-bench-snapshot-"))
    rng = np.random.default_rng(7)
    try:
        with store_url(args.postgres, root) as url, open_store(url, migrate=True) as store:
            load_demo(store, size=args.size, seed=7, as_of=AS_OF)
            link_up(store)
            incremental, full = Warehouse(root / "incremental"), Warehouse(root / "full")
            first, _ = timed(lambda: take_snapshot(store, incremental, AS_OF))
            print(
                f"{'PostgreSQL' if args.postgres else 'SQLite'}, {args.size:,} memories, {store.count('memory_links'):,} "
                f"links; first snapshot {first:.1f} s\n"
            )
            print(
                "| night | full read s | incremental s | x | rows read again | gone | links read again | equal | "
                "read back: plain s | layered s |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
            for night, scenario in enumerate(("quiet", "1% changed", "1% changed again"), start=1):
                day = AS_OF + dt.timedelta(days=night)
                if scenario != "quiet":
                    change(store, args.size, rng)
                    change_links(store, args.size, rng)
                inc_s, inc = timed(lambda day=day: take_snapshot(store, incremental, day))
                full_s, _ = timed(lambda day=day: take_snapshot(store, full, day, incremental=False))
                plain_s, _ = timed(lambda day=day: full.read_table("memories", day))
                layered_s, _ = timed(lambda day=day: incremental.read_table("memories", day))
                equal = all(
                    incremental.read_table(t, day)
                    .replace_schema_metadata(None)
                    .equals(full.read_table(t, day).replace_schema_metadata(None))
                    for t in ("memories", "quarantine", "links")
                )
                print(
                    f"| {scenario} | {full_s:.1f} | {inc_s:.1f} | {full_s / inc_s:.1f} | {inc.reread:,} | "
                    f"{inc.deleted:,} | {inc.links_read:,} | {equal} | {plain_s:.1f} | {layered_s:.1f} |"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
