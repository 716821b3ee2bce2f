"""`export`: every memory as JSON Lines in the import format, streamed (the store round-trips).

An export is what an operator keeps as a backup, so it carries the whole row: the agents' fields and the
pipeline's lifecycle state (zone and since when, stale, score, superseded_by), `updated_at` and the hash the
vector was made from. Only `version` stays behind (see `_EXPORTED`).
"""

from __future__ import annotations

import json
from typing import Any, TextIO

from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.ingest.mem0_format import to_mem0
from engram_pipelines.store import Store

# Every column of `memories` except `version`. The version is the store's CAS counter: it counts the writes
# of this store, and only means something next to the expected versions of readers of this same store (change
# sets, agents' edits). Neither the audit log nor the change sets travel with an export, so a re-imported row
# starts a history of its own at version 1 rather than carry a count that no longer refers to anything.
# `updated_at` is exported: it is a fact about the row (when it was last written), shown by `explain`, and
# retention reads it as the zone clock of a row without `zone_since`.
_EXPORTED = (
    "id",
    "namespace",
    "tier",
    "kind",
    "content",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "importance",
    "access_count",
    "tags",
    "pinned",
    "metadata",
    "embedding",
    "embedding_model",
    "embedded_content_sha",
    "zone",
    "zone_since",
    "stale",
    "score",
    "superseded_by",
)
_TIMESTAMPS = ("created_at", "updated_at", "last_accessed_at", "zone_since")


def export_jsonl(
    store: Store, out: TextIO, *, embedding_dim: int, batch_size: int = 20_000, target_format: str = "engram"
) -> int:
    """Every memory in the import format; with `target_format` "mem0", the memories recall shows, as mem0's
    `Memory.get_all()` items (`engram_pipelines.ingest.mem0_format.to_mem0`)."""
    if target_format not in ("engram", "mem0"):
        raise ValueError(f"unknown export format {target_format!r}: engram or mem0")
    count = 0
    # What recall shows (the store's recall_memories view: not hidden, not a source a node carries).
    visible = (
        {r[0] for r in store.query("SELECT id FROM recall_memories")} if target_format == "mem0" else set()
    )
    for batch in store.iter_memory_batches(batch_size, embedding_dim):
        rows = batch.select(list(_EXPORTED)).to_pylist()
        if target_format == "mem0":
            for row in rows:
                if row["id"] in visible:
                    out.write(
                        json.dumps(to_mem0(_import_form(row)), ensure_ascii=False, sort_keys=True) + "\n"
                    )
                    count += 1
            continue
        # A vector of another dimension is NULL in a fixed-size batch: fetch those few rows as they are.
        odd = [r["id"] for r in rows if r["embedding"] is None and r["embedding_model"] is not None]
        raw = store.read_memories(odd) if odd else {}
        for row in rows:
            vector = raw[row["id"]]["embedding"] if row["id"] in raw else None
            if vector is not None:  # None: a model named without a vector (imports keep such a model)
                row["embedding"] = vector.tolist()
            out.write(json.dumps(_import_form(row), ensure_ascii=False, sort_keys=True) + "\n")
            count += 1
    return count


def _import_form(row: dict[str, Any]) -> dict[str, Any]:
    for name in _TIMESTAMPS:
        row[name] = format_timestamp(row[name])  # the store's canonical text, so re-exports are identical
    row["tags"] = json.loads(row["tags"])
    metadata = json.loads(row["metadata"])
    for key in ("conversation_id", "project_id"):
        if key in metadata:
            row[key] = metadata.pop(key)
    row["metadata"] = metadata
    for name in ("embedding", "embedding_model", "embedded_content_sha"):
        if row[name] is None:  # most rows of an agent's import have none of the three: keep lines short
            row.pop(name)
    return row
