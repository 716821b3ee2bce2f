"""Backfills over a historical corpus: what the policies would have done on each past day.

The corpus is read once per backfill, however many days it covers. Each day's state is reconstructed from the
corpus timestamps: a memory exists from its `created_at` on; an access after the day is not known yet then (its
`last_accessed_at` is dropped; `access_count`, which the store keeps as a total only, is today's); and the
lifecycle state is the raw one, as if no pipeline had run (active, not superseded, not stale), so the outputs
say what the configured policies make of that history. Similar pairs are computed once over the whole corpus
and filtered per day (a pair exists once both rows do). Outputs go to `<warehouse>/history/<table>/as_of=DAY/`;
the live store is never written.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.contradictions.policy import find_contradictions
from engram_pipelines.analyses.lifecycle.decay import decay_scores
from engram_pipelines.analyses.lifecycle.promotion import promotions
from engram_pipelines.analyses.lifecycle.retention import retention_moves
from engram_pipelines.config.model import Config
from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.night.wiring import merges_for_day
from engram_pipelines.warehouse.tables import Warehouse

OUTPUT_TABLES = ("decay_scores", "promotions", "retention")


@dataclass
class BackfillSummary:
    """Per day (ISO date): the memories that existed at its end, the rows written per table, the transitions."""

    days: int = 0
    rows_per_day: dict[str, int] = field(default_factory=dict)
    table_rows_per_day: dict[str, dict[str, int]] = field(default_factory=dict)
    transitions_per_day: dict[str, dict[str, int]] = field(default_factory=dict)


def as_of_state(corpus: pa.Table, day: dt.date) -> pa.Table:
    """The corpus as it stood at the end of `day` (see the module docstring for what can be known)."""
    cutoff = end_of_day(day)
    con = duckdb.connect()
    con.register("c", corpus)
    return (
        con.sql(
            f"""
        SELECT * REPLACE (
            CASE WHEN last_accessed_at < TIMESTAMPTZ '{cutoff.isoformat()}' THEN last_accessed_at END
                AS last_accessed_at,
            'active' AS zone, NULL::TIMESTAMPTZ AS zone_since, NULL::VARCHAR AS superseded_by,
            false AS stale, NULL::DOUBLE AS score)
        FROM c WHERE created_at < TIMESTAMPTZ '{cutoff.isoformat()}' ORDER BY id
        """
        )
        .to_arrow_table()
        .cast(corpus.schema)
    )


def pairs_as_of(pairs: pa.Table, state: pa.Table) -> pa.Table:
    """The whole corpus's pairs restricted to the rows that exist in `state`."""
    ids = state["id"]
    keep = pc.and_(pc.is_in(pairs["left_id"], ids), pc.is_in(pairs["right_id"], ids))
    return pairs.filter(keep)


def backfill(
    corpus: pa.Table,
    links: pa.Table,
    pairs: pa.Table,
    days: list[dt.date],
    config: Config,
    output: Warehouse,
    *,
    progress: Progress | None = None,
) -> BackfillSummary:
    """Run the lifecycle and merge analyses for every day; write each day's outputs under `output`."""
    progress = progress or SilentProgress()
    summary = BackfillSummary()
    progress.start("backfill days", len(days))
    for day in sorted(days):
        at = end_of_day(day)
        state = as_of_state(corpus, day)
        scores = decay_scores(state, config, at)
        day_links = links.filter(
            pc.less(links["created_at"], pa.scalar(at, links.schema.field("created_at").type))
        )
        promoted = promotions(state, scores, day_links, config)
        moves = retention_moves(state, scores, config, at, promoted=promoted["id"].combine_chunks())
        day_pairs = pairs_as_of(pairs, state)
        # The nightly's own wiring: contradiction pairs never merge, rows leaving Active take no part.
        contradicting = find_contradictions(state, day_pairs, config).table.select(["left_id", "right_id"])
        dup, merge = merges_for_day(
            day_pairs, state, config, at, contradiction_pairs=contradicting, moves=moves
        )
        written = dict(zip(OUTPUT_TABLES, (scores, promoted, moves), strict=True))
        for name, table in written.items():
            output.write_table(name, day, table)
        key = day.isoformat()
        summary.rows_per_day[key] = state.num_rows
        summary.table_rows_per_day[key] = {name: table.num_rows for name, table in written.items()}
        summary.transitions_per_day[key] = {
            "became_stale": int(pc.sum(pc.equal(scores["outcome"], "became_stale")).as_py() or 0),
            "promotions": promoted.num_rows,
            "zone_moves": moves.num_rows,
            "duplicates": dup.merged,
            "near_duplicates": merge.merged,
        }
        progress.advance(1)
    progress.finish()
    summary.days = len(days)
    return summary
