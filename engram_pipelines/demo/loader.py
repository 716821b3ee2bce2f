"""`demo`: put the generated demo corpus into a store (once), so the nightly job has something to do."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pyarrow as pa

from engram_pipelines.store import Store, open_store
from engram_pipelines.store.sqlite import sqlite_path

LOAD_BATCH = 20_000


def load_demo(
    store: Store, *, size: int, seed: int, as_of: dt.date, vectors: bool = True
) -> dict[str, int] | None:
    """Generate and insert the demo corpus unless the store holds memories already (then None).

    `vectors=False` leaves the generated vectors out (and their model): the nightly embeds every text with the
    configured embedder, as for a store written without vectors or with another model's."""
    from engram_pipelines.demo.corpus import generate

    if store.count("memories"):
        return None
    corpus = generate(size, seed=seed, as_of=as_of)
    memories = corpus.memories
    if not vectors:
        for name in ("embedding", "embedding_model", "embedded_content_sha"):
            column = memories.schema.get_field_index(name)
            memories = memories.set_column(
                column, name, pa.nulls(memories.num_rows, memories.schema.field(name).type)
            )
    inserted = 0
    for batch in memories.to_batches(LOAD_BATCH):
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
