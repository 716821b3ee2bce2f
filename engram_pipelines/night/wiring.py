"""The night's merge wiring, written once: which rows and pairs each merge step leaves out, and in what order.

The nightly assets (`duplicates`, `consolidation`) and the backfill (`history.backfill`) both call these, so a
replayed day merges exactly what the nightly would have: pairs the contradiction analysis found are never
merged (a changed value is not a duplicate), rows the night's retention takes out of Active take no part (no
visible row hides behind an archived canonical), and the consolidation band skips the rows the duplicate
collapse already took. Retention moves and collapsed duplicates count only where the analysis's switch lets
them land tonight (`switches.applied_tonight`). The backfill used to chain the steps by hand and left the
contradiction pairs out.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa

from engram_pipelines.analyses.lifecycle.retention import leaving_active
from engram_pipelines.analyses.merges.clusters import clusters_table
from engram_pipelines.analyses.merges.collapse import MergeResult, collapse_duplicates, consolidate
from engram_pipelines.config.model import Config
from engram_pipelines.config.switches import applied_tonight


def leaving_tonight(config: Config, moves: pa.Table) -> frozenset[str]:
    """Rows the night's own retention moves take out of Active (none where retention waits for review)."""
    return leaving_active(applied_tonight(config, "retention", moves))


def duplicates_for_day(
    pairs: pa.Table,
    memories: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    contradiction_pairs: pa.Table,
    moves: pa.Table,
) -> MergeResult:
    return collapse_duplicates(
        pairs,
        memories,
        threshold=config.similarity.duplicate_threshold,
        at=at,
        excluded_pairs=contradiction_pairs,
        excluded_ids=leaving_tonight(config, moves),
    )


def consolidation_for_day(
    pairs: pa.Table,
    memories: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    contradiction_pairs: pa.Table,
    moves: pa.Table,
    duplicates: pa.Table,
) -> MergeResult:
    """`duplicates`: the duplicate collapse's clusters (`clusters_table`) of the same day."""
    collapsed = frozenset(applied_tonight(config, "duplicates", duplicates)["loser"].to_pylist())
    return consolidate(
        pairs,
        memories,
        low=config.similarity.merge_threshold,
        high=config.similarity.duplicate_threshold,
        at=at,
        excluded_pairs=contradiction_pairs,
        excluded_ids=collapsed | leaving_tonight(config, moves),
    )


def merges_for_day(
    pairs: pa.Table,
    memories: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    contradiction_pairs: pa.Table,
    moves: pa.Table,
) -> tuple[MergeResult, MergeResult]:
    """Both merge steps of one day, in the nightly's order: (duplicate collapse, consolidation band)."""
    dup = duplicates_for_day(
        pairs, memories, config, at, contradiction_pairs=contradiction_pairs, moves=moves
    )
    merge = consolidation_for_day(
        pairs,
        memories,
        config,
        at,
        contradiction_pairs=contradiction_pairs,
        moves=moves,
        duplicates=clusters_table(dup.clusters),
    )
    return dup, merge
