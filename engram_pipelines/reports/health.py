"""The health report (seed 004): per namespace, the store before and after a run, what changed, and advice."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core import mdtext
from engram_pipelines.core.duck import duck
from engram_pipelines.ingest.snapshot import FULL_READ_SHARE
from engram_pipelines.store import Store

# One aggregate, written once, evaluated by DuckDB over the snapshot and by the store over the live rows.
_METRICS = {
    "total": "count(*)",
    "stm": "sum(CASE WHEN tier = 'stm' THEN 1 ELSE 0 END)",
    "ltm": "sum(CASE WHEN tier = 'ltm' THEN 1 ELSE 0 END)",
    "episodic": "sum(CASE WHEN kind = 'episodic' THEN 1 ELSE 0 END)",
    "semantic": "sum(CASE WHEN kind = 'semantic' THEN 1 ELSE 0 END)",
    "summary": "sum(CASE WHEN kind = 'summary' THEN 1 ELSE 0 END)",
    "block": "sum(CASE WHEN kind = 'block' THEN 1 ELSE 0 END)",
    "active": "sum(CASE WHEN zone = 'active' THEN 1 ELSE 0 END)",
    "archived": "sum(CASE WHEN zone = 'archived' THEN 1 ELSE 0 END)",
    "purge_queue": "sum(CASE WHEN zone = 'purge_queue' THEN 1 ELSE 0 END)",
    "superseded": "sum(CASE WHEN superseded_by IS NOT NULL THEN 1 ELSE 0 END)",
    "stale": "sum(CASE WHEN stale THEN 1 ELSE 0 END)",
    "pinned": "sum(CASE WHEN pinned THEN 1 ELSE 0 END)",
    "contradicted": "sum(CASE WHEN {contradicted} THEN 1 ELSE 0 END)",
    "semantic_raw": "sum(CASE WHEN {tier} = 'raw' THEN 1 ELSE 0 END)",
    "semantic_corroborated": "sum(CASE WHEN {tier} = 'corroborated' THEN 1 ELSE 0 END)",
    "semantic_assessed": "sum(CASE WHEN {tier} = 'assessed' THEN 1 ELSE 0 END)",
    "semantic_baseline": "sum(CASE WHEN {tier} = 'baseline' THEN 1 ELSE 0 END)",
    "avg_importance": "avg(importance)",
}


def _select(contradicted: str, tier: str) -> str:
    parts = [
        f"{sql.format(contradicted=contradicted, tier=tier)} AS {name}" for name, sql in _METRICS.items()
    ]
    return f"SELECT namespace, {', '.join(parts)} FROM memories GROUP BY namespace ORDER BY namespace"


# The snapshot columns the metrics read (not the vectors: 1.5 GB at 1M memories).
COUNTED_COLUMNS = [
    "namespace",
    "tier",
    "kind",
    "zone",
    "superseded_by",
    "stale",
    "pinned",
    "metadata",
    "importance",
]


def snapshot_counts(memories: pa.Table) -> dict[str, dict[str, float]]:
    with duck() as con:
        con.register(
            "memories",
            memories.drop_columns(["embedding"]) if "embedding" in memories.column_names else memories,
        )
        rows = con.execute(
            _select(
                "json_exists(metadata, '$.contradictionWith')",
                "json_extract_string(metadata, '$.semantic.tier')",
            )
        ).fetchall()
        return _by_namespace(rows)


def counts_after_apply(
    store: Store, before: pa.Table, touched: Sequence[str], *, embedding_dim: int
) -> dict[str, dict[str, float]]:
    """The counts once the run's changes are applied: the snapshot's rows (`before`: id and COUNTED_COLUMNS)
    with the memories the applied changes `touched` read again from the store (a deleted one is gone, an
    inserted one new). A quiet night touches a few thousand rows; counting the whole live store instead read
    every row (24 s at 1M memories). When the changes touched many rows, the live store is counted whole: one
    scan is cheaper than reading them by id. Agents' writes since the snapshot to other rows count the next
    night."""
    if len(touched) > FULL_READ_SHARE * before.num_rows:
        return live_counts(store)
    ids = pa.array(sorted(set(touched)), pa.string())
    columns = before.select(COUNTED_COLUMNS).schema
    fresh = [
        pa.Table.from_batches([batch]).select(COUNTED_COLUMNS).cast(columns)
        for batch in store.iter_memory_batches(10_000, embedding_dim, ids=ids.to_pylist())
    ]
    kept = before.filter(pc.invert(pc.is_in(before["id"], value_set=ids))).select(COUNTED_COLUMNS)
    return snapshot_counts(pa.concat_tables([kept, *fresh]))


def live_counts(store: Store) -> dict[str, dict[str, float]]:
    # SQLite keeps booleans as 0/1, which CASE WHEN reads as false/true just like PostgreSQL's booleans.
    if store.dialect == "sqlite":
        contradicted = "json_extract(metadata, '$.contradictionWith') IS NOT NULL"
        tier = "json_extract(metadata, '$.semantic.tier')"
    else:
        contradicted = "metadata -> 'contradictionWith' IS NOT NULL"
        tier = "(metadata -> 'semantic' ->> 'tier')"
    return _by_namespace(store.query(_select(contradicted, tier)))


def _by_namespace(rows: list[tuple]) -> dict[str, dict[str, float]]:
    names = list(_METRICS)
    return {r[0]: {n: float(v or 0) for n, v in zip(names, r[1:], strict=True)} for r in rows}


# The seed 004 report's headline counts, from the auto change set's ops.
_HEADLINES = {
    "promotions (tier and kind)": ("promote_tier", "promote_kind"),
    "zone moves (archive, purge queue, back to active)": ("move_zone",),
    "purged": ("purge",),
    "merged or superseded": ("supersede",),
    "decay applied (stale marked or lifted)": ("mark_stale", "clear_stale"),
    "contradictions flagged": ("flag_contradiction",),
    "semantic nodes and summaries created": ("insert_memory",),
    "links created or reweighted / deleted": ("upsert_link", "delete_link"),
}


@dataclass
class HealthReport:
    as_of: dt.date
    before: dict[str, dict[str, float]]
    after: dict[str, dict[str, float]]
    changes: dict[str, Any] = field(default_factory=dict)  # by_op etc. per change set class
    applied: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def totals(self, side: str) -> dict[str, float]:
        data = self.before if side == "before" else self.after
        out: dict[str, float] = {}
        for counts in data.values():
            for key, value in counts.items():
                if key != "avg_importance":
                    out[key] = out.get(key, 0) + value
        weights = sum(c["total"] for c in data.values())
        out["avg_importance"] = (
            sum(c["avg_importance"] * c["total"] for c in data.values()) / weights if weights else 0.0
        )
        return out

    def what_happened(self) -> list[str]:
        """The applied changes in words, then what waits (a gated or held set is not applied tonight)."""
        ops: dict[str, int] = {}
        for info in self.changes.values():
            if info.get("status") == "applied":
                for op, n in info.get("by_op", {}).items():
                    ops[op] = ops.get(op, 0) + n
        lines = [f"{label}: {sum(ops.get(k, 0) for k in keys):,}" for label, keys in _HEADLINES.items()]
        for klass in ("held", "gated"):
            info = self.changes.get(klass, {})
            if info.get("total") and info.get("status") == "proposed":
                lines.append(
                    f"waiting for review ({klass}): {info['total']:,} changes in {info['change_set_id']}"
                )
        # What the guard held tonight that already waits in an earlier night's set (changes/waiting.py).
        for change_set_id, n in self.changes.get("held", {}).get("waiting_in", {}).items():
            lines.append(f"waiting for review (held on an earlier night): {n:,} changes in {change_set_id}")
        return lines

    def recommendations(self) -> list[str]:
        advice = list(self.notes)
        held_set = self.changes.get("held", {})
        for held in held_set.get("held_for_review", []):
            advice.append(
                f"Volume guard: {held['message']} in {held_set.get('change_set_id')}. Look first "
                f"(`engram-pipelines changes show {held_set.get('change_set_id')}`), then approve and apply it, "
                "or change the settings that chose it (retention, review.max_hidden_fraction)."
            )
        gated = self.changes.get("gated", {})
        after = self.totals("after")
        if after.get("stale", 0) > 0.2 * max(after.get("total", 0), 1):
            advice.append(
                f"{int(after['stale'])} memories are stale (more than 20%): run `engram-pipelines preview-decay` "
                "before the next retention sweep and pin what must stay."
            )
        if gated.get("total"):
            advice.append(
                f"{gated['total']} review-gated changes wait in {gated.get('change_set_id')}: "
                f"`engram-pipelines changes show {gated.get('change_set_id')}`, then approve or leave them."
            )
        if after.get("contradicted", 0):
            advice.append(
                f"{int(after['contradicted'])} memories carry a contradiction flag: reconcile the pairs."
            )
        if not advice:
            advice.append("Nothing needs attention.")
        return advice

    def markdown(self) -> str:
        lines = [f"# Memory health report, as of {self.as_of.isoformat()}", ""]
        # What needs a person comes first: a held archive or a waiting review is read before the numbers.
        lines += ["## Recommendations", ""]
        lines += [f"{i}. {text}" for i, text in enumerate(self.recommendations(), start=1)]
        lines += [
            "",
            "## Statistics (all namespaces)",
            "",
            "| Metric | Before | After | Change |",
            "|---|---|---|---|",
        ]
        before, after = self.totals("before"), self.totals("after")
        for key in _METRICS:
            b, a = before.get(key, 0.0), after.get(key, 0.0)
            fmt = "{:.3f}" if key == "avg_importance" else "{:,.0f}"
            change = a - b
            sign = "+" if change > 0 else ""
            lines.append(f"| {key} | {fmt.format(b)} | {fmt.format(a)} | {sign}{fmt.format(change)} |")
        lines += ["", "## Per namespace (after)", ""]
        cols = [
            "total",
            "active",
            "archived",
            "superseded",
            "stale",
            "semantic",
            "contradicted",
            "semantic_corroborated",
            "semantic_baseline",
        ]
        lines += ["| namespace | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for namespace, counts in sorted(self.after.items()):
            cells = " | ".join(f"{counts.get(c, 0):,.0f}" for c in cols)
            lines.append(f"| {mdtext.inline(namespace)} | {cells} |")
        lines += ["", "## What the run did", ""]
        lines += [f"- {line}" for line in self.what_happened()]
        lines += ["", "## Changes", ""]
        for klass, info in self.changes.items():
            by_op = ", ".join(f"{op} {n}" for op, n in info.get("by_op", {}).items()) or "none"
            lines.append(
                f"- **{klass}** `{info.get('change_set_id')}`: {info.get('total', 0)} changes ({by_op})"
            )
        for klass, info in self.applied.items():
            lines.append(
                f"- applied {klass}: {info['applied']} applied, {info['skipped_concurrent_edit']} skipped "
                f"(concurrent edit), {info['ineligible']} ineligible of {info['total']}"
            )
        return "\n".join(lines) + "\n"

    def as_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of.isoformat(),
            "before": self.totals("before"),
            "after": self.totals("after"),
            "per_namespace_after": self.after,
            "changes": self.changes,
            "applied": self.applied,
            "recommendations": self.recommendations(),
        }
