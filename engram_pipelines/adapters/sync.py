"""What every adapter shares: its connection, its result, importing what it pulled, which pulled memories a
night has hidden since, and the audit rows of its deletions and restores."""

from __future__ import annotations

import json
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from engram_pipelines.changes.revert import RestoreError
from engram_pipelines.ingest.load import import_jsonl
from engram_pipelines.store import Store, StoreError, redact


def connect(url: str, what: str) -> psycopg.Connection:
    """A connection to the other store; an unreachable one is a StoreError naming it (password redacted)."""
    try:
        return psycopg.connect(url)
    except psycopg.OperationalError as error:
        raise StoreError(f"cannot reach the {what} store {redact(url)}: {error}".strip()) from None


@dataclass
class SyncResult:
    """What a pull or a push did (counts, and a few rejected lines' reasons)."""

    direction: str
    rows: int = 0  # rows of the collection read
    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    skipped_concurrent_edit: int = 0
    rejected: int = 0
    samples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v or k in ("direction", "rows")}


def hidden_since_pull(store: Store, ids: Sequence[str], key: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, what was pulled under metadata[key]) of each of `ids` the store no longer shows in recall:
    superseded, archived, queued for purge, or purged (then from its deletion's pre-image). Memories without
    metadata[key] were not pulled by this adapter and are left out, and so are those a person restored into the
    other store after a push (its audit's last word on the row, target kind `key`, is `restore`): a restore is a
    decision to keep the row there."""
    visible = set(store.visible_ids(ids))
    present = store.read_memories(ids)
    purged = store.deleted_memories([i for i in ids if i not in present])
    hidden = [(i, present[i]["metadata"]) for i in ids if i in present and i not in visible]
    hidden += [(i, before.get("metadata") or {}) for i, before in purged.items()]
    for memory_id, metadata in hidden:
        pulled = metadata.get(key) if isinstance(metadata, dict) else None
        if not (isinstance(pulled, dict) and pulled):
            continue
        history = [a["op"] for a in store.audit_rows(target_id=memory_id) if a["target_kind"] == key]
        if history and history[-1] == "restore":
            continue
        yield memory_id, pulled


def import_new(
    store: Store,
    lines: list[dict[str, Any]],
    result: SyncResult,
    *,
    embedding_dim: int,
    source_format: str = "engram",
    default_namespace: str | None = None,
) -> None:
    """Insert pulled memories through the importer (its validation, rejects and idempotent ids), into `result`."""
    if not lines:
        return
    with tempfile.TemporaryDirectory(prefix="engram-pull-") as tmp:
        path = Path(tmp) / "pulled.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        summary = import_jsonl(
            store,
            path,
            default_namespace=default_namespace,
            embedding_dim=embedding_dim,
            rejects_path=Path(tmp) / "rejects.jsonl",
            source_format=source_format,
        )
    result.inserted, result.rejected = summary.imported, summary.rejected_lines
    result.samples = [f"line {r.line}: {r.field}: {r.reason}" for r in summary.reject_samples[:5]]


def audit(
    store: Store,
    kind: str,
    *,
    actor: str,
    target_id: str,
    op: str,
    before: dict[str, Any] | None,
    after: dict[str, Any] | None,
) -> None:
    """The audit row of a push's deletion (`op` delete, the pre-image in `before`) or of a restore, under the
    change set `<kind>-push` and target kind `kind`."""
    store.audit_external(
        actor=actor,
        change_set_id=f"{kind}-push",
        change_id=f"{kind}-{'push' if op == 'delete' else op}:{uuid.uuid4().hex[:20]}",
        target_kind=kind,
        target_id=target_id,
        op=op,
        before=before,
        after=after,
    )


def last_deletion(store: Store, kind: str, target_id: str, what: str) -> dict[str, Any]:
    """The pre-image of the latest push deletion of `target_id` (RestoreError when a push never deleted it)."""
    entries = [
        a for a in store.audit_rows(target_id=target_id) if a["target_kind"] == kind and a["op"] == "delete"
    ]
    if not entries:
        raise RestoreError(f"no {what} {target_id} was deleted by a push (nothing in this store's audit log)")
    return entries[-1]["before"]
