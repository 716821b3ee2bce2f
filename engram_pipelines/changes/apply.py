"""Apply a stored change set to the live store: batched, CAS-guarded, audited, resumable.

For each batch of changes, one transaction writes every change whose row still has the version (and the
access/pin evidence) the snapshot saw, with an audit pre-image and a ledger row. A miss is re-read: if the
row still qualifies, its patch is re-derived on the fresh row and written once more; a second miss is
`skipped_concurrent_edit` (the concurrent editor wins), a row that no longer qualifies is `ineligible`. A change
justified by neglect (archive, queue for purge, purge) is not re-derived when the row was edited since the
snapshot by anyone but the pipeline (its version moved past the pipeline's own audited writes): the edit is
evidence the row is alive, so it is `skipped_concurrent_edit` at once.
Changes already in the ledger are skipped, so a re-run is a no-op and a crashed run resumes
(`resume_interrupted` finishes such sets before the next night reads the store).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.changes.intents import (
    REVIEWED_CLASSES,
    Ineligible,
    Intent,
    check_eligible,
    diff,
    fold,
    hide_by_neglect,
    hides,
    hides_by_ops,
)
from engram_pipelines.changes.registry import find_change_set, read_changes, verify_change_set
from engram_pipelines.core import jsontext
from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.core.timestamps import end_of_day, utc_now
from engram_pipelines.store import ChangeSetRecord, Guard, LinkWrite, MemoryWrite, Outcome, Store

OUTCOMES = ("applied", "skipped_concurrent_edit", "ineligible")


class ReviewRequired(PermissionError):
    pass


class ChangeSetStateError(RuntimeError):
    pass


@dataclass
class ApplyResult:
    change_set_id: str
    total: int
    applied: int = 0
    skipped_concurrent_edit: int = 0
    ineligible: int = 0
    retried: int = 0
    resumed_from: int = 0  # changes already in the ledger when this run started
    seconds: float = 0.0
    ineligible_reasons: dict[str, int] = field(default_factory=dict)

    @property
    def accounted(self) -> bool:
        return self.applied + self.skipped_concurrent_edit + self.ineligible == self.total

    def as_dict(self) -> dict[str, Any]:
        return {
            "change_set_id": self.change_set_id,
            "total": self.total,
            "applied": self.applied,
            "skipped_concurrent_edit": self.skipped_concurrent_edit,
            "ineligible": self.ineligible,
            "retried": self.retried,
            "resumed_from": self.resumed_from,
            "accounted": self.accounted,
            "seconds": round(self.seconds, 3),
            "changes_per_second": round(self.total / self.seconds, 1) if self.seconds else None,
            "ineligible_reasons": self.ineligible_reasons,
        }


def apply_change_set(
    store: Store,
    change_set_id: str,
    *,
    actor: str = "engram-pipelines",
    batch_size: int = 1000,
    allow_unapproved: bool = False,
    progress: Progress | None = None,
    warehouse_root: str | Path | None = None,
) -> ApplyResult:
    record = find_change_set(store, change_set_id, warehouse_root)
    if record.status == "reverted":
        raise ChangeSetStateError(f"change set {change_set_id} was reverted; it cannot be applied again")
    if record.review_class in REVIEWED_CLASSES and record.status == "proposed" and not allow_unapproved:
        raise ReviewRequired(
            f"change set {change_set_id} is review-gated and not approved: inspect it with "
            f"`engram-pipelines changes show {change_set_id}`, then `engram-pipelines approve {change_set_id}`"
        )
    verify_change_set(record)  # what is applied is the plan that was proposed (and approved)
    with store.exclusive_apply():
        return _apply(store, record, actor, batch_size, progress or SilentProgress())


def resume_interrupted(
    store: Store,
    *,
    actor: str = "engram-pipelines",
    batch_size: int = 1000,
    progress: Progress | None = None,
    warehouse_root: str | Path | None = None,
) -> list[ApplyResult]:
    """Finish every apply a crash interrupted, oldest first, before a night reads the store.

    A killed apply leaves its set half applied: a rerun of the night would otherwise snapshot the half-applied
    store and propose a different set, and the rest of the first one would never land. Each set resumes from its
    ledger (what landed is skipped), so the store ends as an uninterrupted run leaves it. Only sets that may be
    applied without a person are resumed: `auto` ones and approved ones."""
    results = []
    for record in store.interrupted_change_sets():
        if record.review_class in REVIEWED_CLASSES and record.status != "approved":
            continue  # applied by hand without approval (the library's allow_unapproved): a person finishes it
        results.append(
            apply_change_set(
                store,
                record.change_set_id,
                actor=actor,
                batch_size=batch_size,
                progress=progress,
                warehouse_root=warehouse_root,
            )
        )
    return results


# What each kind of write reads of its changes (the rest, reasons and evidence, is for people and audits).
_MEMORY_WRITE_COLUMNS = [
    "change_id",
    "target_id",
    "op",
    "ops",
    "intents",
    "patch",
    "expected_version",
    "guard_access_count",
    "guard_last_accessed_at",
    "guard_pinned",
    "guard_content_sha",
]
_COLUMNS = {
    "update": _MEMORY_WRITE_COLUMNS,
    "delete": _MEMORY_WRITE_COLUMNS,
    "insert": ["change_id", "target_id", "patch"],
    "link_upsert": ["change_id", "target_id", "op", "patch"],
    "link_delete": ["change_id", "target_id", "op", "patch"],
}


def _apply(
    store: Store, record: ChangeSetRecord, actor: str, batch_size: int, progress: Progress
) -> ApplyResult:
    change_set_id = record.change_set_id
    started = time.perf_counter()
    at = end_of_day(dt.date.fromisoformat(record.as_of))
    done = pa.array(sorted(store.ledger(change_set_id)), pa.string())
    result = ApplyResult(change_set_id=change_set_id, total=record.total, resumed_from=len(done))
    progress.start(f"apply {change_set_id}", record.total - len(done))
    context = _Context(store, change_set_id, actor, at, result)
    steps = (
        ("update", lambda chunk: context.memory_writes(chunk, delete=False)),
        ("delete", lambda chunk: context.memory_writes(chunk, delete=True)),
        ("insert", context.inserts),
        ("link_upsert", context.links),
        ("link_delete", context.links),
    )
    for op, write in steps:
        # One op's changes at a time, read with the columns its writes need: the whole set of a first night at
        # 1M memories is 3.3 GB in Arrow.
        rows = read_changes(record, _COLUMNS[op], op=op)
        pending = rows.filter(pc.invert(pc.is_in(rows["change_id"], value_set=done))) if len(done) else rows
        # In target order, not the set's (namespace first): the rows, links, ledger keys and audit index entries
        # a batch writes are then neighbours in their B-trees, so a commit copies few pages to the WAL instead
        # of one page per change per index (measured in docs/benchmarks.md). Each target has one change.
        pending = pending.sort_by("target_id")
        for chunk in _chunks(pending, batch_size):
            write(chunk)
            progress.advance(len(chunk))
        del rows, pending
    progress.finish()
    _account(store, result)
    result.seconds = time.perf_counter() - started
    if result.accounted:
        store.update_change_set(
            change_set_id,
            status="applied",
            applied_at=utc_now(),
            counts={**record.counts, "apply": result.as_dict()},
        )
    return result


def _chunks(rows: pa.Table, size: int) -> Iterator[list[dict[str, Any]]]:
    """Python rows one batch at a time: a first night at 1M memories has millions of changes, and all of them
    as dicts at once took 10+ GB."""
    for start in range(0, rows.num_rows, size):
        yield rows.slice(start, size).to_pylist()


def _account(store: Store, result: ApplyResult) -> None:
    """The set's outcomes from its ledger; a change with no entry is pending (the set is not accounted). Every
    entry of the ledger under this set's id is one of its changes: the set's file was verified before."""
    outcomes: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    for outcome, detail, count in store.ledger_counts(result.change_set_id):
        outcomes[outcome] += count
        if outcome == "ineligible":
            reasons[detail or "unknown"] += count
    result.applied = outcomes["applied"]
    result.skipped_concurrent_edit = outcomes["skipped_concurrent_edit"]
    result.ineligible = outcomes["ineligible"]
    result.ineligible_reasons = dict(reasons.most_common())


@dataclass
class _Context:
    store: Store
    change_set_id: str
    actor: str
    at: dt.datetime
    result: ApplyResult

    def memory_writes(self, chunk: list[dict[str, Any]], *, delete: bool) -> None:
        writes = [_first_attempt(row) for row in chunk]
        landed = self.store.cas_write_memories(
            writes, actor=self.actor, change_set_id=self.change_set_id, delete=delete
        )
        misses = [row for row in chunk if row["change_id"] not in landed]
        if misses:
            self._retry(misses, delete=delete)

    def _retry(self, misses: list[dict[str, Any]], *, delete: bool) -> None:
        """Re-read, re-check, re-derive on the fresh row, and write once more; then skip and count. A change
        justified by neglect (archive, queue for purge, purge) is not re-derived when someone other than the
        pipeline edited the row since the snapshot: the edit is evidence the row is alive."""
        fresh = self.store.read_memories([row["target_id"] for row in misses])
        intents_of = {c["change_id"]: [Intent(**i) for i in jsontext.loads(c["intents"])] for c in misses}
        edited = self._edited_since_snapshot(
            [c for c in misses if hide_by_neglect(intents_of[c["change_id"]])], fresh
        )
        outcomes: list[Outcome] = []
        second: list[MemoryWrite] = []
        for change in misses:
            row = fresh.get(change["target_id"])
            intents = intents_of[change["change_id"]]
            if change["change_id"] in edited:
                outcomes.append(
                    Outcome(
                        change["change_id"],
                        change["target_id"],
                        "skipped_concurrent_edit",
                        "edited since the snapshot: an edit is evidence the row is alive",
                    )
                )
                continue
            try:
                check_eligible(intents, row, _guard_values(change))
                assert row is not None
                patch = {} if delete else diff(row, fold(intents, row, self.at))
                if not delete and not patch:
                    raise Ineligible("nothing left to change: the row already has this state")
            except Ineligible as exc:
                outcomes.append(Outcome(change["change_id"], change["target_id"], "ineligible", str(exc)))
                continue
            second.append(
                MemoryWrite(
                    change_id=change["change_id"],
                    target_id=change["target_id"],
                    expected_version=row["version"],
                    op=_op_name(change),
                    patch=patch,
                    guard=Guard(row["access_count"], row["last_accessed_at"], row["pinned"]),
                    hides=delete or hides(intents),
                )
            )
        self.result.retried += len(second)
        landed = self.store.cas_write_memories(
            second, actor=self.actor, change_set_id=self.change_set_id, delete=delete
        )
        outcomes.extend(
            Outcome(w.change_id, w.target_id, "skipped_concurrent_edit", "version changed again during retry")
            for w in second
            if w.change_id not in landed
        )
        self.store.record_outcomes(self.change_set_id, outcomes)

    def _edited_since_snapshot(
        self, misses: list[dict[str, Any]], fresh: dict[str, dict[str, Any]]
    ) -> set[str]:
        """Change ids whose row moved past its snapshot version by more than the pipeline's own writes (an
        agent's edit, or another writer's), whatever the edit was."""
        if not misses:
            return set()
        written = self.store.pipeline_versions([m["target_id"] for m in misses])
        out = set()
        for change in misses:
            row = fresh.get(change["target_id"])
            if row is None:
                continue
            snapshot = int(change["expected_version"])
            ours = sum(1 for v in written[change["target_id"]] if v > snapshot)
            if row["version"] - snapshot > ours:
                out.add(change["change_id"])
        return out

    def inserts(self, chunk: list[dict[str, Any]]) -> None:
        rows = [(change["change_id"], _decode_row(jsontext.loads(change["patch"]))) for change in chunk]
        landed = self.store.insert_memories_once(rows, actor=self.actor, change_set_id=self.change_set_id)
        self.store.record_outcomes(
            self.change_set_id,
            [
                Outcome(cid, row["id"], "ineligible", "a memory with this id exists already")
                for cid, row in rows
                if cid not in landed
            ],
        )

    def links(self, chunk: list[dict[str, Any]]) -> None:
        writes = [
            LinkWrite(change["change_id"], change["op"], jsontext.loads(change["patch"])) for change in chunk
        ]
        self.store.write_links(writes, actor=self.actor, change_set_id=self.change_set_id, at=self.at)


def _op_name(change: dict[str, Any]) -> str:
    return "+".join(change["ops"])


def _guard_values(change: dict[str, Any]) -> dict[str, Any]:
    return {
        "access_count": change["guard_access_count"],
        "last_accessed_at": change["guard_last_accessed_at"],
        "pinned": change["guard_pinned"],
        "content_sha": change["guard_content_sha"],
    }


def _first_attempt(change: dict[str, Any]) -> MemoryWrite:
    return MemoryWrite(
        change_id=change["change_id"],
        target_id=change["target_id"],
        expected_version=int(change["expected_version"]),
        op=_op_name(change),
        patch=change["patch"],
        guard=Guard(
            change["guard_access_count"], change["guard_last_accessed_at"], bool(change["guard_pinned"])
        ),
        hides=_first_attempt_hides(change),
    )


def _first_attempt_hides(change: dict[str, Any]) -> bool:
    if change["op"] == "delete":
        return True
    by_ops = hides_by_ops(change["ops"])
    return hides([Intent(**i) for i in jsontext.loads(change["intents"])]) if by_ops is None else by_ops


def _decode_row(row: dict[str, Any]) -> dict[str, Any]:
    if row.get("embedding") is not None:
        import numpy as np

        row["embedding"] = np.asarray(row["embedding"], dtype=np.float32)
    return row
