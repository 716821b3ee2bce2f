"""The Parquet warehouse: where each table of each as-of partition lives, and DuckDB views over them.

Layout (hive-style partitions, so DuckDB and any Parquet reader see `as_of` as a column):

    <warehouse>/<table>/as_of=YYYY-MM-DD/part-0.parquet
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
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.records import MEMORY_COLUMNS
from engram_pipelines.core.registry import NAMES
from engram_pipelines.warehouse.shards import namespaces_in_shard

# Tables written per as-of partition, each a directory under the warehouse.
PARTITIONED_TABLES = (
    "memories",
    "links",
    "quarantine",
    "embeddings",
    "similarity_pairs",
    *NAMES,  # one table per analysis
    "proposals",
)


def _is_vector(field: pa.Field) -> bool:
    kind = field.type
    return (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind)) and pa.types.is_floating(
        kind.value_type
    )


def _leaf_paths(schema: pa.Schema) -> list[str]:
    """Parquet's column paths (`ops.list.element` for a list `ops`): per-column options name leaves, and a
    nested column named only by its field gets the writer's default (no compression)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    return [column.path for column in pq.ParquetFile(pa.BufferReader(sink.getvalue())).schema]


def _codecs(schema: pa.Schema) -> dict[str, object]:
    """zstd and dictionaries for every column but float vectors: embeddings barely compress (1.42 GB zstd vs
    1.54 GB plain at 1M x 384) and zstd and the dictionary attempt made their write ~1.7x and read ~1.6x slower."""
    vectors = {f.name for f in schema if _is_vector(f)}
    if not vectors:
        return {"compression": "zstd"}
    leaves = {path: path.split(".")[0] in vectors for path in _leaf_paths(schema)}
    return {
        "compression": {path: "none" if vector else "zstd" for path, vector in leaves.items()},
        "use_dictionary": [path for path, vector in leaves.items() if not vector],
    }


def read_parquet(
    path: Path, columns: list[str] | None = None, namespaces: list[str] | None = None
) -> pa.Table:
    """The file's rows (those of `namespaces` only, when given) and `columns` (all when None).

    A file with a float vector column is streamed batch by batch without pre-buffering, each batch's vectors
    copied into one array as they come: `pq.read_table` decodes a 1M x 384 column through buffers several
    times its size (peak 6.1 GB and 14.5 s for a 1.6 GB table; streamed: about 2 GB and 4 s). The vector column
    comes back as one chunk, so its readers get a numpy view of it without another copy."""
    file = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    schema = file.schema_arrow
    wanted = columns if columns is not None else schema.names
    vectors = [
        name for name in wanted if _is_vector(f := schema.field(name)) and pa.types.is_fixed_size_list(f.type)
    ]
    if not vectors:
        filters = [("namespace", "in", namespaces)] if namespaces is not None else None
        return pq.read_table(path, columns=columns, filters=filters)
    read = wanted if namespaces is None or "namespace" in wanted else [*wanted, "namespace"]
    chosen = pa.array(namespaces or [], pa.string())
    chunks: dict[str, list[pa.Array]] = {name: [] for name in wanted if name not in vectors}
    gathered = {name: _VectorGather(schema.field(name).type, file.metadata.num_rows) for name in vectors}
    for batch in file.iter_batches(batch_size=65_536, columns=read):
        if namespaces is not None:
            batch = batch.filter(pc.is_in(batch["namespace"], chosen))
        for name, parts in chunks.items():
            parts.append(batch[name])
        for name, gather in gathered.items():
            gather.add(batch[name])
    out = pa.schema([schema.field(name) for name in wanted], metadata=schema.metadata)
    return pa.table(
        [
            gathered[f.name].array() if f.name in gathered else pa.chunked_array(chunks[f.name], f.type)
            for f in out
        ],
        schema=out,
    )


class _VectorGather:
    """One float vector column assembled from batches into a single array (values and validity)."""

    def __init__(self, kind: pa.DataType, capacity: int) -> None:
        self.kind, self.size, self.rows = kind, kind.list_size, 0
        # Untouched pages of np.empty are never resident: room for every row costs only what is filled.
        self.values = np.empty(capacity * max(self.size, 1), dtype=kind.value_type.to_pandas_dtype())
        self.valid: list[np.ndarray] = []

    def add(self, column: pa.Array) -> None:
        n = len(column)
        flat = column.values.slice(column.offset * self.size, n * self.size)
        self.values[self.rows * self.size : (self.rows + n) * self.size] = flat.to_numpy(zero_copy_only=False)
        self.valid.append(column.is_valid().to_numpy(zero_copy_only=False))
        self.rows += n

    def array(self) -> pa.Array:
        valid = np.concatenate(self.valid) if self.valid else np.ones(0, dtype=bool)
        values = pa.array(self.values[: self.rows * self.size])
        mask = None if valid.all() else pa.array(~valid)
        return pa.FixedSizeListArray.from_arrays(values, type=self.kind, mask=mask)


def write_parquet(table: pa.Table, path: Path, **options: object) -> Path:
    """Write `table` to `path` whole or not at all: aside first, then renamed over (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_suffix(".tmp")
    pq.write_table(table, staging, **{**_codecs(table.schema), **options})
    staging.rename(path)
    return path


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
        return self.partition_dir(table, as_of) / "part-0.parquet"

    def change_set_path(self, change_set_id: str) -> Path:
        return self.root / "change_sets" / f"{change_set_id}.parquet"

    def reports_dir(self, as_of: dt.date) -> Path:
        path = self.root / "reports" / f"as_of={as_of.isoformat()}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def _replacing(self, table: str, as_of: dt.date) -> Iterator[Path]:
        """The path to write one partition's part at; the partition is replaced by it (renamed into place)
        only when the block ends without an error, so a reader never sees half of one."""
        final = self.partition_dir(table, as_of)
        staging = final.with_name(final.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        yield staging / "part-0.parquet"
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)

    def write_table(self, table: str, as_of: dt.date, data: pa.Table) -> Path:
        """Replace one partition of a table atomically (write aside, then rename)."""
        with self._replacing(table, as_of) as part:
            pq.write_table(data, part, **_codecs(data.schema))
        return self.table_path(table, as_of)

    def link_partition(self, table: str, source: dt.date, as_of: dt.date) -> Path:
        """`as_of`'s partition of `table` as the same file as `source`'s (a hard link, a copy across devices):
        partitions are replaced whole and never edited in place, so they can share a file."""
        if source == as_of:
            return self.table_path(table, as_of)
        with self._replacing(table, as_of) as part:
            try:
                os.link(self.table_path(table, source), part)
            except OSError:
                shutil.copyfile(self.table_path(table, source), part)
        return self.table_path(table, as_of)

    @contextmanager
    def partition_writer(self, table: str, as_of: dt.date, schema: pa.Schema) -> Iterator[pq.ParquetWriter]:
        """Stream record batches into one partition; it appears (atomically) only when the writer closes."""
        with (
            self._replacing(table, as_of) as part,
            pq.ParquetWriter(part, schema, **_codecs(schema)) as writer,
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
        with self._replacing(table, as_of) as part:
            try:
                os.link(paths[0], part)
            except OSError:  # another file system (or no hard links there): copy it
                shutil.copyfile(paths[0], part)
        return self.table_path(table, as_of)

    def write_proposals(self, source: str, as_of: dt.date, intents: pa.Table) -> Path:
        """One analysis's intents for a partition (read back by the change-set step)."""
        return write_parquet(intents, self.partition_dir("proposals", as_of) / f"{source}.parquet")

    def _runs_dir(self, as_of: dt.date) -> Path:
        return self.root / "runs" / f"as_of={as_of.isoformat()}"  # shared: the CLI finds every job's sets

    def read_proposal(self, as_of: dt.date, source: str) -> pa.Table | None:
        """One source's intents for this partition (None when it wrote none)."""
        path = self.partition_dir("proposals", as_of) / f"{source}.parquet"
        return pq.read_table(path) if path.exists() else None

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

    def read_table(self, table: str, as_of: dt.date, columns: list[str] | None = None) -> pa.Table:
        path = self.table_path(table, as_of)
        if not path.exists():
            raise FileNotFoundError(
                f"no {table} partition for {as_of} under {self.root} (materialise the snapshot for that date first)"
            )
        return read_parquet(path, columns)

    def read_shard(
        self, table: str, as_of: dt.date, shard: int, shards: int, columns: list[str] | None = None
    ) -> pa.Table:
        """The rows of one namespace hash shard, filtered while reading (the other shards are never loaded)."""
        if shards == 1:
            return self.read_table(table, as_of, columns)
        present = pc.unique(self.read_table(table, as_of, ["namespace"])["namespace"]).to_pylist()
        chosen = namespaces_in_shard(present, shard, shards) or [""]  # [""]: no namespace is empty (schema)
        return read_parquet(self.table_path(table, as_of), columns, chosen)

    def has_table(self, table: str, as_of: dt.date) -> bool:
        return self.table_path(table, as_of).exists()

    def connect(self, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with one view per warehouse table (all partitions, `as_of` as a column)."""
        con = duckdb.connect(database)
        for table in PARTITIONED_TABLES:
            if any((self.root / table).glob("as_of=*/*.parquet")):
                pattern = (self.root / table / "as_of=*" / "*.parquet").as_posix()
                con.execute(
                    f"CREATE OR REPLACE VIEW {table} AS SELECT * FROM read_parquet('{pattern}', "
                    "hive_partitioning = true, union_by_name = true)"
                )
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
