"""The agents' own API (get, write, CAS update, access bookkeeping, pin, recall), used by tests, the demo and
benchmarks to act like the agents that share the store with the pipeline, and the operator's audited writes."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

from engram_pipelines.core import records
from engram_pipelines.core.timestamps import utc_now
from engram_pipelines.store.changelog import ChangeLog, Outcome
from engram_pipelines.store.core import VersionConflict, id_chunks
from engram_pipelines.store.migrations import CARRIED_BY_A_NODE


class AgentAPI(ChangeLog):
    """What agents (and tests acting like them) do to the store."""

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
            for chunk, marks in id_chunks(ids):
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

    def visible_ids(self, ids: Sequence[str]) -> list[str]:
        """Which of `ids` recall shows (the `recall_memories` view)."""
        out: list[str] = []
        for chunk, marks in id_chunks(ids):
            out += [r[0] for r in self.query(f"SELECT id FROM recall_memories WHERE id IN ({marks})", chunk)]
        return out
