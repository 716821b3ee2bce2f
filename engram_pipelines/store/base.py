"""The live store behind one small interface; SQLite and PostgreSQL differ only in the hooks below.

Two families of operations live here:
- the agents' own API (get, write, CAS update, access bookkeeping, pin), used by tests, the demo and
  benchmarks to act like the agents that share the store with the pipeline;
- the pipeline's bulk API: streamed reads for snapshots, idempotent bulk inserts for imports, and the
  set-based CAS primitives the apply path is built on (one transaction per batch: lock or check, pre-image to
  the audit log, write, ledger).
"""

from __future__ import annotations

import datetime as dt
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from engram_pipelines.core import jsontext, records
from engram_pipelines.core.progress import Progress
from engram_pipelines.core.timestamps import format_timestamp, utc_now
from engram_pipelines.store.migrations import CARRIED_BY_A_NODE, LATEST_VERSION, MIGRATIONS, Dialect


class StoreError(RuntimeError):
    """The store cannot be used as asked; the message says how to fix it."""


class StoreBusy(StoreError):
    """Another process held the store's write lock for longer than a write waits."""


class MigrationRequired(StoreError):
    pass


class VersionConflict(StoreError):
    """An agent's CAS write lost: the row's version is no longer the one the writer read."""


# Columns written by a change, with the bit that says "this column is set" in a batch row.
WRITABLE = records.WRITABLE_COLUMNS
JSON_COLUMNS = ("tags", "metadata")
TIMESTAMP_COLUMNS = tuple(records.TIMESTAMP_COLUMNS)
BOOL_COLUMNS = ("pinned", "stale")


@dataclass(frozen=True)
class Guard:
    """Evidence a decision rests on that a version check cannot see (access bookkeeping does not bump it)."""

    access_count: int
    last_accessed_at: dt.datetime | None
    pinned: bool


@dataclass
class MemoryWrite:
    """One composed CAS write on an existing memory (update or delete)."""

    change_id: str
    target_id: str
    expected_version: int
    op: str
    patch: dict[str, Any] | str = field(default_factory=dict)  # column -> new value, or that as JSON text
    guard: Guard | None = None
    hides: bool = False  # hides or deletes the row: never lands on a pinned row or a block


@dataclass
class LinkWrite:
    change_id: str
    op: str  # link_upsert | link_delete
    link: dict[str, Any]  # namespace, src_id, dst_id, kind, weight, origin


@dataclass(frozen=True)
class LinkRevert:
    """One link put back by a revert: it must be `expected` now (what the apply left; None = absent), and
    becomes `restore` (the apply's pre-image; None = deleted)."""

    change_id: str
    key: tuple[str, str, str]  # src_id, dst_id, kind
    expected: dict[str, Any] | None
    restore: dict[str, Any] | None


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
_AUDIT_INSERT = (
    "INSERT INTO audit_log (at, actor, change_set_id, change_id, target_kind, target_id, op, before, after)"
)
_LEDGER_INSERT = "INSERT INTO change_ledger (change_id, change_set_id, target_id, outcome, detail, at)"
_LEDGER_UPSERT = (
    "ON CONFLICT (change_set_id, target_id, change_id) DO UPDATE SET outcome = excluded.outcome, "
    "detail = excluded.detail, at = excluded.at"
)


class Store(ABC):
    """A live memory store. Use as a context manager or call close()."""

    dialect: Dialect
    url: str

    # -- dialect hooks -------------------------------------------------------------------------------------
    @abstractmethod
    def _connect(self) -> Any: ...

    @abstractmethod
    @contextmanager
    def write_transaction(self) -> Iterator[Any]:
        """A transaction that holds the write lock from its first statement (no deferred upgrade)."""

    @abstractmethod
    def _sql(self, sql: str) -> str:
        """Translate `?` placeholders and portable spellings into this dialect."""

    @abstractmethod
    def _json_object(self, pairs: Sequence[tuple[str, str]]) -> str:
        """SQL for a JSON object built from (key, expression) pairs."""

    @abstractmethod
    def _lock_clause(self) -> str:
        """Row-lock suffix for a SELECT that precedes a write (empty where the transaction locks all)."""

    @abstractmethod
    def _fill_batch_table(self, cur: Any, table: str, columns: Sequence[str], rows: list[tuple]) -> None: ...

    @abstractmethod
    def _ensure_batch_tables(self, cur: Any) -> None: ...

    @abstractmethod
    def _ensure_link_batch_table(self, cur: Any) -> None:
        """An empty `_link_batch` temporary table: `_LINK_BATCH_COLUMNS` and a JSON column `before`."""

    @abstractmethod
    def _json_timestamp_sql(self, expr: str) -> str:
        """SQL: a timestamp column as the text `jsontext.dumps` gives the python value (format_timestamp)."""

    @abstractmethod
    def _json_float_sql(self, expr: str) -> str:
        """SQL: a double column as a JSON number that reads back as the same python float."""

    @abstractmethod
    def _json_copy_key_sql(self, document: str, source: str, key: str) -> str:
        """SQL: the JSON `document` with top-level `key` set to `source`'s (in place if present)."""

    @abstractmethod
    def _encode_embedding(self, vector: np.ndarray | None) -> Any: ...

    @abstractmethod
    def _decode_embedding(self, value: Any) -> np.ndarray | None: ...

    @abstractmethod
    def _embedding_preimage_sql(self) -> str:
        """SQL expression for the embedding inside a pre-image JSON (for restore)."""

    @abstractmethod
    def _embedding_from_preimage(self, preimage: dict[str, Any]) -> Any: ...

    @abstractmethod
    def _to_db(self, column: str, value: Any) -> Any:
        """A python value to this dialect's parameter for a memory column."""

    @abstractmethod
    def _from_db(self, column: str, value: Any) -> Any: ...

    @abstractmethod
    @contextmanager
    def exclusive_apply(self) -> Iterator[None]:
        """Held for a whole apply or revert: one at a time per store, whoever starts it (CLI, Dagster, Dask).

        Released by the operating system or the server when the holder dies, so a crash never leaves it stuck.
        """

    @abstractmethod
    def iter_memory_batches(self, batch_size: int, embedding_dim: int) -> Iterator[pa.RecordBatch]:
        """Stream every memory as Arrow record batches (bounded memory), ordered by id."""

    @abstractmethod
    def iter_link_batches(self, batch_size: int) -> Iterator[pa.RecordBatch]: ...

    @abstractmethod
    def read_ahead(self, progress: Progress) -> None:
        """Before a whole-store read: bring the store's pages into memory where that is cheaper than letting the
        read fetch them one at a time."""

    # -- lifecycle -----------------------------------------------------------------------------------------
    # How long a write waits for a lock another process or session holds before it fails with StoreBusy. A
    # nightly apply that gave up after SQLite's 10 s busy timeout left its set half applied behind a 30 s bulk
    # write; five minutes covers a backup or a bulk load, and a stuck holder is still named.
    lock_wait_seconds: float = 300.0

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = self._connect()

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        cur = self.conn.cursor()
        cur.execute(self._sql(sql), tuple(params))
        return cur

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        with self.read_transaction():
            return list(self.execute(sql, params).fetchall())

    @contextmanager
    def read_transaction(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.conn.rollback()

    # -- schema --------------------------------------------------------------------------------------------
    def _has_pgvector(self) -> bool:
        return False

    def schema_version(self) -> int:
        try:
            rows = self.query("SELECT max(version) FROM schema_migrations")
        except Exception:
            self.conn.rollback()
            return 0
        return int(rows[0][0] or 0)

    def migrate(self) -> list[int]:
        """Apply pending migrations in order; returns the versions applied."""
        applied: list[int] = []
        with self.write_transaction() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, description TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
        current = self.schema_version()
        pgvector = self._has_pgvector()
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            with self.write_transaction() as cur:
                for statement in migration.statements(self.dialect, pgvector=pgvector):
                    cur.execute(statement)
                cur.execute(
                    self._sql(
                        "INSERT INTO schema_migrations (version, description, applied_at) VALUES (?, ?, ?)"
                    ),
                    (migration.version, migration.description, utc_now().isoformat()),
                )
            applied.append(migration.version)
        return applied

    def require_schema(self) -> None:
        version = self.schema_version()
        if version < LATEST_VERSION:
            raise MigrationRequired(
                f"store {self.redacted_url} is at schema version {version}, this release needs {LATEST_VERSION}: "
                f"run `engram-pipelines init --store {self.redacted_url}` to migrate"
            )

    @property
    def redacted_url(self) -> str:
        from engram_pipelines.store.urls import redact

        return redact(self.url)

    # -- row conversion ------------------------------------------------------------------------------------
    def _row_to_dict(self, columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
        out = {}
        for name, value in zip(columns, row, strict=True):
            out[name] = self._decode_embedding(value) if name == "embedding" else self._from_db(name, value)
        return out

    def earliest_created_at(self) -> dt.datetime | None:
        """The oldest memory's `created_at` (None for an empty store): where the as-of partitions start."""
        value = self.query("SELECT min(created_at) FROM memories")[0][0]
        return self._from_db("created_at", value)

    # -- the agents' API -----------------------------------------------------------------------------------
    def get(self, memory_id: str) -> dict[str, Any] | None:
        """A memory by id, whatever its state (superseded and archived rows included)."""
        rows = self.read_memories([memory_id])
        return rows.get(memory_id)

    def read_memories(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        columns = ["embedding", *records.MEMORY_COLUMNS]
        out: dict[str, dict[str, Any]] = {}
        with self.read_transaction():
            for chunk, marks in _id_chunks(ids):
                cur = self.execute(f"SELECT {', '.join(columns)} FROM memories WHERE id IN ({marks})", chunk)
                for row in cur.fetchall():
                    item = self._row_to_dict(columns, row)
                    out[item["id"]] = item
        return out

    def recall(self, namespace: str, *, zones: Sequence[str] = ("active",)) -> list[str]:
        """Ids visible to recall in a namespace. By default the recall contract's view (active, not superseded,
        not carried by a semantic node: `migrations.CARRIED_BY_A_NODE`); archived rows leave it but stay
        readable on request: `zones=("active", "archived")`."""
        unknown = set(zones) - set(records.ZONES)
        if not zones or unknown:
            raise ValueError(f"zones must be some of {list(records.ZONES)}, got {list(zones)}")
        if tuple(zones) == ("active",):
            rows = self.query("SELECT id FROM recall_memories WHERE namespace = ? ORDER BY id", [namespace])
        else:
            marks = ", ".join("?" for _ in zones)
            rows = self.query(
                "SELECT id FROM memories m WHERE namespace = ? AND (superseded_by IS NULL OR pinned) "
                f"AND zone IN ({marks}) AND NOT {CARRIED_BY_A_NODE} ORDER BY id",
                [namespace, *zones],
            )
        return [r[0] for r in rows]

    def update_memory(self, memory_id: str, expected_version: int, **changes: Any) -> int:
        """An agent's version-checked edit; returns the new version or raises VersionConflict."""
        allowed = {"content", "importance", "tags", "metadata", "tier", "kind", "pinned", "embedding"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValueError(f"agents may not write {sorted(unknown)}")
        sets = ", ".join(f"{name} = ?" for name in changes)
        params = [
            self._encode_embedding(v) if k == "embedding" else self._to_db(k, v) for k, v in changes.items()
        ]
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(
                    f"UPDATE memories SET {sets}, version = version + 1, updated_at = ? "
                    "WHERE id = ? AND version = ? RETURNING version"
                ),
                (*params, self._to_db("updated_at", utc_now()), memory_id, expected_version),
            )
            row = cur.fetchone()
        if row is None:
            raise VersionConflict(
                f"memory {memory_id} is no longer at version {expected_version}: re-read it"
            )
        return int(row[0])

    # What an operator command may write (seed 001's context_pin and memory_promote).
    OPERATOR_COLUMNS = ("pinned", "tier", "importance")

    def operator_write(
        self,
        memory_id: str,
        expected_version: int,
        changes: dict[str, Any],
        *,
        op: str,
        actor: str,
        change_set_id: str,
        change_id: str,
    ) -> int | None:
        """An operator's version-checked write of `OPERATOR_COLUMNS`, with its audit row (before and after) and
        ledger row in the same transaction; the new version, or None when the row moved on (or is gone)."""
        unknown = set(changes) - set(self.OPERATOR_COLUMNS)
        if unknown:
            raise ValueError(f"an operator write may not set {sorted(unknown)}")
        now = utc_now()
        before = self._json_object([(c, self._json_value_sql(c)) for c in ("id", "version", *changes)])
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(
                    f"SELECT {before} FROM memories m WHERE m.id = ? AND m.version = ? {self._lock_clause()}"
                ),
                (memory_id, expected_version),
            )
            found = cur.fetchone()
            if found is None:
                return None
            sets = ", ".join(f"{c} = ?" for c in changes)
            cur.execute(
                self._sql(f"UPDATE memories SET {sets}, version = version + 1, updated_at = ? WHERE id = ?"),
                (*(self._to_db(c, v) for c, v in changes.items()), self._to_db("updated_at", now), memory_id),
            )
            self._audit_row(
                cur,
                at=now,
                actor=actor,
                change_set_id=change_set_id,
                change_id=change_id,
                target_kind="memory",
                target_id=memory_id,
                op=op,
                before=found[0],
                after={"id": memory_id, "version": expected_version + 1, **changes},
            )
            self._record_outcomes(cur, change_set_id, [Outcome(change_id, memory_id, "applied")], now)
        return expected_version + 1

    def set_pinned(self, memory_id: str, expected_version: int, pinned: bool = True) -> int:
        return self.update_memory(memory_id, expected_version, pinned=pinned)

    def record_access(self, memory_id: str, at: dt.datetime | None = None) -> None:
        """Access bookkeeping: bumps access_count and last_accessed_at, never the version."""
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(
                    "UPDATE memories SET access_count = access_count + 1, last_accessed_at = ? WHERE id = ?"
                ),
                (self._to_db("last_accessed_at", at or utc_now()), memory_id),
            )

    # -- bulk writes ---------------------------------------------------------------------------------------
    def insert_memories(self, rows: Iterable[dict[str, Any]], *, cur: Any = None) -> int:
        """Insert memories; rows whose id exists are left untouched (idempotent imports). Returns inserted."""
        now = utc_now()
        columns = ["embedding", *records.MEMORY_COLUMNS]
        params = []
        for row in rows:
            full = {
                "tier": "stm",
                "kind": "episodic",
                "importance": 0.5,
                "score": None,
                "access_count": 0,
                "last_accessed_at": None,
                "updated_at": row.get("created_at", now),
                "version": 1,
                "pinned": False,
                "zone": "active",
                "zone_since": None,
                "superseded_by": None,
                "stale": False,
                "tags": [],
                "metadata": {},
                "embedding": None,
                "embedding_model": None,
                "embedded_content_sha": None,
                **row,
            }
            params.append(
                tuple(
                    self._encode_embedding(full[c]) if c == "embedding" else self._to_db(c, full[c])
                    for c in columns
                )
            )
        if not params:
            return 0
        sql = self._sql(
            f"INSERT INTO memories ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)}) "
            "ON CONFLICT (id) DO NOTHING"
        )
        if cur is not None:
            return self._insert_many(cur, sql, params)
        with self.write_transaction() as own:
            return self._insert_many(own, sql, params)

    def _insert_many(self, cur: Any, sql: str, params: list[tuple]) -> int:
        # rowcount after executemany is the total of rows inserted; ON CONFLICT DO NOTHING rows count 0.
        cur.executemany(sql, params)
        return max(int(cur.rowcount), 0)

    def insert_links(self, links: Iterable[dict[str, Any]]) -> int:
        now = utc_now()
        params = []
        for link in links:
            full = {"weight": 1.0, "origin": "agent", "created_at": now, "traversed_at": None, **link}
            full.setdefault("updated_at", full["created_at"])
            params.append(tuple(self._to_db(c, full[c]) for c in records.LINK_COLUMNS))
        if not params:
            return 0
        sql = self._sql(
            f"INSERT INTO memory_links ({', '.join(records.LINK_COLUMNS)}) "
            f"VALUES ({', '.join('?' for _ in records.LINK_COLUMNS)}) ON CONFLICT (src_id, dst_id, kind) DO NOTHING"
        )
        with self.write_transaction() as cur:
            return self._insert_many(cur, sql, params)

    def count(self, table: str = "memories") -> int:
        if table not in ("memories", "memory_links", "audit_log", "change_ledger", "change_sets"):
            raise ValueError(f"unknown table {table}")
        return int(self.query(f"SELECT count(*) FROM {table}")[0][0])

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

    def _record_outcomes(
        self, cur: Any, change_set_id: str, outcomes: Sequence[Outcome], at: dt.datetime
    ) -> None:
        if not outcomes:
            return
        cur.executemany(
            self._sql(f"{_LEDGER_INSERT} VALUES (?, ?, ?, ?, ?, ?) {_LEDGER_UPSERT}"),
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
        for chunk, marks in _id_chunks(ids):
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

    # -- the apply primitives ------------------------------------------------------------------------------
    _BATCH_COLUMNS = (
        "change_id",
        "target_id",
        "expected_version",
        "op",
        "g_check",
        "g_access_count",
        "g_last_accessed_at",
        "g_pinned",
        "hides",
        "patch",
    )

    def _cas_condition(self) -> str:
        return (
            "m.version = b.expected_version AND (b.g_check = 0 OR (m.access_count = b.g_access_count "
            f"AND {self._null_safe_eq('m.last_accessed_at', 'b.g_last_accessed_at')} AND m.pinned = b.g_pinned)) "
            "AND (b.hides = 0 OR (NOT m.pinned AND m.kind <> 'block'))"
        )

    def _null_safe_eq(self, a: str, b: str) -> str:
        return f"{a} IS NOT DISTINCT FROM {b}"

    def _preimage_pairs(self, *, full: bool) -> list[tuple[str, str]]:
        columns = records.MEMORY_COLUMNS if full else ["id", "version", *WRITABLE]
        pairs = [(c, self._json_value_sql(c)) for c in columns]
        if full:
            pairs.append(("embedding", self._embedding_preimage_sql()))
        return pairs

    def _json_value_sql(self, column: str) -> str:
        return f"m.{column}"

    @abstractmethod
    def _patch_has_sql(self, column: str) -> str:
        """SQL: the batch row's JSON patch sets `column`."""

    @abstractmethod
    def _patch_value_sql(self, column: str) -> str:
        """SQL: the value the batch row's JSON patch gives `column`, in the column's type."""

    @abstractmethod
    def _audit_after_sql(self) -> str:
        """SQL: the audit `after` document (the patch plus the new version)."""

    def _batch_rows(self, writes: Sequence[MemoryWrite]) -> list[tuple]:
        rows = []
        for w in writes:
            g = w.guard
            rows.append(
                (
                    w.change_id,
                    w.target_id,
                    w.expected_version,
                    w.op,
                    1 if g else 0,
                    g.access_count if g else None,
                    self._to_db("last_accessed_at", g.last_accessed_at) if g else None,
                    self._to_db("pinned", g.pinned) if g else None,
                    1 if w.hides else 0,
                    w.patch if isinstance(w.patch, str) else jsontext.dumps(w.patch),
                )
            )
        return rows

    def cas_write_memories(
        self, writes: Sequence[MemoryWrite], *, actor: str, change_set_id: str, delete: bool = False
    ) -> set[str]:
        """Apply a batch of composed CAS writes in one transaction; returns the change ids that landed.

        Set-based: the batch goes into a temporary table; one statement marks the rows whose version and
        guards still match (locking them on PostgreSQL), one copies their pre-images to the audit log, one
        writes them, one records them in the ledger. Writes that no longer match are left alone.
        """
        if not writes:
            return set()
        at = self._to_db("created_at", utc_now())
        with self.write_transaction() as cur:
            self._ensure_batch_tables(cur)
            self._fill_batch_table(cur, "_batch", self._BATCH_COLUMNS, self._batch_rows(writes))
            cur.execute(
                "UPDATE _batch SET hit = 1 WHERE target_id IN (SELECT m.id FROM memories m JOIN _batch b "
                f"ON m.id = b.target_id WHERE {self._cas_condition()} {self._lock_clause()})"
            )
            preimage = self._json_object(self._preimage_pairs(full=delete))
            after = "NULL" if delete else self._audit_after_sql()
            cur.execute(
                self._sql(
                    f"{_AUDIT_INSERT} SELECT ?, ?, ?, b.change_id, 'memory', b.target_id, b.op, {preimage}, {after} "
                    "FROM _batch b JOIN memories m ON m.id = b.target_id WHERE b.hit = 1"
                ),
                (at, actor, change_set_id),
            )
            if delete:
                cur.execute("DELETE FROM memories WHERE id IN (SELECT target_id FROM _batch WHERE hit = 1)")
            else:
                cur.execute(self._update_from_batch_sql(), (at,))
            cur.execute(
                self._sql(
                    f"{_LEDGER_INSERT} "
                    "SELECT change_id, ?, target_id, 'applied', NULL, ? FROM _batch WHERE hit = 1 "
                    f"{_LEDGER_UPSERT}"
                ),
                (change_set_id, at),
            )
            cur.execute("SELECT change_id FROM _batch WHERE hit = 1")
            return {row[0] for row in cur.fetchall()}

    def _update_from_batch_sql(self) -> str:
        sets = [
            f"{c} = CASE WHEN {self._patch_has_sql(c)} THEN {self._patch_value_sql(c)} ELSE memories.{c} END"
            for c in WRITABLE
        ]
        return self._sql(
            f"UPDATE memories SET {', '.join(sets)}, version = memories.version + 1, updated_at = ? "
            "FROM _batch b WHERE memories.id = b.target_id AND b.hit = 1"
        )

    def insert_memories_once(
        self, rows: Sequence[tuple[str, dict[str, Any]]], *, actor: str, change_set_id: str
    ) -> set[str]:
        """Insert new memories (change_id, row); an id that exists already is not inserted. Audited."""
        at = utc_now()
        landed: set[str] = set()
        with self.write_transaction() as cur:
            for change_id, row in rows:
                if self.insert_memories([row], cur=cur):
                    landed.add(change_id)
                    cur.execute(
                        self._sql(f"{_AUDIT_INSERT} VALUES (?, ?, ?, ?, 'memory', ?, 'insert', NULL, ?)"),
                        (
                            self._to_db("created_at", at),
                            actor,
                            change_set_id,
                            change_id,
                            row["id"],
                            jsontext.dumps(
                                {k: v for k, v in row.items() if k != "embedding"}, sort_keys=False
                            ),
                        ),
                    )
            self._record_outcomes(
                cur,
                change_set_id,
                [Outcome(cid, row["id"], "applied") for cid, row in rows if cid in landed],
                at,
            )
        return landed

    _LINK_BATCH_COLUMNS = (
        "seq",
        "change_id",
        "op",
        "namespace",
        "src_id",
        "dst_id",
        "kind",
        "weight",
        "origin",
        "traversed_at",
        "after",
    )

    def write_links(
        self, writes: Sequence[LinkWrite], *, actor: str, change_set_id: str, at: dt.datetime | None = None
    ) -> set[str]:
        """Upsert or delete links, each audited with the link's pre-image; returns the change ids that landed.

        `at` stamps `updated_at`: the apply passes the change set's as-of instant, so a link's `updated_at`
        says which cycle last wrote it (temporal edges decay once per cycle, however late the apply ran).

        Set-based like `cas_write_memories`: the batch goes into a temporary table; one statement reads the
        pre-images of the links that exist (locking them on PostgreSQL), one copies them to the audit log,
        one deletes, one upserts, one records every change in the ledger. An upsert always lands; a delete
        lands only where the link exists, else the ledger says it is ineligible.
        """
        if not writes:
            return set()
        at = at or utc_now()
        landed: set[str] = set()
        with self.write_transaction() as cur:
            for group in _distinct_key_groups(writes):
                landed |= self._write_link_group(cur, group, actor=actor, change_set_id=change_set_id, at=at)
        return landed

    def _link_batch_rows(self, writes: Sequence[LinkWrite], at: dt.datetime) -> list[tuple]:
        rows: list[tuple] = []
        # `at` as the JSON documents write it, formatted once: it is in every `after` document, twice.
        at_text = format_timestamp(at)
        for seq, w in enumerate(writes):
            link = w.link
            if w.op == "link_delete":
                key = (link["src_id"], link["dst_id"], link["kind"])
                rows.append((seq, w.change_id, w.op, None, *key, None, None, None, None))
                continue
            full = {"origin": "pipeline", "traversed_at": None, **link, "updated_at": at_text}
            # `at` holds created_at's place in the `after` document; SQL swaps in the existing link's
            # created_at, so key order and every other value stay what this dict serialises to.
            full["created_at"] = at_text
            rows.append(
                (
                    seq,
                    w.change_id,
                    w.op,
                    self._to_db("namespace", full["namespace"]),
                    self._to_db("src_id", full["src_id"]),
                    self._to_db("dst_id", full["dst_id"]),
                    self._to_db("kind", full["kind"]),
                    self._to_db("weight", full["weight"]),
                    self._to_db("origin", full["origin"]),
                    self._to_db("traversed_at", full["traversed_at"]),
                    jsontext.dumps(full, sort_keys=False),
                )
            )
        return rows

    def _link_preimage_sql(self) -> str:
        def value(column: str) -> str:
            if column in records.LINK_TIMESTAMP_COLUMNS:
                return self._json_timestamp_sql(f"m.{column}")
            if column == "weight":
                return self._json_float_sql("m.weight")
            return f"m.{column}"

        return self._json_object([(c, value(c)) for c in records.LINK_COLUMNS])

    def _write_link_group(
        self, cur: Any, writes: Sequence[LinkWrite], *, actor: str, change_set_id: str, at: dt.datetime
    ) -> set[str]:
        db_at = self._to_db("created_at", at)
        target = "src_id || '|' || dst_id || '|' || kind"
        landed = "(op <> 'link_delete' OR before IS NOT NULL)"
        self._ensure_link_batch_table(cur)
        self._fill_batch_table(
            cur, "_link_batch", self._LINK_BATCH_COLUMNS, self._link_batch_rows(writes, at)
        )
        # One primary-key probe per batch row, as a correlated subquery. A join of the batch with
        # memory_links on the three key columns is planned badly by PostgreSQL: it cannot estimate the
        # three-column match, and picks a scan of all links per batch or a semi-join that compares every
        # pair of batch rows. The pre-image also says whether the link exists, and holds the created_at
        # an upsert keeps.
        cur.execute(
            f"UPDATE _link_batch SET before = (SELECT {self._link_preimage_sql()} FROM memory_links m "
            "WHERE m.src_id = _link_batch.src_id AND m.dst_id = _link_batch.dst_id AND m.kind = _link_batch.kind "
            f"{self._lock_clause()})"
        )
        after = self._json_copy_key_sql("after", "before", "created_at")
        # Audit ids follow the caller's order, as they did one link at a time (revert walks them backwards).
        cur.execute(
            self._sql(
                f"{_AUDIT_INSERT} SELECT ?, ?, ?, change_id, 'link', {target}, op, before, "
                f"CASE WHEN op = 'link_delete' THEN NULL WHEN before IS NOT NULL THEN {after} ELSE after END "
                f"FROM _link_batch WHERE {landed} ORDER BY seq"
            ),
            (db_at, actor, change_set_id),
        )
        cur.execute(
            "DELETE FROM memory_links WHERE (src_id, dst_id, kind) IN "
            "(SELECT src_id, dst_id, kind FROM _link_batch WHERE op = 'link_delete' AND before IS NOT NULL)"
        )
        # created_at = `at` only counts for a new link: on conflict the existing row keeps its own.
        cols = ", ".join(records.LINK_COLUMNS)
        cur.execute(
            self._sql(
                f"INSERT INTO memory_links ({cols}) SELECT namespace, src_id, dst_id, kind, weight, origin, ?, ?, "
                "traversed_at FROM _link_batch WHERE op <> 'link_delete' "
                "ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET weight = excluded.weight, "
                "origin = excluded.origin, updated_at = excluded.updated_at"
            ),
            (db_at, db_at),
        )
        cur.execute(
            self._sql(
                f"{_LEDGER_INSERT} "
                f"SELECT change_id, ?, {target}, CASE WHEN {landed} THEN 'applied' ELSE 'ineligible' END, "
                f"CASE WHEN {landed} THEN NULL ELSE 'link no longer exists' END, ? FROM _link_batch WHERE true "
                f"{_LEDGER_UPSERT}"
            ),
            (change_set_id, db_at),
        )
        cur.execute(f"SELECT change_id FROM _link_batch WHERE {landed}")
        return {row[0] for row in cur.fetchall()}

    def revert_links(
        self, reverts: Sequence[LinkRevert], *, actor: str, change_set_id: str
    ) -> dict[str, str | None]:
        """Put links back as an applied set found them: change id -> None where it landed, else why not.

        Each link is guarded like a memory: it must still be what the apply left (`expected`; None = absent),
        or a later write wins and the link is left as it is ("changed since the apply"): its weight, origin,
        created_at and updated_at are compared (an agent's traversal, `traversed_at`, is bookkeeping, as an
        access is for a memory, and is kept). A link is only re-created between memories that still exist. The
        pre-image is written back whole (weight, origin, created_at, updated_at), so a reverted temporal edge
        keeps its age and its lazy decay.
        Each write is audited with the link's current state as its pre-image and recorded in the ledger."""
        if not reverts:
            return {}
        now = self._to_db("created_at", utc_now())
        cols = ", ".join(records.LINK_COLUMNS)
        outcome: dict[str, str | None] = {}
        with self.write_transaction() as cur:
            # The links as they are now, read through the link writes' batch table (one primary-key probe per
            # row in one statement, locked on PostgreSQL): one SELECT per link took 19.7 s for 68k changes there.
            self._ensure_link_batch_table(cur)
            keys = [
                (seq, r.change_id, "link_delete", None, *r.key, None, None, None, None)
                for seq, r in enumerate(reverts)
            ]
            self._fill_batch_table(cur, "_link_batch", self._LINK_BATCH_COLUMNS, keys)
            cur.execute(
                f"UPDATE _link_batch SET before = (SELECT {self._link_preimage_sql()} FROM memory_links m "
                "WHERE m.src_id = _link_batch.src_id AND m.dst_id = _link_batch.dst_id AND m.kind = _link_batch.kind "
                f"{self._lock_clause()})"
            )
            cur.execute("SELECT seq, before FROM _link_batch ORDER BY seq")
            current: dict[tuple[str, str, str], dict[str, Any] | None] = {
                reverts[seq].key: None if before is None else self._from_db("metadata", before)
                for seq, before in cur.fetchall()
            }
            ends = sorted({i for r in reverts if r.restore is not None for i in r.key[:2]})
            existing: set[str] = set()
            for chunk, marks in _id_chunks(ends):
                cur.execute(self._sql(f"SELECT id FROM memories WHERE id IN ({marks})"), chunk)
                existing |= {row[0] for row in cur.fetchall()}
            deletes, upserts, audits, ledger = [], [], [], []
            for r in reverts:
                now_link = current[r.key]
                if _link_guard(now_link) != _link_guard(r.expected):
                    outcome[r.change_id] = "changed since the apply"
                elif r.restore is not None and not {r.key[0], r.key[1]} <= existing:
                    outcome[r.change_id] = "a memory it joins no longer exists"
                else:
                    outcome[r.change_id] = None
                    current[r.key] = r.restore
                    if r.restore is None:
                        deletes.append(r.key)
                    else:
                        upserts.append(tuple(self._to_db(c, r.restore.get(c)) for c in records.LINK_COLUMNS))
                    audits.append(
                        (
                            now,
                            actor,
                            change_set_id,
                            r.change_id,
                            "|".join(r.key),
                            "link_delete" if r.restore is None else "link_upsert",
                            None if now_link is None else self._to_db("metadata", _link_doc(now_link)),
                            None if r.restore is None else self._to_db("metadata", _link_doc(r.restore)),
                        )
                    )
                detail = outcome[r.change_id]
                ledger.append(
                    Outcome(
                        r.change_id,
                        "|".join(r.key),
                        "applied" if detail is None else "revert_skipped",
                        detail,
                    )
                )
            if deletes:
                cur.executemany(
                    self._sql("DELETE FROM memory_links WHERE src_id = ? AND dst_id = ? AND kind = ?"),
                    deletes,
                )
            if upserts:
                cur.executemany(
                    self._sql(
                        f"INSERT INTO memory_links ({cols}) VALUES ({', '.join('?' * len(records.LINK_COLUMNS))}) "
                        "ON CONFLICT (src_id, dst_id, kind) DO UPDATE SET namespace = excluded.namespace, "
                        "weight = excluded.weight, origin = excluded.origin, created_at = excluded.created_at, "
                        "updated_at = excluded.updated_at"
                    ),
                    upserts,
                )
            if audits:
                cur.executemany(
                    self._sql(f"{_AUDIT_INSERT} VALUES (?, ?, ?, ?, 'link', ?, ?, ?, ?)"),
                    audits,
                )
            self._record_outcomes(cur, change_set_id, ledger, utc_now())
        return outcome

    def visible_ids(self, ids: Sequence[str]) -> list[str]:
        """Which of `ids` recall shows (the `recall_memories` view)."""
        out: list[str] = []
        for chunk, marks in _id_chunks(ids):
            out += [r[0] for r in self.query(f"SELECT id FROM recall_memories WHERE id IN ({marks})", chunk)]
        return out

    def deleted_memories(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """id -> the pre-image of its latest deletion (a purge), for those of `ids` the pipeline deleted."""
        out: dict[str, dict[str, Any]] = {}
        for chunk, marks in _id_chunks(ids):
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
            self._sql(f"{_AUDIT_INSERT} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
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

    def restore_preimage(self, preimage: dict[str, Any], *, actor: str, reason: str) -> bool:
        """Re-insert a deleted memory from its audit pre-image under its original id; False if it exists."""
        row: dict[str, Any] = {c: preimage.get(c) for c in records.MEMORY_COLUMNS}
        for column in TIMESTAMP_COLUMNS:
            if row[column] is not None:
                row[column] = (
                    self._from_db(column, row[column])
                    if not isinstance(row[column], str)
                    else _parse_ts(row[column])
                )
        for column in BOOL_COLUMNS:
            row[column] = bool(row[column])
        for column in JSON_COLUMNS:
            if isinstance(row[column], str):
                row[column] = json.loads(row[column])
        embedding = self._embedding_from_preimage(preimage)
        with self.write_transaction() as cur:
            row_params = {**row, "embedding": None}
            if not self.insert_memories([row_params], cur=cur):
                return False
            if embedding is not None:
                cur.execute(
                    self._sql("UPDATE memories SET embedding = ? WHERE id = ?"), (embedding, row["id"])
                )
            cur.execute(
                self._sql(f"{_AUDIT_INSERT} VALUES (?, ?, NULL, NULL, 'memory', ?, 'restore', NULL, ?)"),
                (self._to_db("created_at", utc_now()), actor, row["id"], json.dumps({"reason": reason})),
            )
        return True


# What a revert compares of a link with what the apply left: the values writes change.
_LINK_GUARD = ("weight", "origin", "created_at", "updated_at")


def _id_chunks(ids: Sequence[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """`ids` in chunks for `IN (...)` lists, each with its placeholders: one statement per chunk, well under
    SQLite's limit on bound variables."""
    for start in range(0, len(ids), size):
        chunk = list(ids[start : start + size])
        yield chunk, ", ".join("?" * len(chunk))


def _link_guard(link: dict[str, Any] | None) -> tuple | None:
    doc = _link_doc(link)
    return None if doc is None else tuple(doc[c] for c in _LINK_GUARD)


def _link_doc(link: dict[str, Any] | None) -> dict[str, Any] | None:
    """A link as the audit log holds it (timestamps as text, the weight a float): comparable whether it was read
    from the table or from an audit document."""
    if link is None:
        return None
    doc = {c: link.get(c) for c in records.LINK_COLUMNS}
    for column in records.LINK_TIMESTAMP_COLUMNS:
        value = doc[column]
        if value is not None:
            doc[column] = format_timestamp(value if isinstance(value, dt.datetime) else _parse_ts(value))
    doc["weight"] = None if doc["weight"] is None else float(doc["weight"])
    return doc


def embedding_array(blobs: Sequence[bytes | None], dim: int, dtype: str = "<f4") -> pa.FixedSizeListArray:
    """Blobs of `dim` float32s in `dtype`'s byte order -> a fixed-size list array; NULL where absent or of another
    dimension. One join and one conversion for the whole batch: no array per row.

    A vector of the wrong size cannot live in a fixed-size column; the snapshot finds those rows by their
    NULL embedding next to a non-NULL embedding_model and drops the vector (the text is embedded instead).
    """
    width = dim * 4
    valid = np.fromiter((b is not None and len(b) == width for b in blobs), dtype=bool, count=len(blobs))
    filler = b"\x00" * width
    flat = np.frombuffer(
        b"".join(b if b is not None and ok else filler for b, ok in zip(blobs, valid, strict=True)),
        dtype=dtype,
    )
    values = pa.array(flat.astype(np.float32, copy=False), type=pa.float32())
    return pa.FixedSizeListArray.from_arrays(values, dim, mask=pa.array(~valid))


def _distinct_key_groups(writes: Sequence[LinkWrite]) -> Iterator[list[LinkWrite]]:
    """Consecutive runs of writes in which no link key and no change id repeats.

    A change set never holds two changes of one link: compose makes one change per target id, and a link's
    target id is its key. Revert and other callers may repeat a key, though; a set-based statement cannot
    apply two writes of one row in order (and ON CONFLICT DO UPDATE refuses to touch a row twice), so a
    repeat starts a new run, and the runs go in order: each key sees its writes in the caller's order.
    """
    group: list[LinkWrite] = []
    keys: set[tuple[str, str, str]] = set()
    change_ids: set[str] = set()
    for w in writes:
        key = (w.link["src_id"], w.link["dst_id"], w.link["kind"])
        if key in keys or w.change_id in change_ids:
            yield group
            group, keys, change_ids = [], set(), set()
        group.append(w)
        keys.add(key)
        change_ids.add(w.change_id)
    if group:
        yield group


def _parse_ts(text: str) -> dt.datetime:
    from engram_pipelines.core.timestamps import parse_timestamp

    return parse_timestamp(text)
