"""The live store's core: the connection, the SQL dialect hooks SQLite and PostgreSQL implement, transactions,
the schema and its migrations, streamed reads for snapshots, and the errors every store operation raises."""

from __future__ import annotations

import datetime as dt
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import pyarrow as pa

from engram_pipelines.core import records
from engram_pipelines.core.progress import Progress
from engram_pipelines.core.timestamps import utc_now
from engram_pipelines.store.migrations import LATEST_VERSION, MIGRATIONS, Dialect


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


class StoreCore(ABC):
    """A live memory store: the connection and the dialect hooks. Use as a context manager or call close()."""

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
    def iter_memory_batches(
        self, batch_size: int, embedding_dim: int, ids: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        """Stream every memory (or those of `ids`) as Arrow record batches (bounded memory), ordered by id in
        binary order (as DuckDB and Arrow sort), whatever the database's collation."""

    @abstractmethod
    def iter_link_batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        """Stream every link, ordered by (src_id, dst_id, kind) in binary order."""

    # The journals (migrations 5 and 6): where an entry sits in a journal's order, and the mark a snapshot takes
    # before it reads (entries at or after it are read again next time). SQLite: the sequence; PostgreSQL: the
    # transaction id, because it commits in another order than it numbers.
    _JOURNAL_POSITION: str
    _JOURNAL_MARK_SQL: str  # `{journal}`: the journal's table

    def _link_timestamp_sql(self, column: str) -> str:
        """A link timestamp column as the store's one text form (`...Z`, microseconds)."""
        return column

    def journal_mark(self, journal: Journal) -> int:
        """The journal position a read that starts now has seen everything before."""
        return int(self.query(self._JOURNAL_MARK_SQL.format(journal=journal.table))[0][0])

    def journal_keys(self, journal: Journal, since: int, at_most: int) -> pa.Table | None:
        """The keys of the rows inserted, updated or deleted from the mark `since` on, in binary order, or
        `at_most` + 1 of them when there are more (a full read is cheaper: the night after a first night
        journals millions); None when entries from that mark on are gone: pruned, or the store is an older copy
        whose journal ends before the mark (read the table whole)."""
        columns = ", ".join(journal.key)
        rows = self.query(
            f"SELECT DISTINCT {columns} FROM {journal.table} WHERE {self._JOURNAL_POSITION} >= ? LIMIT ?",
            (since, at_most + 1),
        )
        # Checked after the keys were read: a prune that committed before or during that read shows here.
        if since < int(self.query(f"SELECT pruned_below FROM {journal.table}_state")[0][0]):
            return None
        if since > self.journal_mark(journal):
            return None
        keys = pa.table(
            [pa.array(list(column), pa.string()) for column in zip(*rows, strict=True)]
            if rows
            else [pa.array([], pa.string())] * len(journal.key),
            names=list(journal.key),
        )
        return keys.sort_by([(name, "ascending") for name in journal.key])

    def links_of(self, keys: pa.Table, chunk: int = 500) -> pa.Table:
        """The links that exist now among `keys` (a table of src_id, dst_id, kind), in binary key order."""
        columns = [
            self._link_timestamp_sql(c) if c in records.LINK_TIMESTAMP_COLUMNS else c
            for c in records.LINK_COLUMNS
        ]
        values = list(zip(*(keys[name].to_pylist() for name in records.LINK_KEY), strict=True))
        rows: list[tuple] = []
        with self.read_transaction():
            cur = self.conn.cursor()
            for start in range(0, len(values), chunk):
                part = values[start : start + chunk]
                # Joined, not `(src_id, dst_id, kind) IN (VALUES ...)`: SQLite scanned every link for that
                # (114 keys at 2.9M links: 0.62 s); the join looks each key up by the primary key (0.003 s).
                # VALUES names its columns column1.. in both dialects.
                keys_sql = ", ".join(["(?, ?, ?)"] * len(part))
                cur.execute(
                    self._sql(
                        f"SELECT {', '.join(columns)} FROM (VALUES {keys_sql}) AS k JOIN memory_links l "
                        "ON l.src_id = k.column1 AND l.dst_id = k.column2 AND l.kind = k.column3"
                    ),
                    [value for key in part for value in key],
                )
                rows += cur.fetchall()
        return link_table(rows).sort_by([(name, "ascending") for name in records.LINK_KEY])

    def prune_journal(self, journal: Journal, below: int) -> None:
        """Drop the journal's entries before the mark `below` (every reader that needs them read the table
        whole instead)."""
        with self.write_transaction() as cur:
            cur.execute(
                self._sql(f"DELETE FROM {journal.table} WHERE {self._JOURNAL_POSITION} < ?"), (below,)
            )
            cur.execute(
                self._sql(f"UPDATE {journal.table}_state SET pruned_below = ? WHERE pruned_below < ?"),
                (below, below),
            )

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

    def __enter__(self) -> Self:
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
    def _json_value_sql(self, column: str) -> str:
        """A memory column (`m`) as its JSON document value; dialects override where they differ."""
        return f"m.{column}"

    def _row_to_dict(self, columns: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
        out = {}
        for name, value in zip(columns, row, strict=True):
            out[name] = self._decode_embedding(value) if name == "embedding" else self._from_db(name, value)
        return out


@dataclass(frozen=True)
class Journal:
    """A table's journal of the rows written (migrations 5 and 6): its table, `<table>_state`, and the key."""

    table: str
    key: tuple[str, ...]


LINK_JOURNAL = Journal("link_journal", records.LINK_KEY)
MEMORY_JOURNAL = Journal("memory_journal", ("id",))


def link_table(rows: Sequence[tuple]) -> pa.Table:
    """Link rows (records.LINK_COLUMNS, timestamps as the store's text) as a table of LINK_SCHEMA."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(records.LINK_FIELDS)
    return pa.table(
        [
            pa.array(values, pa.string()).cast(f.type)
            if f.type == records.TIMESTAMP
            else pa.array(values, f.type)
            for values, f in zip(columns, records.LINK_FIELDS, strict=True)
        ],
        schema=records.LINK_SCHEMA,
    )


def rebatched(parts: Iterable[list[tuple]], size: int) -> Iterator[list[tuple]]:
    """Rows arriving in parts of any size (one per `IN (...)` chunk), handed on in batches of `size`."""
    pending: list[tuple] = []
    for part in parts:
        pending += part
        while len(pending) >= size:
            batch, pending = pending[:size], pending[size:]
            yield batch
    if pending:
        yield pending


def id_chunks(ids: Sequence[str], size: int = 500) -> Iterator[tuple[list[str], str]]:
    """`ids` in chunks for `IN (...)` lists, each with its placeholders: one statement per chunk, well under
    SQLite's limit on bound variables."""
    for start in range(0, len(ids), size):
        chunk = list(ids[start : start + size])
        yield chunk, ", ".join("?" * len(chunk))


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


def parse_stored_timestamp(text: str) -> dt.datetime:
    from engram_pipelines.core.timestamps import parse_timestamp

    return parse_timestamp(text)
