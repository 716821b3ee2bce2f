"""`demo`: put the generated demo corpus into a store (once), so the nightly job has something to do."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

from engram_pipelines.store import Store, open_store
from engram_pipelines.store.sqlite import sqlite_path

LOAD_BATCH = 20_000


def load_demo(store: Store, *, size: int, seed: int, as_of: dt.date) -> dict[str, int] | None:
    """Generate and insert the demo corpus unless the store holds memories already (then None)."""
    from engram_pipelines.demo.corpus import generate

    if store.count("memories"):
        return None
    corpus = generate(size, seed=seed, as_of=as_of)
    inserted = 0
    for batch in corpus.memories.to_batches(LOAD_BATCH):
        inserted += store.insert_memories(batch.to_pylist())
    links = store.insert_links(corpus.links.to_pylist())
    return {"memories": inserted, "links": links, "planted_structures": corpus.truth.num_rows}


def reset_store(url: str, warehouse: Path) -> None:
    """Start over: remove the SQLite file (or empty the PostgreSQL tables) and the warehouse."""
    if url.startswith("sqlite:"):
        path = sqlite_path(url)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    else:
        with open_store(url, migrate=True) as store, store.write_transaction() as cur:
            cur.execute("TRUNCATE memories, memory_links, audit_log, change_sets, change_ledger")
    shutil.rmtree(warehouse, ignore_errors=True)
