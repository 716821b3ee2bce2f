"""A night's result kept for the next night: a few tables in one directory, replaced whole.

The reusing analyses (`contradictions/reuse.py`, `knowledge/semantic_reuse.py`) keep what they computed beside
the fingerprints it was computed for; a reader must never see half of one, nor one of another format.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from engram_pipelines.warehouse.parquet import read_parquet, write_parquet


def write_kept(directory: Path, tables: dict[str, pa.Table], version: str) -> None:
    """Written aside and renamed into place; the version file last: a directory without it is never read."""
    staging = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for name, table in tables.items():
        write_parquet(table, staging / f"{name}.parquet")
    (staging / "version").write_text(version)
    shutil.rmtree(directory, ignore_errors=True)
    staging.rename(directory)


def read_kept(directory: Path, names: Sequence[str], version: str) -> list[pa.Table] | None:
    """The kept tables in `names` order, or None: none yet, another version, or damaged (computed again)."""
    try:
        if (directory / "version").read_text() != version:
            return None
        return [read_parquet(directory / f"{name}.parquet") for name in names]
    except (OSError, ValueError, pa.ArrowException):
        return None
