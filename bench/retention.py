"""Retention judged from due dates (`retention_due.py`) against judging every row, three nights, same run.

The demo corpus of N memories (no store: the snapshot's Arrow table) is scored and judged for a first night
(nothing kept: every row judged, the due dates written), its moves landed as the apply would (a zone and its
start; purged rows gone), then a night after agents touched 1% of the rows (half read, half edited) and a quiet
night. Each night runs both ways on the same decay scores; the moves must be equal. Prints the seconds of each
way, the ratio and how many rows the due dates judged.

    .venv/bin/python bench/retention.py [--size 1000000]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engram_pipelines.analyses.lifecycle.decay import decay_scores  # noqa: E402
from engram_pipelines.analyses.lifecycle.retention import retention_moves  # noqa: E402
from engram_pipelines.analyses.lifecycle.retention_due import retention_reusing  # noqa: E402
from engram_pipelines.config.model import Config  # noqa: E402
from engram_pipelines.core.duck import duck  # noqa: E402
from engram_pipelines.core.timestamps import end_of_day  # noqa: E402
from engram_pipelines.demo.corpus import generate  # noqa: E402

AS_OF = dt.date(2026, 12, 2)


def _landed(memories: pa.Table, moves: pa.Table, at: dt.datetime) -> pa.Table:
    """The snapshot after the apply: moved rows in their new zone since two hours after the night's as-of."""
    landed = at + dt.timedelta(hours=2)
    with duck() as con:
        con.register("m", memories)
        con.register("moves", moves.select(["id", "to_zone"]))
        return (
            con.sql(
                f"""
            SELECT m.* REPLACE (
                coalesce(v.to_zone, m.zone) AS zone,
                CASE WHEN v.id IS NULL THEN m.zone_since ELSE TIMESTAMPTZ '{landed.isoformat()}' END AS zone_since,
                CASE WHEN v.id IS NULL THEN m.updated_at ELSE TIMESTAMPTZ '{landed.isoformat()}' END AS updated_at)
            FROM m LEFT JOIN moves v USING (id)
            WHERE v.to_zone IS DISTINCT FROM 'purged'
            ORDER BY id
            """
            )
            .to_arrow_table()
            .cast(memories.schema)
        )


def _written(memories: pa.Table, share: float, at: dt.datetime) -> pa.Table:
    """Agents' writes after the night of `at`: `share` of the rows evenly by id, every other one edited (new
    text), the rest read (access count and time)."""
    n = memories.num_rows
    touched = np.zeros(n, dtype=bool)
    touched[:: max(1, round(1 / share))] = True
    edited = touched & (np.cumsum(touched) % 2 == 0)
    read = touched & ~edited
    written = at + dt.timedelta(hours=12)
    content = pc.if_else(
        pa.array(edited),
        pc.binary_join_element_wise(memories["content"], " (edited)", ""),
        memories["content"],
    )
    stamp = pa.scalar(written, memories.schema.field("last_accessed_at").type)
    return (
        memories.set_column(memories.schema.get_field_index("content"), "content", content)
        .set_column(
            memories.schema.get_field_index("access_count"),
            "access_count",
            pc.add(memories["access_count"], pa.array(read.astype(np.int64))),
        )
        .set_column(
            memories.schema.get_field_index("last_accessed_at"),
            "last_accessed_at",
            pc.if_else(pa.array(read), stamp, memories["last_accessed_at"]),
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    args = parser.parse_args()
    config = Config()
    print(
        f"# retention benchmark, {dt.date.today()}, {platform.machine()} x {os.cpu_count()} cores, "
        f"{args.size:,} demo memories, Python {platform.python_version()}"
    )
    memories = generate(args.size, seed=7, as_of=AS_OF, dim=16).memories.drop_columns(["embedding"])
    memories = memories.sort_by("id")
    print(
        f"{'night':<28} {'rows':>9} {'every row s':>12} {'due dates s':>12} {'ratio':>6} {'judged':>9} {'moves':>7}"
    )
    with tempfile.TemporaryDirectory(prefix="engram-retention-bench-") as root:
        for night, label in enumerate(["first (nothing kept)", "1% of rows written", "quiet"]):
            at = end_of_day(AS_OF + dt.timedelta(days=night))
            scores = decay_scores(memories, config, at)
            start = time.perf_counter()
            full = retention_moves(memories, scores, config, at)
            full_s = time.perf_counter() - start
            start = time.perf_counter()
            due = retention_reusing(memories, scores, config, at, None, cache_root=Path(root))
            due_s = time.perf_counter() - start
            if not due.moves.equals(full):
                raise SystemExit(f"{label}: the due dates' moves differ from judging every row")
            print(
                f"{label:<28} {memories.num_rows:>9,} {full_s:>12.2f} {due_s:>12.2f} {full_s / due_s:>5.1f}x "
                f"{due.judged:>9,} {full.num_rows:>7,}"
            )
            memories = _landed(memories, full, at)
            if night == 0:
                memories = _written(memories, 0.01, at)


if __name__ == "__main__":
    main()
