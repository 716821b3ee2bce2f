"""Build snapshot-shaped Arrow tables by hand for the lifecycle tests (no store needed)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa

from engram_pipelines.core import records

AS_OF = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def days_ago(days: float) -> dt.datetime:
    return AS_OF - dt.timedelta(days=days)


def snapshot(rows: list[dict[str, Any]], dim: int = 4) -> pa.Table:
    """Memories with defaults for every column; `tags`/`metadata` may be given as python values."""
    full = []
    for i, row in enumerate(rows):
        base = {
            "id": f"m{i}",
            "namespace": "ns1",
            "tier": "stm",
            "kind": "episodic",
            "content": "a plain note",
            "embedding": None,
            "embedding_model": None,
            "embedded_content_sha": None,
            "importance": 0.5,
            "score": None,
            "access_count": 0,
            "last_accessed_at": None,
            "created_at": AS_OF,
            "updated_at": AS_OF,
            "version": 1,
            "pinned": False,
            "zone": "active",
            "zone_since": None,
            "superseded_by": None,
            "stale": False,
            "tags": [],
            "metadata": {},
        }
        base.update(row)
        base["tags"] = json.dumps(base["tags"])
        base["metadata"] = json.dumps(base["metadata"])
        full.append(base)
    return pa.Table.from_pylist(full, schema=records.memory_schema(dim))
