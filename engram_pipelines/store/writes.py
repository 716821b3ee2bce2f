"""The apply's write primitives: set-based, compare-and-set writes of memories and links in one transaction per
batch (lock or check, pre-image to the audit log, write, ledger), and the exact reverts of links."""

from __future__ import annotations

import datetime as dt
import json
from abc import abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from engram_pipelines.core import jsontext, records
from engram_pipelines.core.timestamps import format_timestamp, utc_now
from engram_pipelines.store.agents import AgentAPI
from engram_pipelines.store.changelog import AUDIT_INSERT, LEDGER_INSERT, LEDGER_UPSERT, Outcome
from engram_pipelines.store.core import (
    BOOL_COLUMNS,
    JSON_COLUMNS,
    TIMESTAMP_COLUMNS,
    WRITABLE,
    id_chunks,
    parse_stored_timestamp,
)


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


# What a revert compares of a link with what the apply left: the values writes change.
_LINK_GUARD = ("weight", "origin", "created_at", "updated_at")


class CasWrites(AgentAPI):
    """The apply's batched CAS writes and the reverts."""

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
                    f"{AUDIT_INSERT} SELECT ?, ?, ?, b.change_id, 'memory', b.target_id, b.op, {preimage}, {after} "
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
                    f"{LEDGER_INSERT} "
                    "SELECT change_id, ?, target_id, 'applied', NULL, ? FROM _batch WHERE hit = 1 "
                    f"{LEDGER_UPSERT}"
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
                        self._sql(f"{AUDIT_INSERT} VALUES (?, ?, ?, ?, 'memory', ?, 'insert', NULL, ?)"),
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
                f"{AUDIT_INSERT} SELECT ?, ?, ?, change_id, 'link', {target}, op, before, "
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
                f"{LEDGER_INSERT} "
                f"SELECT change_id, ?, {target}, CASE WHEN {landed} THEN 'applied' ELSE 'ineligible' END, "
                f"CASE WHEN {landed} THEN NULL ELSE 'link no longer exists' END, ? FROM _link_batch WHERE true "
                f"{LEDGER_UPSERT}"
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
            for chunk, marks in id_chunks(ends):
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
                    self._sql(f"{AUDIT_INSERT} VALUES (?, ?, ?, ?, 'link', ?, ?, ?, ?)"),
                    audits,
                )
            self._record_outcomes(cur, change_set_id, ledger, utc_now())
        return outcome

    def restore_preimage(self, preimage: dict[str, Any], *, actor: str, reason: str) -> bool:
        """Re-insert a deleted memory from its audit pre-image under its original id; False if it exists."""
        row: dict[str, Any] = {c: preimage.get(c) for c in records.MEMORY_COLUMNS}
        for column in TIMESTAMP_COLUMNS:
            if row[column] is not None:
                row[column] = (
                    self._from_db(column, row[column])
                    if not isinstance(row[column], str)
                    else parse_stored_timestamp(row[column])
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
                self._sql(f"{AUDIT_INSERT} VALUES (?, ?, NULL, NULL, 'memory', ?, 'restore', NULL, ?)"),
                (self._to_db("created_at", utc_now()), actor, row["id"], json.dumps({"reason": reason})),
            )
        return True


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
            doc[column] = format_timestamp(
                value if isinstance(value, dt.datetime) else parse_stored_timestamp(value)
            )
    doc["weight"] = None if doc["weight"] is None else float(doc["weight"])
    return doc


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
