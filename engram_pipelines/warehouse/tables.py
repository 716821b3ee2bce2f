"""The Parquet warehouse: where each table of each as-of partition lives, and DuckDB views over them.

Layout (hive-style partitions, so DuckDB and any Parquet reader see `as_of` as a column):

    <warehouse>/<table>/as_of=YYYY-MM-DD/part-0.parquet
    <warehouse>/memories/as_of=YYYY-MM-DD/{base,delta,dropped}.parquet   (an incremental snapshot: layers.py)
    <warehouse>/change_sets/<change_set_id>.parquet
    <warehouse>/reports/as_of=YYYY-MM-DD/...
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.records import MEMORY_COLUMNS
from engram_pipelines.core.registry import NAMES
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.warehouse.layers import (
    BASE,
    DELTA,
    DROPPED,
    DROPPED_SCHEMA,
    Layers,
    layered_view_sql,
    read_layered,
)
from engram_pipelines.warehouse.parquet import codecs, read_parquet, write_parquet
from engram_pipelines.warehouse.raw_vectors import link_raw, link_raw_copies
from engram_pipelines.warehouse.shards import namespaces_in_shard
from engram_pipelines.warehouse.shared_reads import SHARED, read_shared

# Tables written per as-of partition, each a directory under the warehouse.
PARTITIONED_TABLES = (
    "memories",
    "links",
    "quarantine",
    "embeddings",
    "similarity_pairs",
    "written",  # what an incremental snapshot read again (`written.py`)
    *NAMES,  # one table per analysis
    "proposals",
)


PART = "part-0.parquet"  # a plain partition's one file


def _link(source: Path, target: Path) -> None:
    """`target` as the same file as `source` (a hard link; a copy on another file system or without links)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


@dataclass(frozen=True)
class Warehouse:
    """The Parquet warehouse. `job`: a job other than the nightly keeps its day's tables apart
    (jobs/<job>/<table>/as_of=DATE/), so a consolidate never overwrites the partitions the nightly wrote for the
    same day; change sets, run pointers, reports and the content-addressed caches are shared."""

    root: Path
    job: str | None = None

    def __post_init__(self) -> None:
        # `Warehouse("data/warehouse")` is the natural call (a root read from a config or an env var is a
        # str); without the coercion the first `root / table` fails far from here. Frozen: set it directly.
        if not isinstance(self.root, Path):
            object.__setattr__(self, "root", Path(self.root))

    @property
    def tables_root(self) -> Path:
        return self.root if self.job is None else self.root / "jobs" / self.job

    def for_job(self, job: str | None) -> Warehouse:
        """This warehouse as `job` writes it (the nightly, a backfill and ad-hoc runs write the shared tables)."""
        return Warehouse(self.root, None if job in (None, "nightly") else job)

    def partition_dir(self, table: str, as_of: dt.date) -> Path:
        return self.tables_root / table / f"as_of={as_of.isoformat()}"

    def table_path(self, table: str, as_of: dt.date) -> Path:
        """The file of a plain partition (a layered one has `layers` instead)."""
        return self.partition_dir(table, as_of) / PART

    def change_set_path(self, change_set_id: str) -> Path:
        return self.root / "change_sets" / f"{change_set_id}.parquet"

    def reports_dir(self, as_of: dt.date) -> Path:
        path = self.root / "reports" / f"as_of={as_of.isoformat()}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def _replacing(self, table: str, as_of: dt.date) -> Iterator[Path]:
        """The directory to write one partition's files in; the partition is replaced by it (renamed into
        place) only when the block ends without an error, so a reader never sees half of one."""
        final = self.partition_dir(table, as_of)
        staging = final.with_name(final.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        yield staging
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)

    def write_table(self, table: str, as_of: dt.date, data: pa.Table) -> Path:
        """Replace one partition of a table atomically (write aside, then rename)."""
        with self._replacing(table, as_of) as staging:
            pq.write_table(data, staging / PART, **codecs(data.schema))
        return self.table_path(table, as_of)

    def layers(self, table: str, as_of: dt.date) -> Layers | None:
        """The partition's layers when it is layered (see `layers.py`), else None."""
        return Layers.of(self.partition_dir(table, as_of))

    def write_layers(
        self,
        table: str,
        as_of: dt.date,
        base: Path,
        delta: pa.Table,
        dropped: pa.Array,
        *,
        raw_vectors: tuple[str, ...] = (),
    ) -> None:
        """Replace one partition with a layered one: `base` (an earlier partition's file, linked, with the raw
        copies of its `raw_vectors` columns: `raw_vectors.py`), the `delta` rows (in id order) and the
        `dropped` ids of base rows it no longer holds."""
        with self._replacing(table, as_of) as staging:
            _link(base, staging / BASE)
            for column in raw_vectors:
                link_raw(base, staging / BASE, column, _link)
            pq.write_table(delta, staging / DELTA, **codecs(delta.schema))
            pq.write_table(pa.table([dropped], schema=DROPPED_SCHEMA), staging / DROPPED)

    def link_partition(self, table: str, source: dt.date, as_of: dt.date) -> None:
        """`as_of`'s partition of `table` as the same files as `source`'s (hard links, copies across devices):
        partitions are replaced whole and never edited in place, so they can share files."""
        if source == as_of:
            return
        with self._replacing(table, as_of) as staging:
            directory = self.partition_dir(table, source)
            for path in sorted([*directory.glob("*.parquet"), *directory.glob("*.npy")]):
                _link(path, staging / path.name)

    @contextmanager
    def partition_writer(self, table: str, as_of: dt.date, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
        """Stream record batches into one partition; it appears (atomically) only when the writer closes."""
        with (
            self._replacing(table, as_of) as staging,
            pq.ParquetWriter(staging / PART, schema, **codecs(schema)) as writer,
        ):
            yield writer

    def shard_path(self, table: str, as_of: dt.date, shard: int, shards: int) -> Path:
        """One shard's part of a table, before the shards are combined (shards/<table>/as_of=D/)."""
        return (
            self.tables_root
            / "shards"
            / table
            / f"as_of={as_of.isoformat()}"
            / f"shard-{shard}-of-{shards}.parquet"
        )

    def write_shard(self, table: str, as_of: dt.date, shard: int, shards: int, data: pa.Table) -> Path:
        return write_parquet(data, self.shard_path(table, as_of, shard, shards))

    def _shard_paths(self, table: str, as_of: dt.date, shards: int) -> list[Path]:
        """Every shard's part, in shard order; a missing shard is an error (its step did not finish)."""
        paths = [self.shard_path(table, as_of, shard, shards) for shard in range(shards)]
        missing = [p.name for p in paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"{table} for {as_of}: shards {', '.join(missing)} were not written")
        return paths

    def read_shards(self, table: str, as_of: dt.date, shards: int) -> pa.Table:
        return pa.concat_tables([read_parquet(p) for p in self._shard_paths(table, as_of, shards)])

    def combine_shards(self, table: str, as_of: dt.date, shards: int) -> Path:
        """Replace the table's partition with its shards' parts, in shard order. A single part is linked into
        place, not read and rewritten (at 1M memories the embeddings' one part took 26 s to copy); the shard
        part stays, so the step can run again."""
        paths = self._shard_paths(table, as_of, shards)
        if len(paths) > 1:
            return self.write_table(table, as_of, self.read_shards(table, as_of, shards))
        with self._replacing(table, as_of) as staging:
            _link(paths[0], staging / PART)
            link_raw_copies(paths[0], staging / PART, _link)
        return self.table_path(table, as_of)

    def write_proposals(self, source: str, as_of: dt.date, intents: pa.Table) -> Path:
        """One analysis's intents for a partition (read back by the change-set step)."""
        return write_parquet(intents, self.partition_dir("proposals", as_of) / f"{source}.parquet")

    def _runs_dir(self, as_of: dt.date) -> Path:
        return self.root / "runs" / f"as_of={as_of.isoformat()}"  # shared: the CLI finds every job's sets

    def read_proposal(self, as_of: dt.date, source: str, columns: list[str] | None = None) -> pa.Table | None:
        """One source's intents for this partition (None when it wrote none), all or `columns` of them."""
        path = self.partition_dir("proposals", as_of) / f"{source}.parquet"
        return pq.read_table(path, columns=columns) if path.exists() else None

    def write_run_pointer(self, as_of: dt.date, job: str, value: dict[str, str]) -> None:
        """Which change sets a job produced for a partition (read by the apply step)."""
        path = self._runs_dir(as_of) / f"{job}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, sort_keys=True))

    def read_run_pointer(self, as_of: dt.date, job: str) -> dict[str, str]:
        path = self._runs_dir(as_of) / f"{job}.json"
        if not path.exists():
            raise FileNotFoundError(
                f"no change set was proposed by {job} for {as_of} (run the change_set step first)"
            )
        return json.loads(path.read_text())

    def read_memories(self, as_of: dt.date) -> pa.Table:
        """The snapshot's memories without their vectors: analyses that read vectors read `embeddings` (the
        snapshot's copy of 1M 384-d vectors is 1.5 GB in Arrow, and it was loaded by five assets that never
        used it)."""
        return self.read_table("memories", as_of, columns=MEMORY_COLUMNS)

    def read_table(
        self,
        table: str,
        as_of: dt.date,
        columns: list[str] | None = None,
        *,
        namespaces: list[str] | None = None,
        ids: pa.Array | None = None,
        keep: bool = True,
    ) -> pa.Table:
        """The partition's rows (of `namespaces` only and with `ids` only, when given) and `columns`, plain or
        layered alike. `keep=False`: a partition no later reader in this process asks for again
        (`read_layered`, `shared_reads`)."""
        layers = self.layers(table, as_of)
        if layers is not None:
            return read_layered(layers, columns, namespaces, ids=ids, keep=keep)
        path = self.table_path(table, as_of)
        if not path.exists():
            raise FileNotFoundError(
                f"no {table} partition for {as_of} under {self.root} (materialise the snapshot for that date first)"
            )
        if table in SHARED and keep and namespaces is None and ids is None:
            return read_shared(table, path, columns)  # read by several steps: once per process
        return read_parquet(path, columns, namespaces, ids)

    def read_shard(
        self, table: str, as_of: dt.date, shard: int, shards: int, columns: list[str] | None = None
    ) -> pa.Table:
        """The rows of one namespace hash shard, filtered while reading (the other shards are never loaded)."""
        if shards == 1:
            return self.read_table(table, as_of, columns)
        present = pc.unique(self.read_table(table, as_of, ["namespace"])["namespace"]).to_pylist()
        chosen = namespaces_in_shard(present, shard, shards) or [""]  # [""]: no namespace is empty (schema)
        return self.read_table(table, as_of, columns, namespaces=chosen)

    def schema(self, table: str, as_of: dt.date) -> pa.Schema:
        """The partition's columns, plain or layered alike."""
        layers = self.layers(table, as_of)
        return pq.read_schema(layers.base if layers is not None else self.table_path(table, as_of))

    def has_table(self, table: str, as_of: dt.date) -> bool:
        return self.table_path(table, as_of).exists() or self.layers(table, as_of) is not None

    def connect(self, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with one view per warehouse table (all partitions, `as_of` as a column)."""
        con = duckdb.connect(database)
        for table in PARTITIONED_TABLES:
            partitions = sorted(p for p in (self.root / table).glob("as_of=*") if not p.name.endswith(".tmp"))
            layers = [Layers.of(p) for p in partitions]
            plain = [
                f.as_posix()
                for p, lay in zip(partitions, layers, strict=True)
                if lay is None
                for f in p.glob("*.parquet")
            ]
            parts = [layered_view_sql(lay) for lay in layers if lay is not None]
            if plain:
                files = ", ".join(quoted(p) for p in plain)
                parts.append(
                    f"SELECT * FROM read_parquet([{files}], hive_partitioning = true, union_by_name = true)"
                )
            if parts:
                con.execute(f"CREATE OR REPLACE VIEW {table} AS {' UNION ALL BY NAME '.join(parts)}")
        if any((self.root / "change_sets").glob("*.parquet")):
            pattern = (self.root / "change_sets" / "*.parquet").as_posix()
            con.execute(
                f"CREATE OR REPLACE VIEW changes AS SELECT * FROM read_parquet('{pattern}', union_by_name = true)"
            )
        return con


class WarehouseBusy(RuntimeError):
    """Another run is using the warehouse."""


@contextlib.contextmanager
def run_lock(warehouse: Path, job: str, as_of: dt.date) -> Iterator[None]:
    """One run at a time per warehouse. Two runs started together wrote the same partitions and both failed
    (`quarantine/as_of=...tmp`); the second now stops at once, naming the first. The lock is the operating
    system's (flock), so a run that dies releases it."""
    path = Path(warehouse) / "runs" / ".lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            raise WarehouseBusy(
                f"{holder} is using the warehouse {warehouse}: wait for it to finish (or stop it), then run again"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(
            f"{job} for {as_of} (pid {os.getpid()}, since {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC)"
        )
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
