"""Undo an applied change set from its audit pre-images (CAS-guarded), restore a purged memory, approve."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_pipelines.changes.registry import find_change_set, registered_change_set, verify_change_set
from engram_pipelines.core.records import WRITABLE_COLUMNS
from engram_pipelines.core.timestamps import format_timestamp, utc_now
from engram_pipelines.store import LinkRevert, MemoryWrite, Outcome, Store


class RestoreError(LookupError):
    pass


@dataclass
class RevertResult:
    change_set_id: str  # the set, or the night's sets comma-joined
    reverted: int = 0
    skipped_edited_since: list[str] = field(default_factory=list)
    change_sets: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "change_set_id": self.change_set_id,
            "change_sets": self.change_sets,
            "reverted": self.reverted,
            "skipped_edited_since": len(self.skipped_edited_since),
            "skipped_ids": self.skipped_edited_since[:50],
        }


def approve_change_set(
    store: Store, change_set_id: str, *, actor: str, warehouse_root: str | Path | None = None
) -> None:
    record = find_change_set(store, change_set_id, warehouse_root)
    if record.status != "proposed":
        raise ValueError(
            f"change set {change_set_id} is {record.status}; only a proposed set can be approved"
        )
    verify_change_set(record)  # what is approved is the plan that was proposed
    store.update_change_set(change_set_id, status="approved", approved_at=utc_now(), approved_by=actor)


def revert_change_set(store: Store, change_set_id: str, *, actor: str = "engram-pipelines") -> RevertResult:
    """Put every row the set changed back to its pre-image, unless the row was edited since (then skip)."""
    record = registered_change_set(store, change_set_id)
    if record.status != "applied":
        raise ValueError(
            f"change set {change_set_id} is {record.status}; only an applied set can be reverted"
        )
    return _revert(store, [change_set_id], f"{change_set_id}:revert", actor)


def revert_night(
    store: Store, as_of: str, *, job: str | None = None, actor: str = "engram-pipelines"
) -> RevertResult:
    """Revert every applied set of one as-of day (of one job, or all) as one: each row or link goes back to its
    state before the first of them, guarded by the state the last of them left. (Set by set, the revert of a
    later set moves a row's version on, and the earlier set's revert would then skip it as edited.)"""
    ids = [
        r.change_set_id
        for r in store.list_change_sets()
        if r.as_of == as_of and r.status == "applied" and (job is None or r.job == job)
    ]
    if not ids:
        raise ValueError(f"no applied change set for {as_of}{f' ({job})' if job else ''}: nothing to revert")
    return _revert(store, ids, f"night-{as_of}{f'-{job}' if job else ''}:revert", actor)


def _revert(store: Store, change_set_ids: list[str], revert_set: str, actor: str) -> RevertResult:
    result = RevertResult(", ".join(change_set_ids), change_sets=change_set_ids)
    audit = [a for i in change_set_ids for a in store.audit_rows(change_set_id=i) if a["change_id"]]
    with store.exclusive_apply():
        _revert_entries(store, _net_entries(audit), actor, revert_set, result)
    for change_set_id in change_set_ids:
        store.update_change_set(change_set_id, status="reverted", reverted_at=utc_now())
    return result


def _net_entries(audit: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per row or link, in audit order: its state before the first write (`before`) and after the
    last (`after`). A set writes each target once, so for one set this is the audit as it is."""
    net: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in sorted(audit, key=lambda a: a["audit_id"]):
        key = (entry["target_kind"], entry["target_id"])
        first = net.get(key)
        if first is None:
            net[key] = entry
        elif first["before"] is None and entry["after"] is None:
            del net[key]  # created and deleted by the same night: nothing to undo
        elif entry["after"] is None and entry["target_kind"] == "memory":
            # Updated, then purged: the purge's pre-image is the whole row (content, vector); the first
            # write's pre-image holds the columns as they were before the night.
            net[key] = {**entry, "before": {**entry["before"], **first["before"]}, "op": first["op"]}
        else:
            net[key] = {**entry, "before": first["before"], "op": first["op"]}
    return sorted(net.values(), key=lambda a: a["audit_id"])


_BATCH = 1000


def _revert_entries(
    store: Store, audit: list[dict[str, Any]], actor: str, revert_set: str, result: RevertResult
) -> None:
    """Newest first; runs of link writes and of row updates go to the store in batches (one transaction each),
    so reverting a nightly's hundreds of thousands of changes does not take a transaction per change."""
    batched = {"link": _revert_links, "update": _revert_updates}
    # Purged rows first: a link the set deleted with them is only put back between memories that exist. (Each
    # target has one entry, so the order between targets changes nothing else.)
    deleted = [e for e in audit if _entry_kind(e) == "deleted"]
    audit = [e for e in audit if _entry_kind(e) != "deleted"] + deleted
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
    reverts = []
    for e in entries:
        src, dst, kind = e["target_id"].split("|")
        reverts.append(LinkRevert(f"revert:{e['change_id']}", (src, dst, kind), e["after"], e["before"]))
    outcomes = store.revert_links(reverts, actor=actor, change_set_id=revert_set)
    result.reverted += sum(detail is None for detail in outcomes.values())
    result.skipped_edited_since.extend("|".join(r.key) for r in reverts if outcomes[r.change_id] is not None)


def _revert_insert(
    store: Store, entry: dict[str, Any], actor: str, revert_set: str, result: RevertResult
) -> None:
    version = int(entry["after"].get("version", 1))  # 1 unless a later set of the same night updated it
    write = MemoryWrite(f"revert:{entry['change_id']}", entry["target_id"], version, "revert-insert")
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
