"""Decay preview (seed 001): project every score to a future date and say what would fall off, writing nothing.

The projection re-runs the decay and retention rules at the preview instant on the rows as they are now (no
accesses assumed in between). Retention shows each row's next transition from its current zone.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from engram_pipelines.analyses.lifecycle.decay import decay_scores
from engram_pipelines.analyses.lifecycle.retention import retention_moves
from engram_pipelines.config.model import Config
from engram_pipelines.core import mdtext
from engram_pipelines.core.duck import duck

FALLING_OFF_LIMIT = 200

# The rows about to fall off, as the report lists them (`would`: archived, purge_queue, purged or go stale).
FALLING_OFF_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("content", pa.string(), nullable=False),
        pa.field("score_now", pa.float64()),
        pa.field("score_then", pa.float64()),
        pa.field("would", pa.string(), nullable=False),
    ]
)


@dataclass
class DecayPreview:
    now: dt.datetime
    at: dt.datetime
    per_namespace: list[dict[str, Any]] = field(default_factory=list)
    falling_off: list[dict[str, Any]] = field(default_factory=list)
    scores_now: pa.Table | None = None
    scores_then: pa.Table | None = None

    def totals(self) -> dict[str, int]:
        keys = ("newly_stale", "would_archive", "would_queue_for_purge", "would_purge")
        return {k: sum(int(row[k]) for row in self.per_namespace) for k in keys}

    def as_dict(self) -> dict[str, Any]:
        return {
            "now": self.now.isoformat(),
            "at": self.at.isoformat(),
            "totals": self.totals(),
            "per_namespace": self.per_namespace,
            "falling_off": self.falling_off,
        }

    def markdown(self) -> str:
        lines = [
            f"# Decay preview: {_day(self.now)} -> {_day(self.at)}",
            "",
            "Nothing was written. Per namespace, what the rules would do at the preview date:",
            "",
            "| namespace | rows | newly stale | would archive | would queue for purge | would purge |",
            "|---|---|---|---|---|---|",
        ]
        for row in self.per_namespace:
            lines.append(
                f"| {row['namespace']} | {row['rows']} | {row['newly_stale']} | {row['would_archive']} | "
                f"{row['would_queue_for_purge']} | {row['would_purge']} |"
            )
        lines += [
            "",
            f"## About to fall off (first {FALLING_OFF_LIMIT})",
            "",
            "| id | namespace | score now | score then | would | content |",
            "|---|---|---|---|---|---|",
        ]
        for row in self.falling_off:
            content = mdtext.inline(row["content"], 80)
            lines.append(
                f"| {row['id']} | {row['namespace']} | {row['score_now']:.3f} | {row['score_then']:.3f} | "
                f"{row['would']} | {content} |"
            )
        return "\n".join(lines) + "\n"


def _day(instant: dt.datetime) -> dt.date:
    """The as-of day whose end `instant` is (partitions are evaluated at the first instant of the next day)."""
    return (instant - dt.timedelta(microseconds=1)).date()


def preview_decay(memories: pa.Table, config: Config, now: dt.datetime, at: dt.datetime) -> DecayPreview:
    if at < now:
        raise ValueError(f"the preview date {_day(at)} must not be before the snapshot's as-of {_day(now)}")
    scores_now = decay_scores(memories, config, now)
    scores_then = decay_scores(memories, config, at)
    moves = retention_moves(memories, scores_then, config, at)
    with duck() as con:
        con.register("memories", memories.select(["id", "namespace", "content", "zone", "stale"]))
        con.register("now_s", scores_now.select(["id", "score", "stale_after"]))
        con.register("then_s", scores_then.select(["id", "score", "stale_after"]))
        con.register("moves", moves.select(["id", "to_zone"]))
        per_namespace = con.execute(
            """
            SELECT m.namespace, count(*) AS rows,
                -- Against the store's own mark, so tonight's marks count too (a preview for today shows them).
                count(*) FILTER (WHERE t.stale_after AND NOT m.stale) AS newly_stale,
                count(*) FILTER (WHERE mv.to_zone = 'archived') AS would_archive,
                count(*) FILTER (WHERE mv.to_zone = 'purge_queue') AS would_queue_for_purge,
                count(*) FILTER (WHERE mv.to_zone = 'purged') AS would_purge
            FROM memories m JOIN now_s n USING (id) JOIN then_s t USING (id) LEFT JOIN moves mv USING (id)
            GROUP BY m.namespace ORDER BY m.namespace
            """
        ).fetchall()
        falling = con.execute(
            f"""
            SELECT m.id, m.namespace, m.content, n.score AS score_now, t.score AS score_then,
                coalesce(mv.to_zone, 'go stale') AS would
            FROM memories m JOIN now_s n USING (id) JOIN then_s t USING (id) LEFT JOIN moves mv USING (id)
            WHERE mv.to_zone IN ('archived', 'purge_queue', 'purged') OR (t.stale_after AND NOT m.stale)
            ORDER BY (mv.to_zone = 'purged') DESC, t.score, m.id
            LIMIT {FALLING_OFF_LIMIT}
            """
        ).fetchall()
        names = ["namespace", "rows", "newly_stale", "would_archive", "would_queue_for_purge", "would_purge"]
        fall_names = FALLING_OFF_SCHEMA.names
        return DecayPreview(
            now=now,
            at=at,
            per_namespace=[dict(zip(names, r, strict=True)) for r in per_namespace],
            falling_off=[dict(zip(fall_names, r, strict=True)) for r in falling],
            scores_now=scores_now,
            scores_then=scores_then,
        )


def score_distribution_png(preview: DecayPreview, stale_threshold: float) -> bytes:
    """Histogram of decay scores now vs at the preview date, with the stale threshold drawn."""
    from engram_pipelines.reports.plots import score_overlay

    assert preview.scores_now is not None and preview.scores_then is not None, "a preview computes both"
    return score_overlay(
        preview.scores_now["score"].drop_null().to_numpy(),
        preview.scores_then["score"].drop_null().to_numpy(),
        labels=(f"now (as of {_day(preview.now)})", f"then ({_day(preview.at)})"),
        threshold=stale_threshold,
        title="Decay score distribution, now vs preview date",
    )
