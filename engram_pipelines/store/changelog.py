"""The store's change log: the registry of change sets, the apply ledger (one outcome per change, so a killed
apply resumes), and the audit log of every write with its pre-image (what `revert` and `explain` read)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engram_pipelines.core.timestamps import utc_now
from engram_pipelines.store.core import StoreCore, id_chunks


@dataclass(frozen=True)
class Outcome:
    change_id: str
    target_id: str
    outcome: str  # applied | skipped_concurrent_edit | ineligible | reverted | revert_skipped
    detail: str | None = None


@dataclass
class ChangeSetRecord:
    change_set_id: str
    created_at: dt.datetime
    as_of: str
    job: str
    review_class: str
    status: str
    path: str
    config_fingerprint: str
    total: int
    counts: dict[str, Any]
    approved_at: dt.datetime | None = None
    approved_by: str | None = None
    applied_at: dt.datetime | None = None
    reverted_at: dt.datetime | None = None


# Every ledger write; an outcome recorded twice for one change (a retry's second outcome) replaces the first.
AUDIT_INSERT = (
    "INSERT INTO audit_log (at, actor, change_set_id, change_id, target_kind, target_id, op, before, after)"
)


LEDGER_INSERT = "INSERT INTO change_ledger (change_id, change_set_id, target_id, outcome, detail, at)"


LEDGER_UPSERT = (
    "ON CONFLICT (change_set_id, target_id, change_id) DO UPDATE SET outcome = excluded.outcome, "
    "detail = excluded.detail, at = excluded.at"
)


class ChangeLog(StoreCore):
    """Change sets, their ledger and the audit log."""

    # -- change sets and ledger ----------------------------------------------------------------------------
    def register_change_set(self, record: ChangeSetRecord) -> bool:
        """Register a stored change set; returns False when it was registered before (same content)."""
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(
                    "INSERT INTO change_sets (change_set_id, created_at, as_of, job, review_class, status, path, "
                    "config_fingerprint, total, counts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (change_set_id) DO NOTHING RETURNING change_set_id"
                ),
                (
                    record.change_set_id,
                    self._to_db("created_at", record.created_at),
                    record.as_of,
                    record.job,
                    record.review_class,
                    record.status,
                    record.path,
                    record.config_fingerprint,
                    record.total,
                    self._to_db("metadata", record.counts),
                ),
            )
            return cur.fetchone() is not None

    _CHANGE_SET_COLUMNS = (
        "change_set_id, created_at, as_of, job, review_class, status, path, config_fingerprint, total, counts, "
        "approved_at, approved_by, applied_at, reverted_at"
    )

    def _change_set_from_row(self, row: Sequence[Any]) -> ChangeSetRecord:
        (
            cid,
            created,
            as_of,
            job,
            klass,
            status,
            path,
            fp,
            total,
            counts,
            appr_at,
            appr_by,
            appl_at,
            rev_at,
        ) = row
        ts = self._from_db
        return ChangeSetRecord(
            change_set_id=cid,
            created_at=ts("created_at", created),
            as_of=as_of,
            job=job,
            review_class=klass,
            status=status,
            path=path,
            config_fingerprint=fp,
            total=int(total),
            counts=self._from_db("metadata", counts),
            approved_at=ts("created_at", appr_at),
            approved_by=appr_by,
            applied_at=ts("created_at", appl_at),
            reverted_at=ts("created_at", rev_at),
        )

    def list_change_sets(self) -> list[ChangeSetRecord]:
        rows = self.query(
            f"SELECT {self._CHANGE_SET_COLUMNS} FROM change_sets ORDER BY created_at, change_set_id"
        )
        return [self._change_set_from_row(r) for r in rows]

    def interrupted_change_sets(self) -> list[ChangeSetRecord]:
        """Sets whose apply started and did not finish (a crash, a killed process): neither applied nor reverted,
        with changes in the ledger. Oldest first."""
        rows = self.query(
            f"SELECT {self._CHANGE_SET_COLUMNS} FROM change_sets c WHERE status IN ('proposed', 'approved') "
            "AND EXISTS (SELECT 1 FROM change_ledger l WHERE l.change_set_id = c.change_set_id) "
            "ORDER BY created_at, change_set_id"
        )
        return [self._change_set_from_row(r) for r in rows]

    def get_change_set(self, change_set_id: str) -> ChangeSetRecord | None:
        rows = self.query(
            f"SELECT {self._CHANGE_SET_COLUMNS} FROM change_sets WHERE change_set_id = ?", [change_set_id]
        )
        return self._change_set_from_row(rows[0]) if rows else None

    def update_change_set(self, change_set_id: str, **fields: Any) -> None:
        allowed = {"status", "counts", "approved_at", "approved_by", "applied_at", "reverted_at"}
        if set(fields) - allowed:
            raise ValueError(f"cannot set {sorted(set(fields) - allowed)} on a change set")
        conv = {
            k: (
                self._to_db("metadata", v)
                if k == "counts"
                else self._to_db("created_at", v)
                if k.endswith("_at")
                else v
            )
            for k, v in fields.items()
        }
        sets = ", ".join(f"{k} = ?" for k in conv)
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(f"UPDATE change_sets SET {sets} WHERE change_set_id = ?"),
                (*conv.values(), change_set_id),
            )

    def ledger(self, change_set_id: str) -> dict[str, tuple[str, str | None]]:
        """change_id -> (outcome, detail) for a change set."""
        rows = self.query(
            "SELECT change_id, outcome, detail FROM change_ledger WHERE change_set_id = ?", [change_set_id]
        )
        return {r[0]: (r[1], r[2]) for r in rows}

    def ledger_counts(self, change_set_id: str) -> list[tuple[str, str | None, int]]:
        """(outcome, detail, changes) of a change set's ledger, counted by the database: a first night's set at
        1M memories has 3.5M entries (8.5 s read into Python to be counted)."""
        rows = self.query(
            "SELECT outcome, detail, count(*) FROM change_ledger WHERE change_set_id = ? "
            "GROUP BY outcome, detail ORDER BY outcome, detail",
            [change_set_id],
        )
        return [(r[0], r[1], int(r[2])) for r in rows]

    def _record_outcomes(
        self, cur: Any, change_set_id: str, outcomes: Sequence[Outcome], at: dt.datetime
    ) -> None:
        if not outcomes:
            return
        cur.executemany(
            self._sql(f"{LEDGER_INSERT} VALUES (?, ?, ?, ?, ?, ?) {LEDGER_UPSERT}"),
            [
                (o.change_id, change_set_id, o.target_id, o.outcome, o.detail, self._to_db("created_at", at))
                for o in outcomes
            ],
        )

    def record_outcomes(self, change_set_id: str, outcomes: Sequence[Outcome]) -> None:
        with self.write_transaction() as cur:
            self._record_outcomes(cur, change_set_id, outcomes, utc_now())

    def audit_rows(
        self, *, target_id: str | None = None, change_set_id: str | None = None
    ) -> list[dict[str, Any]]:
        where, params = [], []
        if target_id is not None:
            where.append("target_id = ?")
            params.append(target_id)
        if change_set_id is not None:
            where.append("change_set_id = ?")
            params.append(change_set_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self.query(
            "SELECT audit_id, at, actor, change_set_id, change_id, target_kind, target_id, op, before, after "
            f"FROM audit_log {clause} ORDER BY audit_id",
            params,
        )
        keys = ("audit_id", "at", "actor", "change_set_id", "change_id", "target_kind", "target_id", "op")
        out = []
        for r in rows:
            item = dict(zip(keys, r[:8], strict=True))
            item["at"] = self._from_db("created_at", item["at"])
            item["before"] = self._from_db("metadata", r[8]) if r[8] is not None else None
            item["after"] = self._from_db("metadata", r[9]) if r[9] is not None else None
            out.append(item)
        return out

    def pipeline_versions(self, ids: Sequence[str]) -> dict[str, list[int]]:
        """id -> the versions the pipeline's own writes gave each row (from the audit log's post-images): a
        row whose version moved past them was edited by someone else."""
        out: dict[str, list[int]] = {i: [] for i in ids}
        for chunk, marks in id_chunks(ids):
            rows = self.query(
                f"SELECT target_id, after FROM audit_log WHERE target_kind = 'memory' AND target_id IN ({marks}) "
                "AND after IS NOT NULL",
                chunk,
            )
            for target, after in rows:
                version = (self._from_db("metadata", after) or {}).get("version")
                if isinstance(version, int):
                    out[target].append(version)
        return out

    def deleted_memories(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id -> the pre-image of its latest deletion (a purge), for those of `ids` the pipeline deleted."""
        out: dict[str, dict[str, Any]] = {}
        for chunk, marks in id_chunks(ids):
            for target, before in self.query(
                "SELECT target_id, before FROM audit_log WHERE target_kind = 'memory' AND after IS NULL "
                f"AND before IS NOT NULL AND op <> 'insert' AND target_id IN ({marks}) ORDER BY audit_id",
                chunk,
            ):
                preimage = self._from_db("metadata", before)
                metadata = preimage.get("metadata")
                if isinstance(metadata, str):  # the pre-image keeps the column as the store holds it
                    preimage["metadata"] = json.loads(metadata)
                out[target] = preimage
        return out

    def audit_external(
        self,
        *,
        actor: str,
        change_set_id: str,
        change_id: str,
        target_kind: str,
        target_id: str,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        """An audit row for a write outside this store (an adapter's write to another system)."""
        with self.write_transaction() as cur:
            self._audit_row(
                cur,
                at=utc_now(),
                actor=actor,
                change_set_id=change_set_id,
                change_id=change_id,
                target_kind=target_kind,
                target_id=target_id,
                op=op,
                before=before,
                after=after,
            )

    def _audit_row(
        self,
        cur: Any,
        *,
        at: dt.datetime,
        actor: str,
        change_set_id: str,
        change_id: str,
        target_kind: str,
        target_id: str,
        op: str,
        before: dict[str, Any] | str | None,
        after: dict[str, Any] | str | None,
    ) -> None:
        """One audit row, in the caller's transaction (documents as dicts or as the JSON the store holds)."""
        cur.execute(
            self._sql(f"{AUDIT_INSERT} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
            (
                self._to_db("created_at", at),
                actor,
                change_set_id,
                change_id,
                target_kind,
                target_id,
                op,
                None if before is None else self._to_db("metadata", before),
                None if after is None else self._to_db("metadata", after),
            ),
        )
