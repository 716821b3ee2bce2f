"""Results keyed by content hash, kept across nights as Parquet parts under one warehouse directory.

Work that depends only on a memory's content (its embedding, its parsed contradiction features) is done once per
distinct content: a quiet night finds almost everything here and computes only new or changed contents. Each
`add` writes one part named by the digest of its keys, so concurrent shard steps never write the same file.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import duckdb
import pyarrow as pa

from engram_pipelines.warehouse import write_parquet


class ContentCache:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def lookup(self, shas: list[str]) -> pa.Table | None:
        """The cached rows (a `sha` column plus the cached columns) of those `shas` found; None if none are."""
        files = sorted(self.directory.glob("*.parquet"))
        if not shas or not files:
            return None
        con = duckdb.connect()
        con.register("wanted", pa.table({"sha": pa.array(shas, pa.string())}))
        found = con.sql(
            f"SELECT * FROM read_parquet({[str(f) for f in files]}) c SEMI JOIN wanted w ON w.sha = c.sha "
            "QUALIFY row_number() OVER (PARTITION BY c.sha) = 1"
        ).to_arrow_table()
        return found if found.num_rows else None

    def add(self, table: pa.Table) -> None:
        """Store rows keyed by their `sha` column."""
        if table.num_rows == 0:
            return
        digest = hashlib.sha256("".join(sorted(table["sha"].to_pylist())).encode()).hexdigest()[:16]
        write_parquet(table, self.directory / f"part-{digest}.parquet")
