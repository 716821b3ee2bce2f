"""A LangGraph store kept by engram-pipelines: `langgraph-checkpoint-postgres`'s PostgresStore, both ways.

The store keeps items in a table `store` (`prefix` = the namespace tuple joined by dots, `key`, `value` jsonb,
`created_at`, `updated_at`) and, with a vector index, their embeddings in `store_vectors` (deleted with the item).
It has no lifecycle either, so, as for mem0 (`engram_pipelines.adapters.mem0`):

- `pull`: every item into the product's store as a memory whose id is derived from (prefix, key), namespace the
  prefix, content the item's text (`content`, `text`, `memory` or `data`, or LangMem's `content.content`; else
  the whole value as JSON), metadata the rest of the value, and under `metadata.langgraph` the prefix, key and
  `updated_at` as pulled. Items changed through LangGraph since the last pull are updated (an agent's edit).
- `push`: every pulled memory the store no longer shows in recall is deleted from `store` (its vectors with
  it), only where `updated_at` is still the one pulled: a `put` through LangGraph since then wins. The item's
  row and vectors go to the product's audit log (target kind `langgraph`).
- `restore`: put an item `push` deleted back, with its vectors.

`store.search` and `store.get` read those tables, so they no longer return what a night hid.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from engram_pipelines.adapters.sync import (
    SyncResult,
    audit,
    connect,
    hidden_since_pull,
    import_new,
    last_deletion,
)
from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.store import Store

TARGET_KIND = "langgraph"  # the audit's target kind (and change set `langgraph-push`) of the adapter's writes
TEXT_FIELDS = ("content", "text", "memory", "data")
# Memory ids of LangGraph items: a UUID of (prefix, key) in a namespace of its own, stable across pulls.
ID_NAMESPACE = uuid.UUID("6f1c2d1e-4f0b-4d55-9a43-2b8a39c1e7a5")


def memory_id(prefix: str, key: str) -> str:
    return str(uuid.uuid5(ID_NAMESPACE, f"{prefix}\x1f{key}"))


class LangGraphStore:
    """The `store` table of a LangGraph PostgresStore at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _connect(self) -> psycopg.Connection:
        return connect(self.url, "LangGraph")

    def items(self) -> list[dict[str, Any]]:
        with self._connect() as conn:
            rows = conn.execute(
                "SELECT prefix, key, value, created_at, updated_at FROM store ORDER BY prefix, key"
            ).fetchall()
        return [
            {"prefix": p, "key": k, "value": v, "created_at": c, "updated_at": u} for p, k, v, c, u in rows
        ]

    def pull(self, store: Store, *, embedding_dim: int) -> SyncResult:
        result = SyncResult("pull")
        items = self.items()
        result.rows = len(items)
        lines = {memory_id(i["prefix"], i["key"]): _import_line(i) for i in items}
        known = store.read_memories(list(lines))
        new = [line for mid, line in lines.items() if mid not in known]
        import_new(store, new, result, embedding_dim=embedding_dim)
        for mid, memory in known.items():
            line = lines[mid]
            pulled = (memory["metadata"] or {}).get("langgraph") or {}
            if pulled.get("updated_at") != line["metadata"]["langgraph"]["updated_at"]:
                metadata = {**(memory["metadata"] or {}), **line["metadata"]}  # the pipeline's marks stay
                store.update_memory(mid, memory["version"], content=line["content"], metadata=metadata)
                result.updated += 1
        return result

    def push(self, store: Store, *, actor: str) -> SyncResult:
        result = SyncResult("push")
        items = self.items()
        result.rows = len(items)
        with self._connect() as conn:
            ids = [memory_id(i["prefix"], i["key"]) for i in items]
            indexed = _has_vectors(conn)  # a store without a vector index has no store_vectors table
            for mid, pulled in hidden_since_pull(store, ids, TARGET_KIND):
                key = (pulled["prefix"], pulled["key"])
                vectors = (
                    conn.execute(
                        "SELECT field_name, embedding::text FROM store_vectors WHERE prefix = %s AND key = %s",
                        key,
                    ).fetchall()
                    if indexed
                    else []
                )
                deleted = conn.execute(
                    "DELETE FROM store WHERE prefix = %s AND key = %s AND updated_at = %s::timestamptz "
                    "RETURNING value, created_at, updated_at",
                    (*key, pulled["updated_at"]),
                ).fetchone()
                if deleted is None:
                    conn.rollback()
                    result.skipped_concurrent_edit += 1  # put through LangGraph since the pull: it wins
                    continue
                audit(
                    store,
                    TARGET_KIND,
                    actor=actor,
                    target_id=mid,
                    op="delete",
                    before={
                        "prefix": key[0],
                        "key": key[1],
                        "value": deleted[0],
                        "created_at": format_timestamp(deleted[1]),
                        "updated_at": format_timestamp(deleted[2]),
                        "vectors": [list(v) for v in vectors],
                    },
                    after=None,
                )
                conn.commit()
                result.deleted += 1
        return result

    def restore(self, store: Store, mid: str, *, actor: str) -> bool:
        """Put back the item `push` deleted last, with its vectors (False when it is there already)."""
        item = last_deletion(store, TARGET_KIND, mid, "LangGraph item")
        with self._connect() as conn:
            inserted = conn.execute(
                "INSERT INTO store (prefix, key, value, created_at, updated_at) VALUES (%s, %s, %s, %s, %s) "
                "ON CONFLICT (prefix, key) DO NOTHING RETURNING key",
                (item["prefix"], item["key"], Jsonb(item["value"]), item["created_at"], item["updated_at"]),
            ).fetchone()
            if inserted is not None:
                for field_name, embedding in item["vectors"]:
                    conn.execute(
                        "INSERT INTO store_vectors (prefix, key, field_name, embedding) VALUES (%s, %s, %s, %s::vector)",
                        (item["prefix"], item["key"], field_name, embedding),
                    )
        if inserted is not None:
            audit(store, TARGET_KIND, actor=actor, target_id=mid, op="restore", before=None, after=item)
        return inserted is not None


def _has_vectors(conn: psycopg.Connection) -> bool:
    (exists,) = conn.execute("SELECT to_regclass('store_vectors') IS NOT NULL").fetchone() or (False,)
    return bool(exists)


def _text_of(value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The item's text and the rest of its value."""
    for name in TEXT_FIELDS:
        text = value.get(name)
        if isinstance(text, str) and text.strip():
            return text, {k: v for k, v in value.items() if k != name}
        if isinstance(text, dict) and isinstance(
            text.get("content"), str
        ):  # LangMem: {"content": {"content"}}
            return text["content"], {k: v for k, v in value.items() if k != name}
    return json.dumps(value, ensure_ascii=False, sort_keys=True), {}


def _import_line(item: dict[str, Any]) -> dict[str, Any]:
    text, rest = _text_of(item["value"] or {})
    updated = item["updated_at"]
    return {
        "id": memory_id(item["prefix"], item["key"]),
        "namespace": item["prefix"],
        "content": text,
        "created_at": format_timestamp(item["created_at"] or dt.datetime.now(dt.UTC)),
        "metadata": {
            **rest,
            "langgraph": {
                "prefix": item["prefix"],
                "key": item["key"],
                "updated_at": format_timestamp(updated) if updated else None,
            },
        },
    }
