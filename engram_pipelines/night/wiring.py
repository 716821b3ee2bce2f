"""The night, wired once: what each analysis reads of the ones before it, and which rows and pairs it leaves out.

The nightly assets and the backfill (`night/backfill.py`) both call these, so a replayed day proposes exactly
what the nightly would have: decay scores feed promotions, both feed retention; pairs the contradiction analysis
found are never merged (a changed value is not a duplicate), rows the night's retention takes out of Active take
no part in a merge (no visible row hides behind an archived canonical), and the consolidation band skips the rows
the duplicate collapse already took. Retention moves and collapsed duplicates count only where the analysis's
switch lets them land tonight (`switches.applied_tonight`); semantic extraction also leaves out what the volume
guard will hold (`semantic_view`). Every function returns an analysis's result
(`AnalysisResult`: its table and its intents).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.contradictions.policy import ContradictionResult, find_contradictions
from engram_pipelines.analyses.contradictions.reuse import contradictions_reusing
from engram_pipelines.analyses.knowledge.semantic import semantic_extraction
from engram_pipelines.analyses.knowledge.semantic_reuse import in_namespace_order, semantic_reusing
from engram_pipelines.analyses.lifecycle.decay import CueCache, decay_intents, decay_scores
from engram_pipelines.analyses.lifecycle.promotion import promotion_intents, promotions
from engram_pipelines.analyses.lifecycle.retention import leaving_active, retention_intents, retention_moves
from engram_pipelines.analyses.lifecycle.retention_due import retention_reusing
from engram_pipelines.analyses.links.gc import garbage_links
from engram_pipelines.analyses.links.gc_reuse import gc_reusing
from engram_pipelines.analyses.merges.collapse import MergeResult, collapse_duplicates, consolidate
from engram_pipelines.analyses.projection import project_auto_transitions
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.guard import held_targets
from engram_pipelines.config.model import Config
from engram_pipelines.config.switches import applied_tonight
from engram_pipelines.warehouse.vector_digests import VectorSource
from engram_pipelines.warehouse.written import Written


def decay_for_day(
    memories: pa.Table, config: Config, at: dt.datetime, *, cue_cache: CueCache | None = None
) -> AnalysisResult:
    """Every row's decay score at `at`; intents: the stale marks that change tonight."""
    scores = decay_scores(memories, config, at, cue_cache=cue_cache)
    return AnalysisResult(table=scores, intents=decay_intents(scores))


def promotions_for_day(
    memories: pa.Table, scores: pa.Table, links: pa.Table, config: Config
) -> AnalysisResult:
    """`scores`: the same day's decay table."""
    table = promotions(memories, scores, links, config)
    return AnalysisResult(table=table, intents=promotion_intents(table))


def retention_for_day(
    memories: pa.Table,
    scores: pa.Table,
    promoted: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    cache_root: Path | None = None,
) -> tuple[AnalysisResult, int]:
    """The day's retention and how many rows it judged. `scores`, `promoted`: the same day's decay and promotions
    tables (a row promoted tonight stays). With `cache_root` (the warehouse) and `execution.reuse`, only the rows
    that can move tonight are judged (`analyses/lifecycle/retention_due.py`)."""
    ids = promoted["id"].combine_chunks()
    if cache_root is None or not config.execution.reuse:
        moves = retention_moves(memories, scores, config, at, promoted=ids)
        judged = memories.num_rows
    else:
        due = retention_reusing(memories, scores, config, at, ids, cache_root=cache_root)
        moves, judged = due.moves, due.judged
    return AnalysisResult(table=moves, intents=retention_intents(moves)), judged


def contradictions_for_day(
    memories: pa.Table, pairs: pa.Table, config: Config, *, cache_root: Path | None = None
) -> ContradictionResult:
    """With `cache_root` (the warehouse): parsed features by content hash, and (`execution.reuse`) the whole
    result of each namespace whose inputs are last night's (`analyses/contradictions/reuse.py`)."""
    if cache_root is None or not config.execution.reuse:
        result = find_contradictions(memories, pairs, config, cache_root=cache_root)
        result.figures.update({"reused": False, "namespaces_computed": len(pc.unique(memories["namespace"]))})
        return result
    return contradictions_reusing(memories, pairs, config, cache_root=cache_root)


def gc_for_day(
    memories: pa.Table,
    links: pa.Table,
    quarantined: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    written: Written | None,
    cache_root: Path | None = None,
) -> tuple[AnalysisResult, int]:
    """The links to delete and how many links were judged; with `cache_root` (the warehouse) and
    `execution.reuse`, only those whose verdict can have changed since last night (`written`: what tonight's
    snapshot read again; `analyses/links/gc_reuse.py`)."""
    if cache_root is None or not config.execution.reuse:
        return garbage_links(memories, links, at, quarantined=quarantined), links.num_rows
    found = gc_reusing(memories, links, at, quarantined=quarantined, written=written, cache_root=cache_root)
    return found.result, found.judged


def semantic_view(
    memories: pa.Table, retention: pa.Table, duplicates: pa.Table, hiding: pa.Table, config: Config
) -> tuple[pa.Table, pa.Array]:
    """The snapshot as semantic extraction reads it, and the rows tonight archives (`fading`).

    Tonight's auto collapses and zone moves are projected (`project_auto_transitions`), but only those that
    land: where the analysis's switch lets them (`applied_tonight`) and the volume guard does not hold them
    (`guard.held_targets`, judged on `hiding`: the proposals of the analyses semantic extraction reads, which are
    the ones that hide rows). A held archive leaves its rows as they are until someone approves it; projected, it
    changed the step's inputs every night that more rows aged into it, and every such namespace was computed again
    (117 of 396 on a quiet night at 1M). The guard also counts what analyses after this one propose (every auto
    intent against `review.max_auto_changes`; compression's archives where it is switched to auto): those the
    projection cannot know, and it holds back only what these proposals alone make the guard hold.
    """
    retention = applied_tonight(config, "retention", retention)
    duplicates = applied_tonight(config, "duplicates", duplicates)
    held = held_targets(hiding, memories, config.review)
    if held is None:
        retention, duplicates = retention.slice(0, 0), duplicates.slice(0, 0)
    elif len(held):
        # As the guard holds them: the moves of the rows it holds, and every collapse of a cluster one of whose
        # losers it holds (its link and annotation wait with it).
        retention = retention.filter(pc.invert(pc.is_in(retention["id"], value_set=held)))
        waiting = duplicates.filter(pc.is_in(duplicates["loser"], value_set=held))["cluster_id"]
        duplicates = duplicates.filter(
            pc.invert(pc.is_in(duplicates["cluster_id"], value_set=pc.unique(waiting)))
        )
    fading = retention.filter(
        pc.and_(pc.equal(retention["from_zone"], "active"), pc.equal(retention["to_zone"], "archived"))
    )["id"]
    return project_auto_transitions(memories, duplicates, retention), fading.combine_chunks()


def semantic_for_day(
    memories: pa.Table,
    links: pa.Table,
    pairs: pa.Table,
    vectors: VectorSource,
    config: Config,
    at: dt.datetime,
    *,
    fading: pa.Array,
    cache_root: Path | None = None,
) -> tuple[AnalysisResult, int]:
    """The semantic step's result grouped by namespace, and how many namespaces were computed; with
    `cache_root` (the warehouse) and `execution.reuse`, those whose inputs are last night's are reused
    (`analyses/knowledge/semantic_reuse.py`)."""
    if cache_root is None or not config.execution.reuse:
        result = semantic_extraction(
            memories,
            links,
            pairs,
            lambda ids: vectors.load(None, ids),
            config,
            at,
            fading=fading,
            cache_root=cache_root,
        )
        return in_namespace_order([result]), len(pc.unique(memories["namespace"]))
    return semantic_reusing(memories, links, pairs, vectors, config, at, fading=fading, cache_root=cache_root)


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
    cache_root: Path | None = None,
) -> MergeResult:
    """With `cache_root` (the warehouse), the band's texts are parsed once across nights."""
    return collapse_duplicates(
        pairs,
        memories,
        threshold=config.similarity.duplicate_threshold,
        at=at,
        excluded_pairs=contradiction_pairs,
        excluded_ids=leaving_tonight(config, moves),
        cache_root=cache_root,
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
    cache_root: Path | None = None,
) -> MergeResult:
    """`duplicates`: the duplicate collapse's clusters (`clusters_table`) of the same day; `cache_root` as for
    `duplicates_for_day`."""
    collapsed = frozenset(applied_tonight(config, "duplicates", duplicates)["loser"].to_pylist())
    return consolidate(
        pairs,
        memories,
        low=config.similarity.merge_threshold,
        high=config.similarity.duplicate_threshold,
        at=at,
        excluded_pairs=contradiction_pairs,
        excluded_ids=collapsed | leaving_tonight(config, moves),
        cache_root=cache_root,
    )


def merges_for_day(
    pairs: pa.Table,
    memories: pa.Table,
    config: Config,
    at: dt.datetime,
    *,
    contradiction_pairs: pa.Table,
    moves: pa.Table,
    cache_root: Path | None = None,
) -> tuple[MergeResult, MergeResult]:
    """Both merge steps of one day, in the nightly's order: (duplicate collapse, consolidation band)."""
    dup = duplicates_for_day(
        pairs,
        memories,
        config,
        at,
        contradiction_pairs=contradiction_pairs,
        moves=moves,
        cache_root=cache_root,
    )
    merge = consolidation_for_day(
        pairs,
        memories,
        config,
        at,
        contradiction_pairs=contradiction_pairs,
        moves=moves,
        duplicates=dup.table,
        cache_root=cache_root,
    )
    return dup, merge
