"""Results keyed by content hash, kept across nights as Parquet parts under one warehouse directory.

Work that depends only on a memory's content (its embedding, its parsed contradiction features) is done once per
distinct content: a quiet night finds almost everything here and computes only new or changed contents. Each
`add` writes one part named by the digest of its keys, so concurrent shard steps never write the same file.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.digests import content_sha_sql
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import identifier
from engram_pipelines.warehouse.parquet import write_parquet

_log = logging.getLogger(__name__)


def discard_unreadable(path: Path, error: Exception) -> None:
    """A cache file that cannot be read (truncated, garbage) is ours to drop: it is recomputed, not trusted,
    and every later run would fail on it otherwise."""
    _log.warning("cache file %s cannot be read (%s): discarded, its contents will be recomputed", path, error)
    path.unlink(missing_ok=True)


class ContentCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def lookup(
        self, shas: Sequence[str] | pa.Array | pa.ChunkedArray, columns: Sequence[str] | None = None
    ) -> pa.Table | None:
        """The cached rows (a `sha` column plus the cached columns, or only `columns` of them) of those `shas`
        found; None if none are. Only the columns asked for are read from the parts."""
        files = sorted(self.directory.glob("*.parquet"))
        if not len(shas) or not files:
            return None
        try:
            found = self._query(files, shas, columns)
        except duckdb.Error:
            # Some part is damaged: read each one alone, drop those that fail, ask again.
            files = [f for f in files if self._readable(f)]
            if not files:
                return None
            found = self._query(files, shas, columns)
        return found if found.num_rows else None

    @staticmethod
    def _query(
        files: list[Path], shas: Sequence[str] | pa.Array | pa.ChunkedArray, columns: Sequence[str] | None
    ) -> pa.Table:
        """The rows of `shas`, one per key. Parts hold disjoint keys but for a content two concurrent shard
        steps computed at once; keeping the first row of each key in the query (a window over every row found)
        took 40% of a lookup at 1M, so the rows are counted first and only a lookup that found a key twice is
        made distinct (one key's rows are equal: the same content computed alike)."""
        chosen = "*" if columns is None else ", ".join(f"c.{identifier(c)}" for c in ("sha", *columns))
        with duck() as con:
            con.register("wanted", pa.table({"sha": string_array(shas)}))
            found = con.sql(
                f"SELECT {chosen} FROM read_parquet({[str(f) for f in files]}) c SEMI JOIN wanted w ON w.sha = c.sha"
            ).to_arrow_table()
            if pc.count_distinct(found["sha"]).as_py() == found.num_rows:
                return found
            con.register("found", found)
            return con.sql("SELECT DISTINCT ON (sha) * FROM found").to_arrow_table()

    @staticmethod
    def _readable(path: Path) -> bool:
        try:
            pq.read_table(path)
        except (pa.ArrowException, OSError) as error:
            discard_unreadable(path, error)
            return False
        return True

    def add(self, table: pa.Table) -> None:
        """Store rows keyed by their `sha` column."""
        if table.num_rows == 0:
            return
        digest = hashlib.sha256("".join(sorted(table["sha"].to_pylist())).encode()).hexdigest()[:16]
        write_parquet(table, self.directory / f"part-{digest}.parquet")


def string_array(values: Sequence[str | None] | pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """`values` as Arrow strings (an Arrow column as it is: no Python strings made of it)."""
    return values if isinstance(values, pa.Array | pa.ChunkedArray) else pa.array(list(values), pa.string())


def computed_by_content(
    contents: Sequence[str | None] | pa.Array | pa.ChunkedArray,
    compute: Callable[[list[str]], pa.Table],
    cache: ContentCache | None,
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """`compute(texts)` (a table of one row per text, in order) for `contents`, row for row, computing each
    distinct content once; with a `cache`, once across nights: what the cache holds is looked up, the rest is
    computed (every column, for the nights after) and added. With `columns`, only those columns are answered
    and read from the cache. A missing content counts as the empty text.

    The contents' hashes (`content_sha`) and distinct values are found by DuckDB: hashing and collecting 1M
    texts in Python took 3 s of a night's contradictions step; only the texts to compute become Python strings."""
    texts = string_array(contents)
    with duck() as con:
        con.register("c", pa.table({"content": texts, "position": np.arange(len(texts), dtype=np.int64)}))
        sha = content_sha_sql("coalesce(content, '')")
        wanted = con.sql(f"SELECT {sha} AS sha, position FROM c").to_arrow_table()
        con.register("wanted", wanted)
        unique = con.sql("SELECT DISTINCT sha FROM wanted ORDER BY sha").to_arrow_table()["sha"]
        known = cache.lookup(unique, columns) if cache is not None else None
        if known is not None:
            unique = unique.filter(pc.invert(pc.is_in(unique, value_set=known["sha"])))
        if len(unique) or known is None:
            con.register("missing", pa.table({"sha": unique}))
            todo = con.sql(
                "SELECT m.sha, any_value(coalesce(c.content, '')) AS content FROM missing m "
                "JOIN wanted w USING (sha) JOIN c USING (position) GROUP BY m.sha ORDER BY m.sha"
            ).to_arrow_table()
            fresh = compute(todo["content"].to_pylist())
            fresh = fresh.add_column(0, "sha", todo["sha"])
            if cache is not None:
                cache.add(fresh)
            if columns is not None:
                fresh = fresh.select(["sha", *columns])
            known = fresh if known is None else pa.concat_tables([known.cast(fresh.schema), fresh])
        con.register("known", known)
        return con.sql(
            "SELECT k.* EXCLUDE (sha) FROM wanted w JOIN known k USING (sha) ORDER BY w.position"
        ).to_arrow_table()
