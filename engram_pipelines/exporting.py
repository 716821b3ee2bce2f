"""`export`: every memory as JSON Lines in the import format, streamed (the store round-trips)."""

from __future__ import annotations

import json
from typing import Any, TextIO

from engram_pipelines.store import Store
from engram_pipelines.timestamps import format_timestamp

_EXPORTED = (
    "id",
    "namespace",
    "tier",
    "kind",
    "content",
    "created_at",
    "last_accessed_at",
    "importance",
    "access_count",
    "tags",
    "pinned",
    "metadata",
    "embedding",
    "embedding_model",
)


def export_jsonl(store: Store, out: TextIO, *, embedding_dim: int, batch_size: int = 20_000) -> int:
    count = 0
    for batch in store.iter_memory_batches(batch_size, embedding_dim):
        rows = batch.select(list(_EXPORTED)).to_pylist()
        # A vector of another dimension is NULL in a fixed-size batch: fetch those few rows as they are.
        odd = [r["id"] for r in rows if r["embedding"] is None and r["embedding_model"] is not None]
        raw = store.read_memories(odd) if odd else {}
        for row in rows:
            if row["id"] in raw:
                row["embedding"] = raw[row["id"]]["embedding"].tolist()
            out.write(json.dumps(_import_form(row), ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
    return count


def _import_form(row: dict[str, Any]) -> dict[str, Any]:
    row["created_at"] = format_timestamp(row["created_at"])
    row["last_accessed_at"] = format_timestamp(row["last_accessed_at"])
    row["tags"] = json.loads(row["tags"])
    metadata = json.loads(row["metadata"])
    for key in ("conversation_id", "project_id"):
        if key in metadata:
            row[key] = metadata.pop(key)
    row["metadata"] = metadata
    if row["embedding"] is None:
        row.pop("embedding")
        row.pop("embedding_model")
    return row
