"""One way to use DuckDB in process: an in-memory database for one computation, closed when it is done."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import duckdb


@contextmanager
def duck() -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection, closed on leaving the block (an unclosed one keeps its memory until the
    garbage collector finds it). Materialise results (`.to_arrow_table()`, `.fetchall()`) inside the block: a
    relation does not outlive its connection."""
    con = duckdb.connect()
    try:
        yield con
    finally:
        con.close()
