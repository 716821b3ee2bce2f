"""Plain partitions that several steps of one night read whole, kept in this process after the first read.

A night's steps read the links partition five times (promotions, semantic extraction, associations, temporal
edges, gc) and the decay scores three times. At 1M memories each read of the 2.86M links was 0.35 s with the
file in the page cache and up to 0.7 s from a cold one (2026-12-07). Kept here: the newest partition of each
table in `SHARED`, all its columns, keyed by its file's identity (partitions are replaced whole and never
edited, so a rewritten or relinked file is another key). One partition per table, so a process holds at most
one copy of each: about 520 MiB at 1M memories (links 411, decay scores 112), 200 MiB on a first night.

Only whole reads are kept: a read of some namespaces (a shard's step in a process of its own) or of some ids
reads its rows from the file, as before. The change set step, which no reader of these follows, lets them go
(`forget`): it is where a first night's peak is.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from engram_pipelines.warehouse.parquet import read_parquet

SHARED = frozenset({"links", "decay_scores"})

_Identity = tuple[str, int, int, int]
_KEPT: dict[str, tuple[_Identity, pa.Table]] = {}


def read_shared(table: str, path: Path, columns: list[str] | None) -> pa.Table:
    """`columns` (all when None) of the plain partition file `path` of `table` (one of `SHARED`)."""
    st = path.stat()
    identity = (str(path), st.st_ino, st.st_mtime_ns, st.st_size)
    kept = _KEPT.get(table)
    if kept is None or kept[0] != identity:
        _KEPT.pop(table, None)  # the older partition goes before the newer one is read
        kept = _KEPT[table] = (identity, read_parquet(path))
    whole = kept[1]
    return whole if columns is None else whole.select(columns)


def forget() -> None:
    """Let every kept partition go."""
    _KEPT.clear()
