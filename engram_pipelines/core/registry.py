"""The night's analyses, listed once.

Each analysis is a Dagster asset of its name, a warehouse table of its name (one per as-of partition), the
`source` of every intent it proposes (and the `origin` of the links it creates), and a switch in the config
(`analyses.<name>`: enabled, review class). Its table's `targets` columns name the rows its intents change and
its `values` columns hold what they write: the change set's column lineage in the Dagster UI is built from them.
Everything that lists the analyses (the config's switches, the warehouse's tables, the change-set asset, the
backfill) reads this list; the rules themselves live in `engram_pipelines/analyses/<stage>/<module>.py`.

This module imports nothing of the package: the config and the warehouse, below the analyses, read it too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Analysis:
    name: str
    module: str  # where its rule lives, under engram_pipelines.analyses
    inputs: tuple[str, ...]  # the tables (assets) it reads
    targets: tuple[str, ...]  # its table's columns naming the rows its intents target
    values: tuple[str, ...]  # its table's columns holding the values its intents write
    review: str  # its own review classes, before any switch (docs/concepts.md)


ANALYSES: tuple[Analysis, ...] = (
    Analysis(
        "decay_scores",
        "lifecycle.decay",
        ("memory_snapshot",),
        ("id",),
        ("score", "stale_after"),
        "auto",
    ),
    Analysis(
        "promotions",
        "lifecycle.promotion",
        ("memory_snapshot", "decay_scores"),
        ("id",),
        ("promotion", "to"),
        "auto",
    ),
    Analysis(
        "retention",
        "lifecycle.retention",
        ("memory_snapshot", "decay_scores", "promotions"),
        ("id",),
        ("to_zone",),
        "auto",
    ),
    Analysis(
        "contradictions",
        "contradictions.policy",
        ("memory_snapshot", "similarity_pairs"),
        ("newer_id", "older_id"),
        ("newer_id", "older_id"),
        "auto flags; supersede gated",
    ),
    Analysis(
        "duplicates",
        "merges.collapse",
        ("memory_snapshot", "similarity_pairs", "contradictions", "retention"),
        ("canonical", "loser"),
        ("canonical", "loser", "score", "tag_union"),
        "auto",
    ),
    Analysis(
        "consolidation",
        "merges.collapse",
        ("memory_snapshot", "similarity_pairs", "duplicates", "contradictions", "retention"),
        ("canonical", "loser"),
        ("canonical", "loser", "score", "tag_union"),
        "gated",
    ),
    Analysis(
        "semantic",
        "knowledge.semantic",
        ("memory_snapshot", "embeddings", "similarity_pairs", "contradictions", "duplicates", "retention"),
        ("node_id",),
        ("node_id", "tier", "probability", "confidence"),
        "auto",
    ),
    Analysis(
        "compression",
        "knowledge.compression",
        ("memory_snapshot", "similarity_pairs", "decay_scores", "contradictions"),
        ("summary_id", "member"),
        ("summary_id", "member", "score"),
        "gated",
    ),
    Analysis(
        "associations",
        "links.associations",
        ("memory_snapshot", "similarity_pairs"),
        ("src_id", "dst_id"),
        ("src_id", "dst_id", "score"),
        "auto",
    ),
    Analysis(
        "temporal",
        "links.temporal",
        ("memory_snapshot",),
        ("src_id", "dst_id"),
        ("src_id", "dst_id", "weight_after"),
        "auto",
    ),
    Analysis(
        "gc",
        "links.gc",
        ("memory_snapshot",),
        ("src_id", "dst_id", "kind"),
        ("src_id", "dst_id", "kind"),
        "auto",
    ),
)

NAMES: tuple[str, ...] = tuple(a.name for a in ANALYSES)
BY_NAME: dict[str, Analysis] = {a.name: a for a in ANALYSES}


def inputs_of(name: str) -> list[str]:
    """The assets an analysis reads (its Dagster deps)."""
    return list(BY_NAME[name].inputs)
