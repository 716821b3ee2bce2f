"""Change sets written to their files range by range, as compose makes them, never whole in memory.

A 1M first night's three sets are 3.45 GB in Arrow (the auto set alone 2.8 GB); gathered before they were
written, they were the night's peak. Here each range's addressed changes go to a spool file beside the sets as
they come, the set's digest and counts grow with them, and once the last range is in (the set's id hashes all
its change ids) the spool is copied into the set's file a row group at a time, with the id added. The file
holds what `compose.compose` gives (tested), so its id, its changes and its counts are the same.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from engram_pipelines.changes.compose import (
    ADDRESSED,
    CHANGE_SCHEMA,
    named,
    set_id,
    set_metadata,
    update_joined,
)
from engram_pipelines.changes.intents import REVIEW_CLASSES
from engram_pipelines.changes.registry import NO_CHANGES, tally
from engram_pipelines.warehouse.parquet import write_parquet_groups
from engram_pipelines.warehouse.tables import Warehouse

# Rows per row group of a spooled set's file, and so what the copy holds at once: ~110 MB of a first night's
# auto set (~850 bytes per change in Arrow).
ROW_GROUP_ROWS = 131_072


@dataclass(frozen=True)
class SpooledSet:
    """A set written to its file: the file, its schema's metadata, its counts (`registry.Tally.counts`) and its
    changes per namespace and op (`registry.ops_by`)."""

    path: Path
    meta: dict[str, str]
    counts: dict[str, Any]
    by_namespace_op: dict[str, dict[str, int]]


def spool_change_sets(
    parts: Iterable[dict[str, pa.Table]], warehouse: Warehouse, *, as_of: dt.date, job: str
) -> dict[str, SpooledSet]:
    """review class -> the set written from `parts` (`compose.composed_parts`: per range, class -> addressed
    changes, in the set's order). A set whose file is there already (its id is its content) is not written
    again."""
    folder = warehouse.root / "change_sets"
    folder.mkdir(parents=True, exist_ok=True)
    spools = {
        klass: _Spool(folder / f".spool-{as_of.isoformat()}-{job}-{klass}.arrow") for klass in REVIEW_CLASSES
    }
    try:
        for composed in parts:
            for klass, part in composed.items():
                spools[klass].add(part)
        # What the pool keeps of the composed ranges and the snapshot is handed back before the copies.
        pa.default_memory_pool().release_unused()
        return {
            klass: spool.finish(warehouse, as_of=as_of, job=job, klass=klass)
            for klass, spool in spools.items()
        }
    finally:
        for spool in spools.values():
            spool.close()


class _Spool:
    """One class's changes as they come: an Arrow IPC file (written and read back without encoding), the
    digest of its change ids and its counts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sink = pa.OSFile(str(path), "wb")
        self._writer = pa.ipc.new_file(self._sink, ADDRESSED)
        self._digest = hashlib.sha256()
        self._tally = NO_CHANGES

    def add(self, part: pa.Table) -> None:
        if part.num_rows == 0:
            return
        self._writer.write_table(part)
        update_joined(self._digest, part["change_id"])
        # A namespace is never split across ranges, so the parts' tallies add up without overlap.
        self._tally = self._tally.plus(tally(part))

    def finish(self, warehouse: Warehouse, *, as_of: dt.date, job: str, klass: str) -> SpooledSet:
        self._writer.close()
        self._sink.close()
        change_set_id = set_id(as_of, job, klass, self._digest.hexdigest())
        meta = set_metadata(as_of, job, klass, change_set_id)
        path = warehouse.change_set_path(change_set_id)
        if not path.exists():
            groups = (named(group, change_set_id) for group in self._groups())
            write_parquet_groups(CHANGE_SCHEMA.with_metadata(meta), groups, path, write_statistics=True)
        return SpooledSet(
            path=path,
            meta=meta,
            counts=self._tally.counts(),
            by_namespace_op=dict(sorted(self._tally.by_namespace_op.items())),
        )

    def _groups(self) -> Iterator[pa.Table]:
        """The spooled changes again, in row groups of ROW_GROUP_ROWS (the last one shorter), read a batch at a
        time (not mapped: a mapped file's pages count in the process's memory as they are read)."""
        with pa.OSFile(str(self.path), "rb") as source:
            reader = pa.ipc.open_file(source)
            pending: list[pa.RecordBatch] = []
            rows = 0
            for i in range(reader.num_record_batches):
                batch = reader.get_batch(i)
                while batch.num_rows:
                    take = batch.slice(0, ROW_GROUP_ROWS - rows)
                    pending.append(take)
                    rows += take.num_rows
                    batch = batch.slice(take.num_rows)
                    if rows == ROW_GROUP_ROWS:
                        yield pa.Table.from_batches(pending, ADDRESSED)
                        pending, rows = [], 0
            if pending:
                yield pa.Table.from_batches(pending, ADDRESSED)

    def close(self) -> None:
        """Let the spool go (it is this module's own scratch file)."""
        if not self._sink.closed:
            self._writer.close()
            self._sink.close()
        self.path.unlink(missing_ok=True)
