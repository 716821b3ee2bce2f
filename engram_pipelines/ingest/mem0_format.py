"""mem0's memory records read as import lines (`engram-pipelines import FILE --format mem0`).

A mem0 export line is an item of `Memory.get_all()` (`id`, `memory`, `hash`, `metadata`, `created_at`,
`updated_at`, and the scope it was written under: `user_id`, `agent_id`, `run_id`, with `actor_id` and `role`
for chat messages), or a row of its vector store (`id` and a payload whose text is `data`). mem0 lines failed
the import before ("unknown field: memory, user_id").

Back (`export --format mem0`): each memory visible in recall becomes a `Memory.get_all()` item again, its
scopes from `metadata.mem0` (else from its namespace), `hash` the MD5 of the text as mem0 computes it. Rows
the pipeline hid (superseded, archived, queued for purge) are left out: mem0 has no lifecycle, so loading them
back into mem0 would bring them back into its search.

Mapping: the text is the content; the first scope of `user_id`, `agent_id`, `run_id` is the namespace
(`user:alice`, `agent:coder`, `run:42`: memories of one user are one namespace, as mem0 scopes its reads); the
rest of mem0's own fields (its content hash, the other scopes, actor and role) are kept under `metadata.mem0`,
so nothing is dropped and an export can give them back. A search `score` is a property of a query, not of the
memory, and is left out. Any other field stays as it is, so the importer still names it if it is unknown.
"""

from __future__ import annotations

import hashlib
from typing import Any

SCOPES = (("user_id", "user"), ("agent_id", "agent"), ("run_id", "run"))
KEPT_UNDER_METADATA = ("hash", "user_id", "agent_id", "run_id", "actor_id", "role")
# A vector-store payload's fields that are mem0's own; any other key is the memory's metadata, flattened.
PAYLOAD_FIELDS = frozenset({"data", "created_at", "updated_at", "text_lemmatized", *KEPT_UNDER_METADATA})


def from_mem0(record: dict[str, Any]) -> dict[str, Any]:
    """One mem0 memory as an import record (the input is not modified)."""
    line = dict(record)
    payload = line.pop("payload", None)
    if isinstance(payload, dict):  # a vector-store row: mem0 flattens the memory's own metadata into it
        own = {k: v for k, v in payload.items() if k not in PAYLOAD_FIELDS}
        line = {**{k: v for k, v in payload.items() if k in PAYLOAD_FIELDS}, **line}
        if own:
            line["metadata"] = {**own, **(line.get("metadata") or {})}
    text = line.pop("memory", None)
    data = line.pop("data", None)
    if "content" not in line and (text is not None or data is not None):
        line["content"] = text if text is not None else data
    line.pop("score", None)
    line.pop("text_lemmatized", None)  # mem0's keyword-search copy of the text
    kept = {key: line.pop(key) for key in KEPT_UNDER_METADATA if line.get(key) is not None}
    for key in KEPT_UNDER_METADATA:
        line.pop(key, None)  # present but null
    if "namespace" not in line:
        scope = next(((prefix, kept[key]) for key, prefix in SCOPES if key in kept), None)
        if scope is not None:
            line["namespace"] = f"{scope[0]}:{scope[1]}"
    if kept:
        metadata = line.get("metadata")
        line["metadata"] = {**(metadata if isinstance(metadata, dict) else {}), "mem0": kept}
        if metadata is not None and not isinstance(metadata, dict):
            line["metadata"] = metadata  # not an object: the importer says so, naming the field
    return line


def to_mem0(row: dict[str, Any]) -> dict[str, Any]:
    """One memory (an export row: metadata parsed, timestamps as text) as a mem0 `Memory.get_all()` item."""
    metadata = dict(row.get("metadata") or {})
    kept = metadata.pop("mem0", None) or {}
    item: dict[str, Any] = {
        "id": row["id"],
        "memory": row["content"],
        "hash": hashlib.md5(row["content"].encode("utf-8")).hexdigest(),
        "metadata": metadata,
        "created_at": row.get("created_at"),
        "updated_at": row.get("updated_at"),
    }
    scopes = {key: kept[key] for key, _ in SCOPES if key in kept}
    if not scopes:
        prefix, _, value = str(row["namespace"]).partition(":")
        key = next((key for key, name in SCOPES if name == prefix), None)
        scopes = {key: value} if key and value else {"user_id": row["namespace"]}
    item.update(scopes)
    item.update({key: kept[key] for key in ("actor_id", "role") if key in kept})
    return item
