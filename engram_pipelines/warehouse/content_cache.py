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
import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.core.digests import content_sha
from engram_pipelines.core.duck import duck
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

    def lookup(self, shas: list[str]) -> pa.Table | None:
        """The cached rows (a `sha` column plus the cached columns) of those `shas` found; None if none are."""
        files = sorted(self.directory.glob("*.parquet"))
        if not shas or not files:
            return None
        try:
            found = self._query(files, shas)
        except duckdb.Error:
            # Some part is damaged: read each one alone, drop those that fail, ask again.
            files = [f for f in files if self._readable(f)]
            if not files:
                return None
            found = self._query(files, shas)
        return found if found.num_rows else None

    @staticmethod
    def _query(files: list[Path], shas: list[str]) -> pa.Table:
        with duck() as con:
            con.register("wanted", pa.table({"sha": pa.array(shas, pa.string())}))
            return con.sql(
                f"SELECT * FROM read_parquet({[str(f) for f in files]}) c SEMI JOIN wanted w ON w.sha = c.sha "
                "QUALIFY row_number() OVER (PARTITION BY c.sha) = 1"
            ).to_arrow_table()

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


def computed_by_content(
    contents: Sequence[str | None], compute: Callable[[list[str]], pa.Table], cache: ContentCache | None
) -> pa.Table:
    """`compute(texts)` (a table of one row per text, in order) for `contents`, row for row, computing each
    distinct content once; with a `cache`, once across nights: what the cache holds is looked up, the rest is
    computed and added. A missing content counts as the empty text."""
    texts = [c or "" for c in contents]
    shas = [content_sha(t) for t in texts]
    unique = sorted(set(shas))
    known = cache.lookup(unique) if cache is not None else None
    have = set(known["sha"].to_pylist()) if known is not None else set()
    missing = [sha for sha in unique if sha not in have]
    if missing or known is None:
        text_of = dict(zip(shas, texts, strict=True))
        fresh = compute([text_of[sha] for sha in missing])
        fresh = fresh.add_column(0, "sha", pa.array(missing, pa.string()))
        if cache is not None:
            cache.add(fresh)
        known = fresh if known is None else pa.concat_tables([known.cast(fresh.schema), fresh])
    with duck() as con:
        con.register("wanted", pa.table({"sha": pa.array(shas, pa.string()), "position": range(len(shas))}))
        con.register("known", known)
        return con.sql(
            "SELECT k.* EXCLUDE (sha) FROM wanted w JOIN known k USING (sha) ORDER BY w.position"
        ).to_arrow_table()
