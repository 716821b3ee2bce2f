"""The live store: `open_store(url)` picks the adapter from the URL scheme."""

from __future__ import annotations

from engram_pipelines.store.base import Store
from engram_pipelines.store.changelog import ChangeSetRecord, Outcome
from engram_pipelines.store.core import MigrationRequired, StoreBusy, StoreError, VersionConflict
from engram_pipelines.store.urls import redact
from engram_pipelines.store.writes import Guard, LinkRevert, LinkWrite, MemoryWrite

__all__ = [
    "ChangeSetRecord",
    "Guard",
    "LinkRevert",
    "LinkWrite",
    "MemoryWrite",
    "MigrationRequired",
    "Outcome",
    "Store",
    "StoreBusy",
    "StoreError",
    "VersionConflict",
    "open_store",
    "redact",
]


def open_store(url: str, *, migrate: bool = False, require_schema: bool = True) -> Store:
    """Open the store at `url` (sqlite:///path or postgresql://...).

    With `migrate`, pending migrations are applied (a missing SQLite file is created); otherwise a store
    behind the code's schema, or a SQLite file that does not exist, raises MigrationRequired naming the
    command that fixes it.
    """
    if url.startswith("sqlite:"):
        from engram_pipelines.store.sqlite import SQLiteStore

        store: Store = SQLiteStore(url, create=migrate)
    elif url.startswith(("postgresql://", "postgres://")):
        from engram_pipelines.store.postgres import PostgresStore

        store = PostgresStore(url)
    else:
        raise StoreError(
            f"unknown store URL {redact(url)!r}: use sqlite:///path/to/engram.db or "
            "postgresql://user:password@host:5432/dbname"
        )
    if migrate:
        store.migrate()
    elif require_schema:
        try:
            store.require_schema()
        except MigrationRequired:
            store.close()
            raise
    return store
