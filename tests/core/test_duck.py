"""`duck()`: each block is a session of its own, though the blocks share one database per process."""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import duckdb
import pyarrow as pa
import pytest

from engram_pipelines.core.duck import duck


def _setting(con: duckdb.DuckDBPyConnection, name: str) -> str:
    return con.sql(f"SELECT current_setting('{name}')::VARCHAR").fetchall()[0][0]


def test_blocks_open_at_once_see_only_their_own_tables() -> None:
    with duck() as a, duck() as b:
        a.register("t", pa.table({"x": [1, 2]}))
        b.register("t", pa.table({"x": [10]}))
        assert a.sql("SELECT sum(x) FROM t").fetchall() == [(3,)]
        assert b.sql("SELECT sum(x) FROM t").fetchall() == [(10,)]
        b.unregister("t")
        assert a.sql("SELECT sum(x) FROM t").fetchall() == [(3,)]


def test_what_a_block_made_goes_with_it() -> None:
    with duck() as con:
        con.execute("CREATE TEMP TABLE eligible AS SELECT 1 AS x")
        con.register("r", pa.table({"y": [1]}))
        con.execute("SET TimeZone = 'Asia/Tokyo'")
    with duck() as con:
        assert _setting(con, "TimeZone") != "Asia/Tokyo"
        names = {row[0] for row in con.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
        views = {
            row[0] for row in con.sql("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
        }
        assert "eligible" not in names and "r" not in views
        con.execute("CREATE TEMP TABLE eligible AS SELECT 2 AS x")  # the name is free again
        assert con.sql("SELECT x FROM eligible").fetchall() == [(2,)]


def test_joins_as_written_reaches_only_its_own_blocks() -> None:
    with duck(joins_as_written=True) as ordered, duck() as plain:
        assert "join_order" in _setting(ordered, "disabled_optimizers")
        assert "join_order" not in _setting(plain, "disabled_optimizers")
    with duck() as plain:
        assert "join_order" not in _setting(plain, "disabled_optimizers")


def test_the_allocator_background_threads_are_on() -> None:
    # They hand back what closed cursors freed: without them a closed 1.3 GB group-by left 0.8 GB of RSS.
    with duck() as con:
        assert _setting(con, "allocator_background_threads") == "true"


def test_threads_compute_at_once() -> None:
    def total(n: int) -> int:
        with duck() as con:
            con.register("numbers", pa.table({"x": list(range(n))}))
            return con.sql("SELECT sum(x) FROM numbers").fetchall()[0][0]

    sizes = [1_000 + 17 * i for i in range(16)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(total, sizes)) == [n * (n - 1) // 2 for n in sizes]


_FORK = """
import os, sys
from engram_pipelines.core.duck import duck

def total():
    with duck() as con:
        return con.sql("SELECT sum(x) FROM range(10) t(x)").fetchall()[0][0]

total()
pid = os.fork()
if pid == 0:
    if sys.argv[1] == "uses":
        assert total() == 45
    sys.exit(0)  # an exit through the interpreter's own shutdown, as a plain forked child makes
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("child", ["uses", "idle"])
def test_a_forked_child_opens_its_own_database_and_exits(child: str) -> None:
    # Without `_forget_inherited` the idle child died of SIGSEGV and the other hung at its exit.
    done = subprocess.run(
        [sys.executable, "-c", _FORK, child], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["0"]
