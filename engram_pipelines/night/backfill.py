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

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.night.wiring import (
    contradictions_for_day,
    decay_for_day,
    merges_for_day,
    promotions_for_day,
    retention_for_day,
)
from engram_pipelines.warehouse.tables import Warehouse

# The analyses a backfill replays, in the night's order (each writes its table and its proposals per day).
OUTPUT_TABLES = ("decay_scores", "promotions", "retention", "contradictions", "duplicates", "consolidation")


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
    with duck() as con:
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
    """Replay the night's lifecycle, contradiction and merge analyses for every day (the nightly's own wiring);
    write each day's tables and proposals under `output`."""
    progress = progress or SilentProgress()
    summary = BackfillSummary()
    progress.start("backfill days", len(days))
    for day in sorted(days):
        at = end_of_day(day)
        state = as_of_state(corpus, day)
        day_links = links.filter(
            pc.less(links["created_at"], pa.scalar(at, links.schema.field("created_at").type))
        )
        day_pairs = pairs_as_of(pairs, state)
        decay = decay_for_day(state, config, at)
        promoted = promotions_for_day(state, decay.table, day_links, config)
        moves, _ = retention_for_day(state, decay.table, promoted.table, config, at)
        contradicting = contradictions_for_day(state, day_pairs, config)
        dup, merge = merges_for_day(
            day_pairs,
            state,
            config,
            at,
            contradiction_pairs=contradicting.table.select(["left_id", "right_id"]),
            moves=moves.table,
            cache_root=output.root,  # each day parses only the texts no earlier day had
        )
        results = dict(zip(OUTPUT_TABLES, (decay, promoted, moves, contradicting, dup, merge), strict=True))
        for name, result in results.items():
            output.write_table(name, day, result.table)
            output.write_proposals(name, day, result.intents)
        key = day.isoformat()
        summary.rows_per_day[key] = state.num_rows
        summary.table_rows_per_day[key] = {name: result.table.num_rows for name, result in results.items()}
        summary.transitions_per_day[key] = {
            "became_stale": int(pc.sum(pc.equal(decay.table["outcome"], "became_stale")).as_py() or 0),
            "promotions": promoted.table.num_rows,
            "zone_moves": moves.table.num_rows,
            "contradictions": contradicting.table.num_rows,
            "duplicates": dup.merged,
            "near_duplicates": merge.merged,
        }
        progress.advance(1)
    progress.finish()
    summary.days = len(days)
    return summary
