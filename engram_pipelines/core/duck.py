"""One way to use DuckDB in process: a connection for one computation, closed when it is done.

The connections are cursors of one in-memory database per process (and per optimizer setting). Opening a
database registers every built-in function anew: 28 ms a `duckdb.connect()` on this 2-core machine, against
8 us a cursor, and a quiet night at 1M memories opened 136 of them (4.2 s of a profiled night). A cursor has
its own session: its registered tables, temporary tables and session settings (`SET TimeZone`) are its own
and go when it closes; global settings would reach every cursor, so the one `duck` sets (`joins_as_written`)
has a database of its own. A database keeps the memory its cursors freed for itself (a closed 1.3 GB
group-by left 0.8 GB behind) unless its allocator's background threads hand it back: with them, it is back
within 3 s. A forked child leaves its parent's databases alone and opens its own (see `_forget_inherited`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import duckdb

# joins_as_written -> the database.
_databases: dict[bool, duckdb.DuckDBPyConnection] = {}
_lock = threading.Lock()


def _cursor(joins_as_written: bool) -> duckdb.DuckDBPyConnection:
    # Under the lock: a connection is not safe to share between threads, its cursors are.
    with _lock:
        database = _databases.get(joins_as_written)
        if database is None:
            database = duckdb.connect(config={"allocator_background_threads": True})
            if joins_as_written:
                database.execute("SET disabled_optimizers = 'join_order'")
            _databases[joins_as_written] = database
        return database.cursor()


def _forget_inherited() -> None:
    """In a forked child: the parent's databases stay allocated and are never used. Their worker threads were
    not forked: freeing one at the child's exit crashed the child (SIGSEGV), or hung it once the child had
    opened a database of its own. (A multiprocessing worker started by fork leaves through `os._exit`, which
    frees nothing; a plain forked child exits through the interpreter's shutdown.)"""
    global _lock
    for database in _databases.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(database))
    _databases.clear()
    _lock = threading.Lock()  # another thread of the parent may have held it at the fork


os.register_at_fork(after_in_child=_forget_inherited)


@contextmanager
def duck(*, joins_as_written: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection of its own, closed on leaving the block (an unclosed one keeps its
    memory until the garbage collector finds it). Materialise results (`.to_arrow_table()`, `.fetchall()`)
    inside the block: a relation does not outlive its connection.

    `joins_as_written`: joins run in the order the query writes them. For a pair table joined twice to one
    feature table (`p JOIN f a ON a.id = p.left_id JOIN f b ON b.id = p.right_id WHERE a.x = b.x`) the
    optimiser may join `a` with `b` on `x` first: with x a list of numbers, mostly empty, 15k pairs became
    2.3M intermediate rows and 1.0 s instead of 0.014 s (the semantic step's repetition test, 100k memories)."""
    con = _cursor(joins_as_written)
    try:
        yield con
    finally:
        con.close()
