"""A mem0 store kept by engram-pipelines: mem0's pgvector collection and the product's store, both ways.

mem0 keeps memories in one PostgreSQL table per collection (`id uuid, vector vector(d), payload jsonb`: the text
in `payload.data`, its MD5 in `payload.hash`, `created_at` / `updated_at`, and the scope `user_id` / `agent_id` /
`run_id`) and has no lifecycle: a row is in its `get_all` and `search`, or it is not. So the nights run on the
product's own store, and this adapter moves memories across:

- `pull`: every row of the collection into the store, mapped as `import --format mem0` maps it (namespace =
  its first scope). New ids are inserted; a row whose text changed in mem0 since the last pull is updated
  through the agents' API, as any agent's edit. What the guard needs (mem0's hash and updated_at as pulled) is
  kept under `metadata.mem0`. Vectors are not carried: mem0's are another model's; the nightly embeds the text.
- `push`: every pulled memory the store no longer shows in recall (superseded, archived, queued for purge,
  purged) is deleted from the collection, and only where the row is still what was pulled (same hash and
  updated_at): a write through mem0's own API since the pull wins, and is counted. Each deletion leaves the
  row's pre-image (payload and vector) in the store's audit log (target kind `mem0`).
- `restore`: put a row `push` deleted back into the collection from that pre-image.

With mem0's SQLite history file (`history=`), each deletion and restore is also a DELETE or ADD event there.

mem0's readers need no filter: what a night hid is simply not in the collection any more.
"""

from __future__ import annotations

import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from engram_pipelines.adapters.sync import (
    SyncResult,
    audit,
    connect,
    hidden_since_pull,
    import_new,
    last_deletion,
)
from engram_pipelines.ingest.mem0_format import from_mem0
from engram_pipelines.store import Store

TARGET_KIND = "mem0"  # the audit's target kind (and change set `mem0-push`) of the adapter's writes


class Mem0Collection:
    """One mem0 pgvector collection (`postgresql://...`, table `collection`)."""

    def __init__(self, url: str, collection: str = "mem0", history: str | Path | None = None) -> None:
        self.url = url
        self.collection = collection
        self.table = sql.Identifier(collection)
        # mem0's SQLite history (`history.db`): a push's deletion and a restore are recorded there as mem0
        # records its own DELETE and ADD, so `Memory.history(id)` tells the whole story.
        self.history = Path(history) if history is not None else None

    def _connect(self) -> psycopg.Connection:
        return connect(self.url, "mem0")

    def rows(self) -> list[dict[str, Any]]:
        with self._connect() as conn:
            found = conn.execute(
                sql.SQL("SELECT id::text, payload FROM {} ORDER BY id").format(self.table)
            ).fetchall()
        return [{"id": row[0], "payload": row[1] or {}} for row in found]

    # -- pull ------------------------------------------------------------------------------------------------
    def pull(self, store: Store, *, embedding_dim: int, default_namespace: str | None = None) -> SyncResult:
        result = SyncResult("pull")
        rows = self.rows()
        result.rows = len(rows)
        known = store.read_memories([r["id"] for r in rows])
        new, changed = [], []
        for row in rows:
            line = _import_line(row)
            if row["id"] not in known:
                new.append(line)
            elif _guard(known[row["id"]]) != _pulled(row["payload"]):
                changed.append((known[row["id"]], line))
        import_new(
            store,
            new,
            result,
            embedding_dim=embedding_dim,
            source_format="mem0",
            default_namespace=default_namespace,
        )
        for memory, line in changed:
            metadata = {**memory["metadata"], "mem0": line["metadata"]["mem0"]}
            store.update_memory(memory["id"], memory["version"], content=line["content"], metadata=metadata)
            result.updated += 1
        return result

    # -- push ------------------------------------------------------------------------------------------------
    def push(self, store: Store, *, actor: str) -> SyncResult:
        result = SyncResult("push")
        rows = self.rows()
        result.rows = len(rows)
        with self._connect() as conn:
            for memory_id, pulled in hidden_since_pull(store, [r["id"] for r in rows], TARGET_KIND):
                deleted = conn.execute(
                    sql.SQL(
                        "DELETE FROM {} WHERE id = %s AND payload->>'hash' IS NOT DISTINCT FROM %s "
                        "AND payload->>'updated_at' IS NOT DISTINCT FROM %s RETURNING vector::text, payload"
                    ).format(self.table),
                    (memory_id, pulled.get("hash"), pulled.get("updated_at")),
                ).fetchone()
                if deleted is None:
                    result.skipped_concurrent_edit += 1  # written through mem0 since the pull: it wins
                    continue
                audit(
                    store,
                    TARGET_KIND,
                    actor=actor,
                    target_id=memory_id,
                    op="delete",
                    before={"collection": self.collection, "vector": deleted[0], "payload": deleted[1]},
                    after=None,
                )
                conn.commit()  # one row at a time: the audit row and the deletion go together
                self._record(memory_id, deleted[1], "DELETE")
                result.deleted += 1
        return result

    # -- restore ---------------------------------------------------------------------------------------------
    def restore(self, store: Store, memory_id: str, *, actor: str) -> bool:
        """Put back the row `push` deleted last (False when it is in the collection already)."""
        before = last_deletion(store, TARGET_KIND, memory_id, "mem0 row")
        with self._connect() as conn:
            inserted = conn.execute(
                sql.SQL(
                    "INSERT INTO {} (id, vector, payload) VALUES (%s, %s::vector, %s) ON CONFLICT (id) DO NOTHING "
                    "RETURNING id"
                ).format(sql.Identifier(before["collection"])),
                (memory_id, before["vector"], Jsonb(before["payload"])),
            ).fetchone()
        if inserted is not None:
            self._record(memory_id, before["payload"], "ADD")
            audit(
                store, TARGET_KIND, actor=actor, target_id=memory_id, op="restore", before=None, after=before
            )
        return inserted is not None

    def _record(self, memory_id: str, payload: dict[str, Any], event: str) -> None:
        """One row of mem0's history table, as mem0 writes its own DELETE (old text, deleted) and ADD."""
        if self.history is None:
            return
        text = payload.get("data")
        now = datetime.now(UTC).isoformat()
        with sqlite3.connect(self.history) as con:
            con.execute(_HISTORY_TABLE)
            con.execute(
                "INSERT INTO history (id, memory_id, old_memory, new_memory, event, created_at, updated_at, "
                "is_deleted, actor_id, role) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    str(uuid.uuid4()),
                    memory_id,
                    text if event == "DELETE" else None,
                    None if event == "DELETE" else text,
                    event,
                    payload.get("created_at"),
                    now,
                    1 if event == "DELETE" else 0,
                    payload.get("actor_id"),
                    payload.get("role"),
                ),
            )


# mem0's own history table (mem0.memory.storage), created if the file has none yet.
_HISTORY_TABLE = """CREATE TABLE IF NOT EXISTS history (
    id TEXT PRIMARY KEY, memory_id TEXT, old_memory TEXT, new_memory TEXT, event TEXT,
    created_at DATETIME, updated_at DATETIME, is_deleted INTEGER, actor_id TEXT, role TEXT)"""


def _import_line(row: dict[str, Any]) -> dict[str, Any]:
    """The mem0 row as an import line (`from_mem0` maps it), with mem0's updated_at kept for the guard."""
    payload = row["payload"]
    line = from_mem0({"id": row["id"], "payload": payload})
    given = line.get("metadata")
    metadata: dict[str, Any] = given if isinstance(given, dict) else {}
    line["metadata"] = {**metadata, "mem0": {**metadata.get("mem0", {}), **_pulled(payload)}}
    return line


def _pulled(payload: dict[str, Any]) -> dict[str, Any]:
    return {"hash": payload.get("hash"), "updated_at": payload.get("updated_at")}


def _guard(memory: dict[str, Any]) -> dict[str, Any]:
    pulled = (memory.get("metadata") or {}).get("mem0") or {}
    return {"hash": pulled.get("hash"), "updated_at": pulled.get("updated_at")}
