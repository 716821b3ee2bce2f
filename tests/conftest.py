"""Fixtures shared by the suite: a store of each dialect (SQLite file, real PostgreSQL), a warehouse."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engram_pipelines.store import Store, open_store
from engram_pipelines.warehouse.tables import Warehouse

_db_names = itertools.count()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[object]:
    from engram_pipelines.testing.postgres import PostgresServer

    server = PostgresServer()
    server.start()
    yield server
    server.stop()


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path}/engram.db"
    server = request.getfixturevalue("pg_server")
    return server.create_database(f"engram_test_{os.getpid()}_{next(_db_names)}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url(request.param, request, tmp_path)


@pytest.fixture
def other_store_url(store_url: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A second, empty store of the same dialect as `store_url` (no schema yet): where a backup is restored."""
    kind = "sqlite" if store_url.startswith("sqlite:") else "postgres"
    (tmp_path / "other").mkdir()
    return _url(kind, request, tmp_path / "other")


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    s = open_store(store_url, migrate=True)
    yield s
    s.close()


@pytest.fixture
def warehouse(tmp_path: Path) -> Warehouse:
    return Warehouse(tmp_path / "warehouse")


AS_OF = dt.date(2026, 11, 29)
T0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


def unit(vector: list[float] | np.ndarray, dim: int = 384) -> np.ndarray:
    """A unit vector of `dim` whose leading components are `vector` (the rest zero)."""
    out = np.zeros(dim, dtype=np.float32)
    out[: len(vector)] = vector
    return out / np.linalg.norm(out)


def memory(i: int | str, **fields: object) -> dict[str, object]:
    """A plain test memory with a 384-d vector; override any column."""
    rng = np.random.default_rng(zlib.crc32(str(i).encode()))
    base = {
        "id": f"m{i}" if isinstance(i, int) else i,
        "namespace": "ns1",
        "content": f"memory number {i}",
        "created_at": T0,
        "embedding": rng.standard_normal(384).astype(np.float32),
        "embedding_model": "test-384",
    }
    base.update(fields)
    vec = np.asarray(base["embedding"], dtype=np.float32) if base["embedding"] is not None else None
    if vec is not None:
        base["embedding"] = vec / np.linalg.norm(vec)
    return base


class ProgressRecorder:
    """A Progress that keeps each task as (task, total, units advanced)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, int | None, int]] = []

    def start(self, task: str, total: int | None) -> None:
        self.tasks.append((task, total, 0))

    def advance(self, n: int) -> None:
        task, total, done = self.tasks[-1]
        self.tasks[-1] = (task, total, done + n)

    def finish(self) -> None:
        pass
