"""The operator's own writes on one memory (seed 001): pin, unpin, promote.

`context_pin` exempts a memory from decay and from every cleanup (retention, merges, purges honour `pinned`);
`memory_promote` moves it into long-term memory now, optionally re-weighted, instead of waiting for the
nightly promotion rule. Each is one CAS write on the version just read, with an audit pre-image and a ledger
row under the pseudo change set `operator` (so `explain` shows it and `revert` of a night never touches it). An
unknown or superseded id is refused: pinning a replaced row would bring it back into recall.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from engram_pipelines.store import Store, VersionConflict

OPERATOR_SET = "operator"  # the ledger's change_set_id for operator writes (no stored change set)
LONG_TERM_TIER = "ltm"


class OperatorError(LookupError):
    """The memory cannot take this operator write; the message says why."""


@dataclass(frozen=True)
class OperatorResult:
    id: str
    op: str
    changed: bool  # False when the memory already was as asked (nothing written)
    version: int
    values: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "op": self.op, "changed": self.changed, "version": self.version, **self.values}


def pin(store: Store, memory_id: str, *, actor: str) -> OperatorResult:
    """Exempt the memory from decay and every cleanup."""
    return _write(store, memory_id, "pin", {"pinned": True}, actor)


def unpin(store: Store, memory_id: str, *, actor: str) -> OperatorResult:
    """Give the memory back to decay and cleanup."""
    return _write(store, memory_id, "unpin", {"pinned": False}, actor)


def promote(store: Store, memory_id: str, *, actor: str, importance: float | None = None) -> OperatorResult:
    """Into long-term memory now; with `importance`, re-weighted too (0 to 1)."""
    patch: dict[str, Any] = {"tier": LONG_TERM_TIER}
    if importance is not None:
        if not 0.0 <= importance <= 1.0:
            raise OperatorError(f"--importance {importance} is outside 0..1")
        patch["importance"] = float(importance)
    return _write(store, memory_id, "promote", patch, actor)


def _write(store: Store, memory_id: str, op: str, patch: dict[str, Any], actor: str) -> OperatorResult:
    row = store.get(memory_id)
    if row is None:
        raise OperatorError(f"no memory {memory_id!r} in this store")
    if row["superseded_by"] is not None:
        raise OperatorError(
            f"memory {memory_id} was superseded by {row['superseded_by']}: {op} the memory that replaced it "
            f"(or revert the change that superseded it first)"
        )
    wanted = {k: v for k, v in patch.items() if row[k] != v}
    if not wanted:
        return OperatorResult(memory_id, op, False, int(row["version"]), patch)
    version = store.operator_write(
        memory_id,
        int(row["version"]),
        wanted,
        op=op,
        actor=actor,
        change_set_id=OPERATOR_SET,
        change_id=f"{op}:{uuid.uuid4().hex[:20]}",
    )
    if version is None:
        raise VersionConflict(f"memory {memory_id} changed while it was being written: run `{op}` again")
    return OperatorResult(memory_id, op, True, version, patch)
