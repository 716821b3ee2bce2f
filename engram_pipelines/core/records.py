"""The memory and link records: column names, allowed values and their Arrow types.

One place defines what a memory row is, so the store adapters, the importer, the snapshot and the analyses
agree on names and types.
"""

from __future__ import annotations

import pyarrow as pa

TIERS = ("stm", "ltm")
KINDS = ("episodic", "semantic", "summary", "block")
ZONES = ("active", "archived", "purge_queue")
LINK_KINDS = ("duplicate-of", "contradicts", "associated", "summarized-into", "derived-from", "temporal")

TIMESTAMP = pa.timestamp("us", tz="UTC")

# Every column of `memories` except the embedding, in table order. The embedding is stored per adapter
# (float32 bytes in SQLite, pgvector or bytea in PostgreSQL) and snapshotted as a fixed-size float32 list.
MEMORY_FIELDS: list[pa.Field] = [
    pa.field("id", pa.string(), nullable=False),
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("tier", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("content", pa.string(), nullable=False),
    pa.field("embedding_model", pa.string()),
    pa.field("embedded_content_sha", pa.string()),
    pa.field("importance", pa.float64(), nullable=False),
    pa.field("score", pa.float64()),
    pa.field("access_count", pa.int64(), nullable=False),
    pa.field("last_accessed_at", TIMESTAMP),
    pa.field("created_at", TIMESTAMP, nullable=False),
    pa.field("updated_at", TIMESTAMP, nullable=False),
    pa.field("version", pa.int64(), nullable=False),
    pa.field("pinned", pa.bool_(), nullable=False),
    pa.field("zone", pa.string(), nullable=False),
    pa.field("zone_since", TIMESTAMP),
    pa.field("superseded_by", pa.string()),
    pa.field("stale", pa.bool_(), nullable=False),
    pa.field("tags", pa.string(), nullable=False),  # JSON array of strings
    pa.field("metadata", pa.string(), nullable=False),  # JSON object
]
MEMORY_COLUMNS: list[str] = [f.name for f in MEMORY_FIELDS]
TIMESTAMP_COLUMNS = [f.name for f in MEMORY_FIELDS if f.type == TIMESTAMP]

# Columns that a change set may write on an existing row. Access bookkeeping (access_count,
# last_accessed_at), content and pins belong to agents and are never written by a pipeline.
WRITABLE_COLUMNS = (
    "tier",
    "kind",
    "score",
    "stale",
    "zone",
    "zone_since",
    "superseded_by",
    "tags",
    "metadata",
)

LINK_FIELDS: list[pa.Field] = [
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("src_id", pa.string(), nullable=False),
    pa.field("dst_id", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("weight", pa.float64(), nullable=False),
    pa.field("origin", pa.string(), nullable=False),
    pa.field("created_at", TIMESTAMP, nullable=False),
    pa.field("updated_at", TIMESTAMP, nullable=False),
    pa.field("traversed_at", TIMESTAMP),
]
LINK_COLUMNS: list[str] = [f.name for f in LINK_FIELDS]
LINK_TIMESTAMP_COLUMNS = [f.name for f in LINK_FIELDS if f.type == TIMESTAMP]
LINK_KEY = ("src_id", "dst_id", "kind")  # the store's primary key of a link


def memory_schema(embedding_dim: int | None) -> pa.Schema:
    """Arrow schema of a memory snapshot; embeddings are fixed-size float32 lists of `embedding_dim`."""
    fields = list(MEMORY_FIELDS)
    if embedding_dim:
        fields.insert(5, pa.field("embedding", pa.list_(pa.float32(), embedding_dim)))
    else:
        fields.insert(5, pa.field("embedding", pa.list_(pa.float32())))
    return pa.schema(fields)


LINK_SCHEMA = pa.schema(LINK_FIELDS)
