"""What every adapter shares: its result, and which pulled memories a night has hidden since."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_pipelines.store import Store


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
