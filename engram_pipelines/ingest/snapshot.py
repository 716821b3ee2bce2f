"""Snapshot the live store into one as-of partition of Parquet, streamed in batches.

Every row is validated (pandera for the columns, numpy for the embedding). Invalid rows are not dropped:
they go to the `quarantine` table with the reason, and are counted. Analyses read only the valid rows.

Incremental (the default): a night asks the store's journal of memories (migration 6: triggers record the id of
every row inserted, updated or deleted, whoever writes it) which rows were written since the mark the previous
snapshot took, re-reads those, drops the ones gone (deleted, purged), and carries every other row over from the
previous partition; the links likewise from their journal (migration 5). The result is the partition a full
read would write (tests hold them equal over nights of edits, accesses, deletes and restores). A full read
instead when asked (`snapshot.incremental: false`), every `snapshot.full_every_days`, and whenever the previous
snapshot cannot be trusted as a base: none yet, another store, another vector size or schema version, a file
missing, or a journal that no longer reaches back to its mark (pruned, or an older copy of the store); and when
so many rows changed that one sequential read is cheaper (`FULL_READ_SHARE`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core import records
from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.store import Store
from engram_pipelines.store.core import LINK_JOURNAL, MEMORY_JOURNAL
from engram_pipelines.warehouse.parquet import read_parquet
from engram_pipelines.warehouse.schemas import memory_row_problems
from engram_pipelines.warehouse.tables import Warehouse
from engram_pipelines.warehouse.written import marks_text, write_written

QUARANTINE_SAMPLE = 20
STATE_FILE = "snapshot_state.json"
STATE_FORMAT = 2  # 2 (2026-12-03): the memory journal's mark and the rows held; 1 compared change signatures
# Above this share of changed memories a full read is cheaper than reading them by id and merging: at 100k
# memories on SQLite (2026-12-02), 75% changed (the night after a first night) took 7.1 s incremental, 4.2 s full.
FULL_READ_SHARE = 0.3


def quarantine_schema(embedding_dim: int) -> pa.Schema:
    """The memory columns, every one nullable (a quarantined row may lack what a valid one must have: a
    timestamp that could not be read is null), and the reason."""
    fields = [f.with_nullable(True) for f in records.memory_schema(embedding_dim)]
    return pa.schema([*fields, pa.field("quarantine_reason", pa.string(), nullable=False)])


@dataclass
class SnapshotResult:
    as_of: dt.date
    memories: int = 0
    quarantined: int = 0
    # Stored vectors of another size (or missing where a model is named): dropped, their texts re-embedded.
    vectors_dropped: int = 0
    links: int = 0
    namespaces: dict[str, int] = field(default_factory=dict)
    quarantine_samples: list[dict[str, str]] = field(default_factory=list)
    memories_path: str = ""
    links_path: str = ""
    quarantine_path: str = ""
    mode: str = "full"  # full | incremental
    full_reason: str = ""  # why a full read (empty when incremental)
    reread: int = 0  # memories read from the store (all of them when full)
    deleted: int = 0  # memories of the previous partition gone from the store (incremental)
    links_read: int = 0  # links read from the store (all of them when full)
    links_full_reason: str = ""  # why the links were read whole (empty when carried over)

    @property
    def rows_read(self) -> int:
        return self.memories + self.quarantined

    @property
    def invalid_fraction(self) -> float:
        return self.quarantined / self.rows_read if self.rows_read else 0.0


def take_snapshot(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    embedding_dim: int = 384,
    batch_size: int = 50_000,
    progress: Progress | None = None,
    incremental: bool = True,
    full_every_days: int = 7,
) -> SnapshotResult:
    """Export memories and links to the `as_of` partition; quarantine invalid memory rows with reasons."""
    progress = progress or SilentProgress()
    result = SnapshotResult(as_of=as_of)
    saved = _saved_state(warehouse)
    previous, reason = (
        _trusted_base(store, warehouse, saved, as_of, embedding_dim, full_every_days)
        if incremental
        else (None, "a full snapshot was asked for (snapshot.incremental or execution.reuse false)")
    )
    # Taken before the rows are read: a row written meanwhile is journaled at or after it, and read again next
    # night (never the other way round, which would miss it).
    memories_mark = store.journal_mark(MEMORY_JOURNAL)
    written = None
    if previous is not None:
        written, reason = _memories_written(store, warehouse, previous)
    if previous is None or written is None:
        result.full_reason = reason
        _full(store, warehouse, as_of, embedding_dim, batch_size, progress, result)
        full_at = as_of
    else:
        _incremental(store, warehouse, as_of, previous, written, embedding_dim, batch_size, progress, result)
        full_at = dt.date.fromisoformat(previous["full_at"])
    result.memories_path = str(warehouse.partition_dir("memories", as_of))
    result.quarantine_path = str(warehouse.table_path("quarantine", as_of))

    links_mark, link_keys = _snapshot_links(store, warehouse, as_of, previous, batch_size, progress, result)
    result.links_path = str(warehouse.table_path("links", as_of))
    # What was read again, for the analyses that judge only what it can have changed (`warehouse/written.py`).
    write_written(
        warehouse,
        as_of,
        ids=written if result.mode == "incremental" else None,
        link_keys=link_keys,
        marks=marks_text(memories_mark, links_mark),
        since=None if previous is None else marks_text(previous["memories_mark"], previous["links_mark"]),
    )
    _write_state(warehouse, as_of, store, embedding_dim, full_at, result.rows_read, memories_mark, links_mark)
    # Pruned up to what the night before this one read, whatever its mode: a night of slack for its re-run.
    if saved is not None and saved.get("store") == _store_identity(store):
        for journal, key in ((MEMORY_JOURNAL, "memories_mark"), (LINK_JOURNAL, "links_mark")):
            if (consumed := _mark(saved, key)) is not None:
                store.prune_journal(journal, consumed)
    return result


def _snapshot_links(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    previous: dict[str, Any] | None,
    batch_size: int,
    progress: Progress,
    result: SnapshotResult,
) -> tuple[int, pa.Table | None]:
    """Write `as_of`'s links; returns the store's link journal mark taken before they were read, and the keys
    (src_id, dst_id, kind) of the links read again (None when all were read).

    Incremental when the previous snapshot is a trusted base and saved its mark: the links journaled since
    (inserted, updated or deleted) are read again by key and merged into the previous partition; the rest is
    carried over (a quiet night links the previous file). A full read otherwise, or when the journal lost
    entries from that mark on, or when so many links changed that one read is cheaper."""
    # Before the read: what is written meanwhile is read again next night.
    mark = store.journal_mark(LINK_JOURNAL)
    keys = None
    since = _mark(previous, "links_mark") if previous is not None else None
    base = dt.date.fromisoformat(previous["as_of"]) if previous is not None else None
    if base is None or since is None or not warehouse.has_table("links", base):
        result.links_full_reason = "no earlier snapshot to carry the links over from"
    else:
        # The share above which one full read is cheaper is taken of the links the previous snapshot held (its
        # file's footer): counting the store's was 1.0 s of a quiet night at 1M memories (2.9M links).
        total = _row_count(warehouse, "links", base)
        at_most = int(FULL_READ_SHARE * total)
        keys = store.journal_keys(LINK_JOURNAL, since, at_most)
        if keys is None:
            result.links_full_reason = f"the store's link journal {_NO_REACH}"
        elif len(keys) > at_most:
            result.links_full_reason = (
                f"more than {at_most:,} links written since the last snapshot, which held {total:,}"
            )
            keys = None
    if keys is None:
        progress.start("snapshot links", store.count("memory_links"))
        with warehouse.partition_writer("links", as_of, records.LINK_SCHEMA) as links:
            for batch in store.iter_link_batches(batch_size):
                links.write_batch(batch)
                result.links += batch.num_rows
                result.links_read += batch.num_rows
                progress.advance(batch.num_rows)
        progress.finish()
        return mark, None
    assert base is not None
    if not len(keys):
        warehouse.link_partition("links", base, as_of)
        result.links = _row_count(warehouse, "links", as_of)
        return mark, keys
    progress.start("snapshot links (written since the last snapshot)", len(keys))
    fresh = store.links_of(keys)
    progress.advance(len(keys))
    progress.finish()
    with duck() as con:
        con.register("journaled", keys)
        con.register("reread", fresh)
        # A link written between the journal read and the row read is in `fresh` without its key: both are
        # taken out of the previous partition.
        links = con.sql(
            # Not hive-partitioned: the file's as_of=D folder would add a column.
            f"SELECT * FROM read_parquet({quoted(str(warehouse.table_path('links', base)))}, "
            "hive_partitioning = false) ANTI JOIN "
            "(SELECT src_id, dst_id, kind FROM journaled UNION SELECT src_id, dst_id, kind FROM reread) "
            "USING (src_id, dst_id, kind) "
            "UNION ALL SELECT * FROM reread ORDER BY src_id, dst_id, kind"
        ).to_arrow_table()
    warehouse.write_table("links", as_of, links.cast(records.LINK_SCHEMA))
    result.links, result.links_read = links.num_rows, fresh.num_rows
    key = list(records.LINK_KEY)
    return mark, pa.concat_tables([keys.select(key), fresh.select(key).cast(keys.select(key).schema)])


def _full(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    embedding_dim: int,
    batch_size: int,
    progress: Progress,
    result: SnapshotResult,
) -> None:
    schema = records.memory_schema(embedding_dim)
    store.read_ahead(progress)
    progress.start("snapshot memories", store.count("memories"))
    namespace_counts: dict[str, int] = {}
    with (
        warehouse.partition_writer("memories", as_of, schema) as good,
        warehouse.partition_writer("quarantine", as_of, quarantine_schema(embedding_dim)) as bad,
    ):
        for batch in store.iter_memory_batches(batch_size, embedding_dim):
            valid, invalid = _checked(batch, result)
            good.write_batch(valid)
            if invalid.num_rows:
                bad.write_batch(invalid)
            result.memories += valid.num_rows
            result.quarantined += invalid.num_rows
            result.reread += batch.num_rows
            _count_namespaces(namespace_counts, valid)
            progress.advance(batch.num_rows)
    progress.finish()
    result.namespaces = dict(sorted(namespace_counts.items()))


_NO_REACH = "no longer reaches back to the last snapshot's mark (pruned, or an older copy of the store)"


def _memories_written(
    store: Store, warehouse: Warehouse, previous: dict[str, Any]
) -> tuple[pa.Array | None, str]:
    """(ids of the memories journaled since the previous snapshot's mark, in id order; or None and why a full
    read instead)."""
    held = previous["rows"]  # memories and quarantined rows the previous snapshot wrote
    at_most = int(FULL_READ_SHARE * held)
    keys = store.journal_keys(MEMORY_JOURNAL, previous["memories_mark"], at_most)
    if keys is None:
        return None, f"the store's memory journal {_NO_REACH}"
    if len(keys) > at_most:
        return None, (
            f"more than {at_most:,} memories written since the last snapshot, which held {held:,}: "
            "one full read is faster"
        )
    written = len(keys) + _pending(warehouse, previous)
    if written > at_most:
        return None, (
            f"{written:,} memories were written since the last full read on {previous['full_at']} (the last "
            f"snapshot held {held:,}): one full read is faster than reading them as layers"
        )
    return keys["id"].combine_chunks(), ""


def _gone(warehouse: Warehouse, base: dt.date, missing: pa.Array) -> int:
    """How many of the `missing` ids (journaled, no longer in the store) the `base` partition held."""
    if not len(missing):
        return 0
    held = [
        warehouse.read_table(t, base, columns=["id"], keep=False)["id"] for t in ("memories", "quarantine")
    ]
    return sum(int(pc.sum(pc.is_in(missing, value_set=ids.combine_chunks())).as_py() or 0) for ids in held)


def _incremental(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    previous: dict[str, Any],
    written: pa.Array,
    embedding_dim: int,
    batch_size: int,
    progress: Progress,
    result: SnapshotResult,
) -> None:
    """The previous partition, minus the rows journaled since (`written`), plus those of them the store still
    holds, read again."""
    base = dt.date.fromisoformat(previous["as_of"])
    result.mode = "incremental"
    if not len(written):
        # A quiet night: the previous partition is tonight's, file for file.
        for table in ("memories", "quarantine"):
            warehouse.link_partition(table, base, as_of)
        namespaces = warehouse.read_table("memories", as_of, columns=["namespace"])
        _summarise(namespaces, warehouse.read_table("quarantine", as_of), result)
        return
    progress.start("snapshot memories (written since the last snapshot)", len(written))
    valid_parts, invalid_parts = [], []
    for batch in store.iter_memory_batches(batch_size, embedding_dim, ids=written.to_pylist()):
        valid, invalid = _checked(batch, result)
        valid_parts.append(valid)
        invalid_parts.append(invalid)
        result.reread += batch.num_rows
        progress.advance(batch.num_rows)
    progress.finish()
    found = pa.chunked_array([p.column("id") for p in (*valid_parts, *invalid_parts)], pa.string())
    result.deleted = _gone(warehouse, base, written.filter(pc.invert(pc.is_in(written, value_set=found))))
    schema = records.memory_schema(embedding_dim)
    fresh = pa.Table.from_batches(valid_parts, schema=schema)
    _write_layers(warehouse, base, as_of, schema, written, fresh)
    namespaces = warehouse.read_table("memories", as_of, columns=["namespace"])
    old_quarantine = warehouse.read_table("quarantine", base)
    kept = old_quarantine.filter(pc.invert(pc.is_in(old_quarantine["id"], value_set=written)))
    q_schema = quarantine_schema(embedding_dim)
    quarantine = pa.concat_tables(
        [kept.cast(q_schema), pa.Table.from_batches(invalid_parts, schema=q_schema)]
    ).sort_by("id")
    warehouse.write_table("quarantine", as_of, quarantine)
    _summarise(namespaces, quarantine, result)


def _write_layers(
    warehouse: Warehouse, base: dt.date, as_of: dt.date, schema: pa.Schema, drop: pa.Array, fresh: pa.Table
) -> None:
    """`as_of`'s memories as layers over the file of the last full read: the rows written since (the previous
    delta's, minus those in `drop`, and the `fresh` ones) and the ids of that file's rows they replace or that
    are gone. The unchanged rows are never read or written again (rewriting them was 41 s at 1M)."""
    layers = warehouse.layers("memories", base)
    if layers is None:
        warehouse.write_layers(
            "memories", as_of, warehouse.table_path("memories", base), fresh.sort_by("id"), drop
        )
        return
    earlier = read_parquet(layers.delta).cast(schema)
    kept = earlier.filter(pc.invert(pc.is_in(earlier["id"], value_set=drop)))
    dropped = pc.unique(pa.concat_arrays([pq.read_table(layers.dropped)["id"].combine_chunks(), drop]))
    delta = pa.concat_tables([kept, fresh]).sort_by("id")
    warehouse.write_layers("memories", as_of, layers.base, delta, dropped.sort())


def _row_count(warehouse: Warehouse, table: str, as_of: dt.date) -> int:
    """Rows of a plain partition, from its file's footer."""
    return pq.ParquetFile(warehouse.table_path(table, as_of)).metadata.num_rows


def _pending(warehouse: Warehouse, previous: dict[str, Any]) -> int:
    """Rows the previous partition holds in its delta (written since the last full read)."""
    layers = warehouse.layers("memories", dt.date.fromisoformat(previous["as_of"]))
    return 0 if layers is None else pq.ParquetFile(layers.delta).metadata.num_rows


def _summarise(namespaces: pa.Table, quarantine: pa.Table, result: SnapshotResult) -> None:
    """Counts and samples of the written partition, as a full read reports them."""
    result.memories, result.quarantined = namespaces.num_rows, quarantine.num_rows
    counts: dict[str, int] = {}
    # One count over the whole column: a merged partition arrives in many small chunks (145k at 100k memories
    # after a first night, 11 s counted chunk by chunk).
    _count_namespaces(counts, namespaces.combine_chunks().to_batches()[0] if namespaces.num_rows else None)
    result.namespaces = dict(sorted(counts.items()))
    # The first quarantined rows in id order, carried over or not.
    result.quarantine_samples = []
    if quarantine.num_rows:
        _sample(result, quarantine.slice(0, QUARANTINE_SAMPLE).combine_chunks().to_batches()[0])


def _checked(batch: pa.RecordBatch, result: SnapshotResult) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    batch, dropped = _without_unusable_vectors(batch)
    result.vectors_dropped += dropped
    valid, invalid = _split(batch)
    if invalid.num_rows:
        _sample(result, invalid)
    return valid, invalid


def _store_identity(store: Store) -> str:
    return hashlib.sha256(store.redacted_url.encode()).hexdigest()[:16]


def _write_state(
    warehouse: Warehouse,
    as_of: dt.date,
    store: Store,
    embedding_dim: int,
    full_at: dt.date,
    rows: int,
    memories_mark: int,
    links_mark: int,
) -> None:
    state = {
        "memories_mark": memories_mark,
        "links_mark": links_mark,
        "rows": rows,
        "format": STATE_FORMAT,
        "as_of": as_of.isoformat(),
        "full_at": full_at.isoformat(),
        "store": _store_identity(store),
        "schema_version": store.schema_version(),
        "embedding_dim": embedding_dim,
    }
    path = warehouse.tables_root / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(path.name + ".draft")
    draft.write_text(json.dumps(state, sort_keys=True))
    draft.replace(path)


def _trusted_base(
    store: Store,
    warehouse: Warehouse,
    state: dict[str, Any] | None,
    as_of: dt.date,
    embedding_dim: int,
    full_every_days: int,
) -> tuple[dict[str, Any] | None, str]:
    """The previous snapshot's saved `state` when it can serve as the base of an incremental one, else why
    not."""
    path = warehouse.tables_root / STATE_FILE
    if not path.exists():
        return None, "no earlier snapshot in this warehouse"
    if state is None:
        return None, f"{path} is not readable"
    try:
        base = dt.date.fromisoformat(state["as_of"])
        full_at = dt.date.fromisoformat(state["full_at"])
    except (ValueError, KeyError, TypeError):
        return None, f"{path} is not readable"
    if state.get("format") != STATE_FORMAT:
        return None, "the earlier snapshot was written by another release"
    if not all(isinstance(state.get(key), int) for key in ("memories_mark", "links_mark", "rows")):
        return None, f"{path} is not readable"
    if state.get("store") != _store_identity(store):
        return None, "the earlier snapshot is of another store"
    if state.get("embedding_dim") != embedding_dim:
        return None, "snapshot.embedding_dim changed"
    if state.get("schema_version") != store.schema_version():
        return None, "the store's schema changed"
    if (as_of - full_at).days >= full_every_days:
        return None, f"the last full read was on {full_at} (snapshot.full_every_days: {full_every_days})"
    for table in ("memories", "quarantine"):
        if not warehouse.has_table(table, base):
            return None, f"the earlier snapshot's {table} of {base} is missing"
    return state, ""


def _saved_state(warehouse: Warehouse) -> dict[str, Any] | None:
    """What the last snapshot into this warehouse saved (`_write_state`); None when missing or unreadable."""
    try:
        state = json.loads((warehouse.tables_root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return state if isinstance(state, dict) else None


def _mark(state: dict[str, Any], key: str) -> int | None:
    """A journal mark a saved state holds (None in a state that holds none)."""
    mark = state.get(key)
    return mark if isinstance(mark, int) else None


def _without_unusable_vectors(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
    """Rows whose stored vector the snapshot cannot hold (another size than snapshot.embedding_dim, e.g. a mem0
    store's 1536-d vectors, or missing although a model is named) keep their row and lose only the vector:
    the embeddings step embeds their text with the configured model. Quarantined, every row of such a store
    stopped the night."""
    unusable = pc.and_(pc.is_null(batch.column("embedding")), pc.is_valid(batch.column("embedding_model")))
    dropped = pc.sum(unusable).as_py() or 0
    if not dropped:
        return batch, 0
    for name in ("embedding_model", "embedded_content_sha"):
        column = batch.column(name)
        index = batch.schema.get_field_index(name)
        batch = batch.set_column(index, name, pc.if_else(unusable, pa.scalar(None, column.type), column))
    return batch, int(dropped)


def vectors_dropped_message(dropped: int, embedding_dim: int) -> str:
    return (
        f"{dropped:,} stored vectors are not {embedding_dim}-d (the config's snapshot.embedding_dim) or are "
        "missing: their texts are embedded with the configured model tonight. If the store's vectors come from "
        "the configured model, set snapshot.embedding_dim to their size to use them as they are."
    )


def _split(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    problems = memory_row_problems(batch)
    batch = batch.replace_schema_metadata(None)  # the reader's notes are read; the files get the plain schema
    if not problems:
        empty = pa.RecordBatch.from_pylist(
            [], schema=quarantine_schema(batch.schema.field("embedding").type.list_size)
        )
        return batch, empty
    bad_rows = np.array(sorted(problems), dtype=np.int64)
    keep = np.ones(batch.num_rows, dtype=bool)
    keep[bad_rows] = False
    ids = batch.column("id").take(pa.array(bad_rows)).to_pylist()
    reasons = [f"row {ids[i]!s}: " + "; ".join(problems[int(p)]) for i, p in enumerate(bad_rows)]
    invalid = pa.RecordBatch.from_arrays(
        [*batch.take(pa.array(bad_rows)).columns, pa.array(reasons, pa.string())],
        schema=quarantine_schema(batch.schema.field("embedding").type.list_size),
    )
    return batch.filter(pa.array(keep)), invalid


def _sample(result: SnapshotResult, invalid: pa.RecordBatch) -> None:
    room = QUARANTINE_SAMPLE - len(result.quarantine_samples)
    if room <= 0:
        return
    for row_id, reason in zip(
        invalid.column("id").to_pylist()[:room],
        invalid.column("quarantine_reason").to_pylist()[:room],
        strict=True,
    ):
        result.quarantine_samples.append({"id": str(row_id), "reason": reason})


def _count_namespaces(counts: dict[str, int], batch: pa.RecordBatch | None) -> None:
    if batch is None or batch.num_rows == 0:
        return
    table = (
        pa.table({"namespace": batch.column("namespace")})
        .group_by("namespace")
        .aggregate([([], "count_all")])
    )
    for namespace, n in zip(
        table.column("namespace").to_pylist(), table.column("count_all").to_pylist(), strict=True
    ):
        counts[namespace] = counts.get(namespace, 0) + n
