"""Undo an applied change set from its audit pre-images (CAS-guarded), restore a purged memory, approve."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

from engram_pipelines.changes.registry import find_change_set, verify_change_set
from engram_pipelines.records import WRITABLE_COLUMNS
from engram_pipelines.store import LinkWrite, MemoryWrite, Outcome, Store
from engram_pipelines.timestamps import format_timestamp, utc_now


class RestoreError(LookupError):
    pass


@dataclass
class RevertResult:
    change_set_id: str
    reverted: int = 0
    skipped_edited_since: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "change_set_id": self.change_set_id,
            "reverted": self.reverted,
            "skipped_edited_since": len(self.skipped_edited_since),
            "skipped_ids": self.skipped_edited_since[:50],
        }


def approve_change_set(store: Store, change_set_id: str, *, actor: str) -> None:
    record = find_change_set(store, change_set_id)
    if record.status != "proposed":
        raise ValueError(
            f"change set {change_set_id} is {record.status}; only a proposed set can be approved"
        )
    verify_change_set(record)  # what is approved is the plan that was proposed
    store.update_change_set(change_set_id, status="approved", approved_at=utc_now(), approved_by=actor)


def revert_change_set(store: Store, change_set_id: str, *, actor: str = "engram-pipelines") -> RevertResult:
    """Put every row the set changed back to its pre-image, unless the row was edited since (then skip)."""
    record = find_change_set(store, change_set_id)
    if record.status != "applied":
        raise ValueError(
            f"change set {change_set_id} is {record.status}; only an applied set can be reverted"
        )
    result = RevertResult(change_set_id)
    revert_set = f"{change_set_id}:revert"
    audit = [a for a in store.audit_rows(change_set_id=change_set_id) if a["change_id"]]
    with store.exclusive_apply():
        _revert_entries(store, audit, actor, revert_set, result)
    store.update_change_set(change_set_id, status="reverted", reverted_at=utc_now())
    return result


_BATCH = 1000


def _revert_entries(
    store: Store, audit: list[dict[str, Any]], actor: str, revert_set: str, result: RevertResult
) -> None:
    """Newest first; runs of link writes and of row updates go to the store in batches (one transaction each),
    so reverting a nightly's hundreds of thousands of changes does not take a transaction per change."""
    batched = {"link": _revert_links, "update": _revert_updates}
    for kind, run in itertools.groupby(reversed(audit), key=_entry_kind):
        entries = list(run)
        if kind in batched:
            for start in range(0, len(entries), _BATCH):
                batched[kind](store, entries[start : start + _BATCH], actor, revert_set, result)
        elif kind == "insert":
            for entry in entries:
                _revert_insert(store, entry, actor, revert_set, result)
        else:  # a deleted row: back from its pre-image
            for entry in entries:
                if store.restore_preimage(
                    entry["before"], actor=actor, reason=f"revert of {result.change_set_id}"
                ):
                    result.reverted += 1
                else:
                    result.skipped_edited_since.append(entry["target_id"])


def _entry_kind(entry: dict[str, Any]) -> str:
    if entry["target_kind"] == "link":
        return "link"
    if entry["op"] == "insert":
        return "insert"
    return "deleted" if entry["before"] is not None and entry["after"] is None else "update"


def _revert_updates(
    store: Store, entries: list[dict[str, Any]], actor: str, revert_set: str, result: RevertResult
) -> None:
    writes = []
    for entry in entries:
        patch = {c: entry["before"][c] for c in WRITABLE_COLUMNS}
        patch["stale"] = bool(patch["stale"])
        writes.append(
            MemoryWrite(
                change_id=f"revert:{entry['change_id']}",
                target_id=entry["target_id"],
                expected_version=int(entry["after"]["version"]),
                op="revert",
                patch=patch,
            )
        )
    landed = store.cas_write_memories(writes, actor=actor, change_set_id=revert_set)
    result.reverted += len(landed)
    missed = [w for w in writes if w.change_id not in landed]
    result.skipped_edited_since.extend(w.target_id for w in missed)
    store.record_outcomes(
        revert_set,
        [Outcome(w.change_id, w.target_id, "revert_skipped", "edited since the apply") for w in missed],
    )


def _revert_links(
    store: Store, entries: list[dict[str, Any]], actor: str, revert_set: str, result: RevertResult
) -> None:
    store.write_links(
        [
            LinkWrite(
                f"revert:{e['change_id']}",
                "link_delete" if e["before"] is None else "link_upsert",
                e["after"] if e["before"] is None else e["before"],
            )
            for e in entries
        ],
        actor=actor,
        change_set_id=revert_set,
    )
    result.reverted += len(entries)


def _revert_insert(
    store: Store, entry: dict[str, Any], actor: str, revert_set: str, result: RevertResult
) -> None:
    write = MemoryWrite(f"revert:{entry['change_id']}", entry["target_id"], 1, "revert-insert")
    if store.cas_write_memories([write], actor=actor, change_set_id=revert_set, delete=True):
        result.reverted += 1
    else:
        result.skipped_edited_since.append(entry["target_id"])


def restore_memory(store: Store, memory_id: str, *, actor: str = "engram-pipelines") -> dict[str, Any]:
    """Bring a purged memory back under its original id from its pre-image audit row; only once.

    It comes back Active, its zone clock restarted: restored in the zone it was purged from (the purge queue,
    grace long expired) the next night would purge it again."""
    if store.get(memory_id) is not None:
        raise RestoreError(f"memory {memory_id} exists; nothing to restore")
    deletions = [
        a
        for a in store.audit_rows(target_id=memory_id)
        if a["target_kind"] == "memory"
        and a["after"] is None
        and a["before"] is not None
        and a["op"] != "insert"
    ]
    if not deletions:
        raise RestoreError(f"no audit pre-image for memory {memory_id}: it was never purged by this pipeline")
    preimage = _back_to_active(deletions[-1]["before"])
    if not store.restore_preimage(preimage, actor=actor, reason="restore"):
        raise RestoreError(f"memory {memory_id} exists; nothing to restore")
    return {"id": memory_id, "restored_from_audit_id": deletions[-1]["audit_id"]}


def _back_to_active(preimage: dict[str, Any]) -> dict[str, Any]:
    metadata = preimage.get("metadata") or {}
    metadata = json.loads(metadata) if isinstance(metadata, str) else dict(metadata)
    now = utc_now()
    metadata["restored"] = {"at": format_timestamp(now), "fromZone": preimage.get("zone")}
    return {**preimage, "zone": "active", "zone_since": format_timestamp(now), "metadata": metadata}
