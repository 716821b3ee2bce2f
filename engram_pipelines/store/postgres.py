"""The PostgreSQL store (psycopg 3): embeddings as pgvector `vector` when the extension exists, else bytea.

Set-based writes go through a temporary batch table filled with COPY. Statements are sent unprepared: a
server-side prepared plan for these batch statements measured ~4x slower here.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv
from psycopg.adapt import Dumper, Loader
from psycopg.pq import Format
from psycopg.types import TypeInfo

from engram_pipelines.core import records
from engram_pipelines.core.progress import Progress
from engram_pipelines.store.base import Store
from engram_pipelines.store.core import (
    JSON_COLUMNS,
    StoreBusy,
    StoreError,
    embedding_array,
    id_chunks,
    rebatched,
)

_BATCH_TYPES = {
    "change_id": "text",
    "target_id": "text",
    "expected_version": "bigint",
    "op": "text",
    "g_check": "integer",
    "g_access_count": "bigint",
    "g_last_accessed_at": "timestamptz",
    "g_pinned": "boolean",
    "hides": "integer",
    "patch": "jsonb",
}
_LINK_BATCH_TYPES = {
    "seq": "integer",
    "change_id": "text",
    "op": "text",
    "namespace": "text",
    "src_id": "text",
    "dst_id": "text",
    "kind": "text",
    "weight": "double precision",
    "origin": "text",
    "traversed_at": "timestamptz",
    "after": "jsonb",
}
_PATCH_CASTS = {"score": "double precision", "stale": "boolean", "zone_since": "timestamptz"}


class _VectorBinaryLoader(Loader):
    """pgvector's binary form: uint16 dim, uint16 unused, dim big-endian float32."""

    format = Format.BINARY

    def load(self, data: Any) -> np.ndarray:
        dim = struct.unpack_from(">H", data)[0]
        return np.frombuffer(bytes(data), dtype=">f4", offset=4, count=dim).astype(np.float32)


class _VectorTextLoader(Loader):
    def load(self, data: Any) -> np.ndarray:
        text = bytes(data).decode()
        return np.array(json.loads(text), dtype=np.float32)


def _vector_dumper(oid: int) -> type[Dumper]:
    class VectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            arr = np.asarray(obj, dtype=">f4")
            return struct.pack(">HH", arr.size, 0) + arr.tobytes()

    VectorDumper.oid = oid
    return VectorDumper


class PostgresStore(Store):
    dialect = "postgres"

    def _connect(self) -> psycopg.Connection:
        try:
            conn = psycopg.connect(self.url, autocommit=False, prepare_threshold=None)
        except psycopg.OperationalError as exc:
            raise StoreError(
                f"cannot connect to PostgreSQL store {self.redacted_url}: {exc}".strip()
            ) from None
        self.vector_oid: int | None = None
        self._streams_open = 0
        self._register_vector(conn)
        return conn

    def _register_vector(self, conn: psycopg.Connection) -> None:
        info = TypeInfo.fetch(conn, "vector")
        conn.rollback()
        if info is None:
            return
        self.vector_oid = info.oid
        conn.adapters.register_loader(info.oid, _VectorBinaryLoader)
        conn.adapters.register_loader(info.oid, _VectorTextLoader)
        conn.adapters.register_dumper(np.ndarray, _vector_dumper(info.oid))

    def _has_pgvector(self) -> bool:
        if self.vector_oid is not None:
            return True
        rows = self.query("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        if not rows:
            return False
        try:
            with self.write_transaction() as cur:
                cur.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error:
            return False
        self._register_vector(self.conn)
        return self.vector_oid is not None

    def embedding_column_type(self) -> str:
        rows = self.query(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = 'memories'::regclass AND attname = 'embedding'"
        )
        return rows[0][0]

    @contextmanager
    def exclusive_apply(self) -> Iterator[None]:
        # A session-level advisory lock: it outlives the apply's many transactions and dies with the session.
        with self.conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_lock(hashtext('engram-pipelines apply'))")
        self.conn.commit()
        try:
            yield
        finally:
            with self.conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_unlock(hashtext('engram-pipelines apply'))")
            self.conn.commit()

    @contextmanager
    def read_transaction(self) -> Iterator[None]:
        # A read between two batches of a streamed read (export fetches the few rows its batches cannot hold)
        # joins the stream's transaction: ending it would close the stream's server-side cursor under it.
        if self._streams_open:
            yield
            return
        try:
            yield
        finally:
            self.conn.rollback()

    @contextmanager
    def _stream(self, name: str | None) -> Iterator[psycopg.Cursor | psycopg.ServerCursor]:
        """A cursor for a streamed read, server-side when named (None: a plain one, for COPY); its transaction
        ends when the stream does."""
        self._streams_open += 1
        try:
            with self.conn.cursor(name=name, binary=True) as cur:
                yield cur
        finally:
            self._streams_open -= 1
            self.conn.rollback()

    @contextmanager
    def write_transaction(self) -> Iterator[psycopg.Cursor]:
        cur = self.conn.cursor()
        # A lock another session holds is waited for (PostgreSQL queues the waiters), up to the store's limit.
        cur.execute(f"SET LOCAL lock_timeout = '{int(self.lock_wait_seconds * 1000)}ms'")
        try:
            yield cur
        except psycopg.errors.LockNotAvailable as exc:
            self.conn.rollback()
            raise StoreBusy(
                f"the PostgreSQL store {self.redacted_url} is locked by another session (waited "
                f"{self.lock_wait_seconds:.0f}s for its lock): nothing of this transaction was written; find the holder in "
                "pg_stat_activity / pg_locks, let it finish, then run again"
            ) from exc
        except BaseException:
            self.conn.rollback()
            raise
        else:
            self.conn.commit()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    def _json_object(self, pairs: Sequence[tuple[str, str]]) -> str:
        return "jsonb_build_object(" + ", ".join(f"'{k}', {v}" for k, v in pairs) + ")"

    def _lock_clause(self) -> str:
        return "FOR UPDATE OF m"

    def _ensure_batch_tables(self, cur: Any) -> None:
        cols = ", ".join(f"{c} {_BATCH_TYPES[c]}" for c in self._BATCH_COLUMNS)
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS _batch ({cols}, hit integer NOT NULL DEFAULT 0) ON COMMIT DELETE ROWS"
        )
        cur.execute("DELETE FROM _batch")

    def _ensure_link_batch_table(self, cur: Any) -> None:
        cols = ", ".join(f"{c} {_LINK_BATCH_TYPES[c]}" for c in self._LINK_BATCH_COLUMNS)
        cur.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS _link_batch ({cols}, before jsonb) ON COMMIT DELETE ROWS"
        )
        cur.execute("DELETE FROM _link_batch")
        # _json_float_sql reads a double through its text form, which is exact (shortest round-trip) only
        # while extra_float_digits > 0; a server configured lower would put rounded weights in the audit log.
        cur.execute("SET LOCAL extra_float_digits = 1")

    def _json_timestamp_sql(self, expr: str) -> str:
        return f"""to_char({expr} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""

    def _json_float_sql(self, expr: str) -> str:
        # The pre-image must read back as python wrote it before (json.dumps of the float): the same digits,
        # and a whole number keeps its ".0" (jsonb keeps a numeric's scale; 1.0 would otherwise come back as
        # the int 1). float8 -> numeric directly keeps only 15 digits, so go through the exact text form.
        return (
            f"CASE WHEN {expr} = trunc({expr}) AND abs({expr}) < 1e16 THEN round({expr}::text::numeric, 1) "
            f"ELSE {expr}::text::numeric END"
        )

    def _json_copy_key_sql(self, document: str, source: str, key: str) -> str:
        return f"jsonb_set({document}, '{{{key}}}', {source} -> '{key}')"

    def _patch_has_sql(self, column: str) -> str:
        return f"jsonb_exists(b.patch, '{column}')"

    def _patch_value_sql(self, column: str) -> str:
        if column in JSON_COLUMNS:
            return f"(b.patch -> '{column}')"
        cast = _PATCH_CASTS.get(column)
        return f"(b.patch ->> '{column}')::{cast}" if cast else f"(b.patch ->> '{column}')"

    def _audit_after_sql(self) -> str:
        return "jsonb_set(b.patch, '{version}', to_jsonb(b.expected_version + 1))"

    def _fill_batch_table(self, cur: Any, table: str, columns: Sequence[str], rows: list[tuple]) -> None:
        with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _embedding_is_vector(self) -> bool:
        if not hasattr(self, "_is_vector"):
            self._is_vector = self.embedding_column_type().startswith("vector")
        return self._is_vector

    def _encode_embedding(self, vector: Any) -> Any:
        if vector is None:
            return None
        if self._embedding_is_vector():
            return np.asarray(vector, dtype=np.float32)
        return np.asarray(vector, dtype="<f4").tobytes()

    def _decode_embedding(self, value: Any) -> np.ndarray | None:
        if value is None:
            return None
        if isinstance(value, np.ndarray):
            return value
        return np.frombuffer(bytes(value), dtype="<f4").copy()

    def _embedding_preimage_sql(self) -> str:
        if self._embedding_is_vector():
            return "m.embedding::text"
        return "encode(m.embedding, 'hex')"

    def _embedding_from_preimage(self, preimage: dict[str, Any]) -> Any:
        value = preimage.get("embedding")
        if not value:
            return None
        if value.startswith("["):
            return self._encode_embedding(np.array(json.loads(value), dtype=np.float32))
        return self._encode_embedding(np.frombuffer(bytes.fromhex(value), dtype="<f4"))

    def _to_db(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in JSON_COLUMNS:
            return value if isinstance(value, str) else json.dumps(value, sort_keys=column == "metadata")
        if isinstance(value, str) and (column.endswith("_at") or column == "zone_since"):
            from engram_pipelines.core.timestamps import parse_timestamp

            return parse_timestamp(value)
        if isinstance(value, np.generic):
            return value.item()
        return value

    def _from_db(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in JSON_COLUMNS and isinstance(value, str):
            return json.loads(value)
        if isinstance(value, dt.datetime):
            return value.astimezone(dt.UTC)
        return value

    def iter_memory_batches(
        self, batch_size: int, embedding_dim: int, ids: Sequence[str] | None = None
    ) -> Iterator[pa.RecordBatch]:
        schema = records.memory_schema(embedding_dim)
        columns = schema.names
        # The vector as the bytes of its floats, turned into one array per batch (embedding_array) instead of a
        # numpy array per row by the type's loader: the fetch of 100k rows 4.4-5.0 s -> 3.2-3.9 s, same table.
        if self._embedding_is_vector():
            # pgvector's binary form: uint16 dim, uint16 unused, then the floats big-endian.
            raw_embedding, byte_order = "substring(vector_send(embedding) FROM 5)", ">f4"
        else:
            raw_embedding, byte_order = "embedding", "<f4"  # bytea, as _encode_embedding writes it
        select = [
            f"{c}::text" if c in JSON_COLUMNS else raw_embedding if c == "embedding" else c for c in columns
        ]

        def batch(rows: list[tuple]) -> pa.RecordBatch:
            cols = list(zip(*rows, strict=True))
            arrays = []
            for name, values in zip(columns, cols, strict=True):
                if name == "embedding":
                    arrays.append(embedding_array(values, embedding_dim, byte_order))
                else:
                    arrays.append(pa.array(values, type=schema.field(name).type))
            return pa.RecordBatch.from_arrays(arrays, schema=schema)

        # Binary order (COLLATE "C"), as SQLite, DuckDB and Arrow sort: one order for every snapshot.
        if ids is None:
            with self._stream("engram_snapshot") as cur:
                cur.itersize = batch_size  # type: ignore[attr-defined]  # a named stream: a ServerCursor
                cur.execute(f'SELECT {", ".join(select)} FROM memories ORDER BY id COLLATE "C"')
                while rows := cur.fetchmany(batch_size):
                    yield batch(rows)
            return
        query = f'SELECT {", ".join(select)} FROM memories WHERE id = ANY(%s) ORDER BY id COLLATE "C"'
        with self.read_transaction():
            cur = self.conn.cursor()
            parts = (cur.execute(query, (chunk,)).fetchall() for chunk, _ in id_chunks(sorted(ids)))
            for rows in rebatched(parts, batch_size):
                yield batch(rows)

    def read_ahead(self, progress: Progress) -> None:
        """Nothing: the server reads its own files and keeps its own cache (`pg_prewarm` is the operator's tool)."""

    # The oldest transaction still running: every entry of a transaction that had not committed when a read
    # began sits at or after it.
    _JOURNAL_POSITION = "xid"
    _JOURNAL_MARK_SQL = "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint"

    def _link_timestamp_sql(self, column: str) -> str:
        return _LINK_TIMESTAMP_TEXT.format(column)

    def iter_link_batches(self, batch_size: int) -> Iterator[pa.RecordBatch]:
        """The links as CSV from COPY, parsed by Arrow: a Python tuple per link made the link read a fifth of a
        later night's snapshot once the first night had written its temporal edges (~2.9M at 1M memories)."""
        columns = [
            self._link_timestamp_sql(c) if c in records.LINK_TIMESTAMP_COLUMNS else c
            for c in records.LINK_COLUMNS
        ]
        # Binary order (COLLATE "C"), as SQLite, DuckDB and Arrow sort: one order for every snapshot.
        order = ", ".join(f'{c} COLLATE "C"' for c in ("src_id", "dst_id", "kind"))
        query = (
            f"COPY (SELECT {', '.join(columns)} FROM memory_links ORDER BY {order}) "
            "TO STDOUT WITH (FORMAT csv)"
        )
        with self._stream(None) as cur, cur.copy(query) as copy:
            stream = io.BufferedReader(_CopyStream(copy), buffer_size=1 << 20)
            if not stream.peek(1):  # no links: Arrow refuses an empty CSV
                return
            reader = pa_csv.open_csv(
                stream,
                read_options=pa_csv.ReadOptions(column_names=records.LINK_COLUMNS, block_size=4 << 20),
                parse_options=pa_csv.ParseOptions(newlines_in_values=True),
                # PostgreSQL writes NULL unquoted and empty and an empty string as "": only the first is null.
                convert_options=pa_csv.ConvertOptions(
                    column_types=records.LINK_SCHEMA,
                    null_values=[""],
                    strings_can_be_null=False,
                    quoted_strings_can_be_null=False,
                ),
            )
            for block in reader:
                batch = pa.RecordBatch.from_arrays(block.columns, schema=records.LINK_SCHEMA)
                for start in range(0, batch.num_rows, batch_size):
                    yield batch.slice(start, batch_size)


# Timestamps leave PostgreSQL as ISO 8601 in UTC with microseconds, the form Arrow's CSV reader parses.
_LINK_TIMESTAMP_TEXT = "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') AS {0}"


class _CopyStream(io.RawIOBase):
    """COPY TO STDOUT's chunks as a readable binary stream (for Arrow's streaming CSV reader)."""

    def __init__(self, copy: psycopg.Copy) -> None:
        self._copy = copy
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # noqa: ANN401 - any writable buffer
        while not self._pending:
            chunk = self._copy.read()
            if not chunk:
                return 0
            self._pending = memoryview(bytes(chunk))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size
