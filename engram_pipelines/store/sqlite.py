"""The embedded SQLite store: WAL, and every write transaction takes the write lock up front.

Agents and the pipeline share one file. A deferred transaction that reads and then writes fails outright
when another writer got the lock in between ("database is locked" without waiting), so writes here always
`BEGIN IMMEDIATE` and wait up to the busy timeout instead; when another process holds the lock longer (a
bulk load, a backup), the transaction waits on with backoff up to `Store.lock_wait_seconds` before failing with
a message that names the lock.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from engram_pipelines.core import records
from engram_pipelines.core.progress import Progress
from engram_pipelines.core.timestamps import format_timestamp, parse_timestamp
from engram_pipelines.store.base import Store
from engram_pipelines.store.core import (
    BOOL_COLUMNS,
    JSON_COLUMNS,
    TIMESTAMP_COLUMNS,
    Journal,
    MigrationRequired,
    StoreBusy,
    StoreError,
    embedding_array,
    id_chunks,
    link_table,
    rebatched,
)
from engram_pipelines.warehouse.schemas import with_row_problems

BUSY_TIMEOUT_MS = 10_000
APPLY_WAL_PAGES = 65_536  # 256 MB of WAL between checkpoints during an apply
APPLY_CACHE_KIB = -262_144  # negative: KiB, so 256 MB of page cache
READ_AHEAD_ROWIDS = 50_000  # rows per statement of the read-ahead (its progress steps)


class SQLiteStore(Store):
    dialect = "sqlite"

    def __init__(self, url: str, *, create: bool = True) -> None:
        """Open the store at `url`; without `create`, only an existing file is opened (else MigrationRequired)."""
        self.path = sqlite_path(url)
        self.create = create
        super().__init__(url)

    def _connect(self) -> sqlite3.Connection:
        in_memory = str(self.path) == ":memory:"
        if self.create and not in_memory:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        target, uri = str(self.path), False
        if not (self.create or in_memory):
            # mode=rw opens an existing file only: a command that does not create the schema (export, list,
            # ...) must fail on a mistyped path without leaving an empty database behind.
            target, uri = self.path.absolute().as_uri() + "?mode=rw", True
        try:
            conn = sqlite3.connect(target, uri=uri, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        except sqlite3.OperationalError as exc:
            if not self.create and not self.path.exists():
                raise MigrationRequired(
                    f"no SQLite store at {self.path}: run `engram-pipelines init --store {self.redacted_url}` "
                    "to create one"
                ) from None
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from None
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextmanager
    def write_transaction(self) -> Iterator[sqlite3.Cursor]:
        cur = self.conn.cursor()
        self._begin_immediate(cur)
        try:
            yield cur
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        else:
            cur.execute("COMMIT")

    def _begin_immediate(self, cur: sqlite3.Cursor) -> None:
        """Take the write lock, waiting with backoff while another process holds it (`lock_wait_seconds`):
        nothing has been written yet, so waiting is safe."""
        started = time.monotonic()
        pause = 0.1
        while True:
            try:
                cur.execute("BEGIN IMMEDIATE")  # waits up to the busy timeout itself
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                waited = time.monotonic() - started
                if waited >= self.lock_wait_seconds:
                    raise StoreBusy(
                        f"the SQLite store {self.path} is locked by another writer (waited {waited:.0f}s for its "
                        f"write lock): nothing was written; find the process holding it (`fuser {self.path}`), "
                        "let it finish, then run again"
                    ) from exc
                time.sleep(min(pause, max(self.lock_wait_seconds - waited, 0.0)))
                pause = min(pause * 2, 5.0)

    @contextmanager
    def exclusive_apply(self) -> Iterator[None]:
        if str(self.path) == ":memory:":
            yield
            return
        with open(f"{self.path}.apply-lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # waits for a running apply; freed if its process dies
            try:
                with self._bulk_writes():
                    yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    @contextmanager
    def _bulk_writes(self) -> Iterator[None]:
        """Checkpoint the WAL rarely while an apply runs, then once at the end.

        An apply rewrites the same index and ledger pages in every batch; checkpointing every 1,000 WAL pages
        (SQLite's default) copied them into the database file again and again (measured at 100k memories: 89 s
        with the default, 58 s with this). Durability is unchanged: commits go to the WAL either way.
        """
        try:
            with self._pragmas({"wal_autocheckpoint": APPLY_WAL_PAGES, "cache_size": APPLY_CACHE_KIB}):
                yield
        finally:
            self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    @contextmanager
    def _pragmas(self, settings: dict[str, int | str]) -> Iterator[None]:
        """The connection's `settings` for the block, then what they were before it."""
        before = {name: self.conn.execute(f"PRAGMA {name}").fetchone()[0] for name in settings}
        for name, value in settings.items():
            self.conn.execute(f"PRAGMA {name} = {value}")
        try:
            yield
        finally:
            for name, value in before.items():
                # secure_delete reads FAST back as 2, but is set by a boolean or FAST: `= 2` would mean ON.
                restored = "FAST" if name == "secure_delete" and value == 2 else value
                self.conn.execute(f"PRAGMA {name} = {restored}")

    @contextmanager
    def read_transaction(self) -> Iterator[None]:
        # Autocommit mode: each read sees the latest committed state; nothing to roll back.
        yield

    def _sql(self, sql: str) -> str:
        return sql

    # One writer at a time: the next sequence number marks everything committed before it.
    _JOURNAL_POSITION = "seq"
    _JOURNAL_MARK_SQL = "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = '{journal}'), 0) + 1"

    def prune_journal(self, journal: Journal, below: int) -> None:
        """As the base class, but where fewer entries stay than go, the few are copied aside and the table is
        emptied by one unqualified DELETE (SQLite's truncate optimisation: pages dropped, not rows visited).
        Pruning a 1M store's link journal of the first night's 2.59M entries (114 staying), 2026-12-06: 5.3 s
        row by row, 4.4 s so from a cold page cache (both mostly reading the journal's pages, which freeing them
        needs); 1.0 and 0.5 s warm. The sequence (`sqlite_sequence`) is not reset by a DELETE, so marks stay
        valid, and every entry keeps its own `seq`.

        The prune runs with `secure_delete = FAST` (this SQLite build zeroes every freed page by default): the
        freed pages are not overwritten, which the journal's content (row keys, which the audit log keeps too)
        does not need. A 2.59M-entry journal with 114 staying, 2026-12-07, warm: 0.10 s against 0.89 s."""
        table, position = journal.table, self._JOURNAL_POSITION
        with self._pragmas({"secure_delete": "FAST"}), self.write_transaction() as cur:
            # The rowid's ends bound both counts; `seq` has gaps only where entries went, so the bounds are the
            # counts or near them. Two subqueries, as SQLite seeks an end only for a lone min() or max(): one
            # query asking both scanned the 2.59M-entry link journal (4.4 s).
            first, last = cur.execute(
                f"SELECT (SELECT min({position}) FROM {table}), (SELECT max({position}) FROM {table})"
            ).fetchone()
            going = 0 if first is None else max(0, min(below, last + 1) - first)
            staying = 0 if last is None else max(0, last + 1 - max(below, first))
            if staying < going:
                cur.execute(
                    f"CREATE TEMP TABLE _journal_kept AS SELECT * FROM {table} WHERE {position} >= ?",
                    (below,),
                )
                cur.execute(f"DELETE FROM {table}")
                cur.execute(f"INSERT INTO {table} SELECT * FROM _journal_kept")
                cur.execute("DROP TABLE _journal_kept")
            elif going:
                cur.execute(f"DELETE FROM {table} WHERE {position} < ?", (below,))
            cur.execute(f"UPDATE {table}_state SET pruned_below = ? WHERE pruned_below < ?", (below, below))

    def _json_object(self, pairs: Sequence[tuple[str, str]]) -> str:
        return "json_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"

    def _json_value_sql(self, column: str) -> str:
        return f"json(m.{column})" if column in JSON_COLUMNS else f"m.{column}"

    def _lock_clause(self) -> str:
        return ""  # BEGIN IMMEDIATE already holds the database's write lock

    def _null_safe_eq(self, a: str, b: str) -> str:
        return f"{a} IS {b}"

    def _ensure_batch_tables(self, cur: Any) -> None:
        cols = ", ".join(self._BATCH_COLUMNS)
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS _batch ({cols}, hit INTEGER NOT NULL DEFAULT 0)")
        cur.execute("DELETE FROM _batch")

    def _ensure_link_batch_table(self, cur: Any) -> None:
        cols = ", ".join(self._LINK_BATCH_COLUMNS)
        cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS _link_batch ({cols}, before)")
        cur.execute("DELETE FROM _link_batch")

    def _json_timestamp_sql(self, expr: str) -> str:
        # Every write goes through _to_db, so the stored text already is format_timestamp's form.
        return expr

    def _json_float_sql(self, expr: str) -> str:
        # json_object renders a REAL with 15 significant digits, which loses weights such as 2/3 (revert
        # would restore a different number); 17 digits read back as the same double. Shorter exact forms
        # cannot be picked in SQL: SQLite's text-to-REAL cast is off by an ulp now and then.
        return f"json(printf('%!.17g', {expr}))"

    def _json_copy_key_sql(self, document: str, source: str, key: str) -> str:
        return f"json_set({document}, '$.{key}', json_extract({source}, '$.{key}'))"

    def _patch_has_sql(self, column: str) -> str:
        return f"json_type(b.patch, '$.{column}') IS NOT NULL"

    def _patch_value_sql(self, column: str) -> str:
        # json_extract gives arrays and objects back as JSON text, true/false as 1/0, null as NULL.
        return f"json_extract(b.patch, '$.{column}')"

    def _audit_after_sql(self) -> str:
        return "json_set(b.patch, '$.version', b.expected_version + 1)"

    def _fill_batch_table(self, cur: Any, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
        marks = ", ".join("?" for _ in columns)
        cur.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)

    def _encode_embedding(self, vector: Any) -> bytes | None:
        if vector is None:
            return None
        return np.asarray(vector, dtype="<f4").tobytes()

    def _decode_embedding(self, value: Any) -> np.ndarray | None:
        return None if value is None else np.frombuffer(value, dtype="<f4").copy()

    def _embedding_preimage_sql(self) -> str:
        return "hex(m.embedding)"

    def _embedding_from_preimage(self, preimage: dict[str, Any]) -> bytes | None:
        text = preimage.get("embedding")
        return bytes.fromhex(text) if text else None

    def _to_db(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in TIMESTAMP_COLUMNS or column in records.LINK_TIMESTAMP_COLUMNS:
            return format_timestamp(value if isinstance(value, dt.datetime) else parse_timestamp(value))
        if column in BOOL_COLUMNS:
            return 1 if value else 0
        if column in JSON_COLUMNS:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=column == "metadata")
        return value

    def _from_db(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in TIMESTAMP_COLUMNS or column in records.LINK_TIMESTAMP_COLUMNS:
            return parse_timestamp(value)
        if column in BOOL_COLUMNS:
            return bool(value)
        if column in JSON_COLUMNS:
            return json.loads(value)
        return value

    def read_ahead(self, progress: Progress) -> None:
        """Read the memories table once in storage order, so that the id-ordered read after it finds its pages
        in the OS cache.

        The snapshot reads memories in id order through the primary key's index: from a cold cache that is one
        random page read per row. Measured on a 1M store after its first night (a 7.7 GB file: the audit log and
        ledger share it): the fetch took 91.5 s cold; 5.5 + 19.1 s after this scan; 23.2 + 20.5 s after reading the
        whole file instead. A table larger than the cache still gains: the pages the scan leaves cached are hits.
        """
        top = self.conn.execute("SELECT max(rowid) FROM memories").fetchone()[0] or 0
        progress.start("read the memories ahead, in storage order", self.count("memories"))
        for low in range(0, top + 1, READ_AHEAD_ROWIDS):
            # count(version): the record is read up to a late column, overflow pages included.
            (rows,) = self.conn.execute(
                "SELECT count(version) FROM memories WHERE rowid BETWEEN ? AND ?",
                (low, low + READ_AHEAD_ROWIDS - 1),
            ).fetchone()
            progress.advance(rows)
        progress.finish()

    def iter_memory_batches(
        self, batch_size: int, embedding_dim: int, ids: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        schema = records.memory_schema(embedding_dim)
        columns = schema.names
        cur = self.conn.cursor()
        if ids is None:
            cur.execute(f"SELECT {', '.join(columns)} FROM memories ORDER BY id")
            while rows := cur.fetchmany(batch_size):
                yield _memory_batch(list(zip(*rows, strict=True)), columns, schema, embedding_dim)
            return
        # Sorted chunks, each read in id order: the rows come out in id order overall.
        select = f"SELECT {', '.join(columns)} FROM memories WHERE id IN ({{}}) ORDER BY id"
        parts = (
            cur.execute(select.format(marks), chunk).fetchall() for chunk, marks in id_chunks(sorted(ids))
        )
        for rows in rebatched(parts, batch_size):
            yield _memory_batch(list(zip(*rows, strict=True)), columns, schema, embedding_dim)

    def iter_link_batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        cur = self.conn.cursor()
        cur.execute(
            f"SELECT {', '.join(records.LINK_COLUMNS)} FROM memory_links ORDER BY src_id, dst_id, kind"
        )
        while rows := cur.fetchmany(batch_size):
            yield from link_table(rows).to_batches()


def _memory_batch(
    cols: list[tuple], columns: list[str], schema: pa.Schema, embedding_dim: int
) -> pa.RecordBatch:
    arrays = []
    problems: dict[int, list[str]] = {}
    for name, values in zip(columns, cols, strict=True):
        field = schema.field(name)
        if name == "embedding":
            arrays.append(embedding_array(values, embedding_dim))
        elif field.type == records.TIMESTAMP:
            arrays.append(_timestamps(name, values, field.type, problems))
        elif field.type == pa.bool_():
            arrays.append(pa.array([bool(v) for v in values], type=pa.bool_()))
        else:
            arrays.append(pa.array(values, type=field.type))
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return with_row_problems(batch, problems) if problems else batch


def _timestamps(name: str, values: tuple, kind: pa.DataType, problems: dict[int, list[str]]) -> pa.Array:
    """The column's texts as timestamps. A text written straight into the file that is no timestamp with a zone
    ('yesterday', '2026-11-01T10:00:00') becomes null and a problem of its row (the snapshot quarantines the row
    with the reason) instead of failing the whole store's snapshot, every night."""
    texts = pa.array(values, type=pa.string())
    try:
        return texts.cast(kind)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    parsed = []
    for row, value in enumerate(values):
        try:
            parsed.append(pa.scalar(value, pa.string()).cast(kind).as_py() if value is not None else None)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            parsed.append(None)
            problems.setdefault(row, []).append(f"{name}: {value!r} is not a timestamp with a zone offset")
    return pa.array(parsed, type=kind)


def sqlite_path(url: str) -> Path:
    """`sqlite:///relative/path.db`, `sqlite:////absolute/path.db` or `sqlite:///:memory:`."""
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise StoreError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/engram.db)")
    rest = url[len(prefix) :]
    if not rest:
        raise StoreError(f"SQLite URL {url!r} names no file (expected sqlite:///path/to/engram.db)")
    return Path(rest)
