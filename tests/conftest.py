"""Fixtures shared by the suite: a store of each dialect (SQLite file, real PostgreSQL), a warehouse."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

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
