"""Lifecycle analyses: decay scores, promotions and retention zones, each proposing transitions only."""

import dagster as dg
import pyarrow.compute as pc

from engram_pipelines.analyses.lifecycle.decay import DECAY_SCHEMA, CueCache
from engram_pipelines.analyses.lifecycle.promotion import PROMOTION_SCHEMA
from engram_pipelines.analyses.lifecycle.retention import RETENTION_SCHEMA
from engram_pipelines.analyses.lifecycle.retention_due import KEY_COLUMNS
from engram_pipelines.core.registry import inputs_of
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.night.wiring import decay_for_day, promotions_for_day, retention_for_day
from engram_pipelines.orchestration.metadata import (
    Lineage,
    column_lineage,
    column_schema,
    sample_markdown,
    standard,
    value_counts,
)
from engram_pipelines.orchestration.partitions import as_of_date, as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, WarehouseResource
from engram_pipelines.reports.plots import inline_bars, markdown_image, score_bands, score_histogram

_LIFECYCLE_COLUMNS = [
    "id",
    "namespace",
    "tier",
    "kind",
    "content",
    "importance",
    "score",
    "access_count",
    "last_accessed_at",
    "created_at",
    "updated_at",
    "pinned",
    "stale",
    "tags",
    "zone",
    "zone_since",
    "superseded_by",
    "metadata",
]

# What a decay score is computed from, whichever policy a row gets (engram: cues, access, recency; halflife and
# ebbinghaus: importance, age, access; kind picks the policy and half-life; pinned the floor).
_SCORE_INPUTS = [
    "content",
    "tags",
    "importance",
    "access_count",
    "last_accessed_at",
    "created_at",
    "pinned",
    "kind",
]

_DECAY_LINEAGE: Lineage = {
    "id": {"memory_snapshot": ["id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    "kind": {"memory_snapshot": ["kind"]},
    # Policies are chosen per namespace and per kind.
    "policy": {"memory_snapshot": ["namespace", "kind"]},
    "age_days": {"memory_snapshot": ["last_accessed_at", "created_at"]},
    "score": {"memory_snapshot": _SCORE_INPUTS},
    "previous_score": {"memory_snapshot": ["score"]},
    "stale_before": {"memory_snapshot": ["stale"]},
    "stale_after": {"memory_snapshot": _SCORE_INPUTS},
    "outcome": {"memory_snapshot": [*_SCORE_INPUTS, "stale"]},
    "review_interval_days": {"memory_snapshot": _SCORE_INPUTS},
    # The policy's rate: per namespace and kind; a pinned engram row does not decay.
    "decline_rate": {"memory_snapshot": ["namespace", "kind", "pinned"]},
}


@dg.asset(
    name="decay_scores",
    partitions_def=as_of_partitions,
    deps=inputs_of("decay_scores"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Decay score of every memory as of the partition's end (policies engram, halflife, ebbinghaus, per "
        "namespace and kind; see docs/configuration.md). Blocks are exempt; pinned rows keep the pinned floor. "
        "Proposes the stale mark (score below decay.stale_threshold, {config.decay.stale_threshold}; metadata only, the row still recalls) and "
        "lifts it from rows that recovered: only transitions, so a score drifting by a day writes nothing. "
        "Columns: score and age_days derive from created_at/last_accessed_at, access_count, content, tags, "
        "importance and pinned of memory_snapshot."
    ),
)
def decay_scores_asset(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    memories = wh.read_table("memories", as_of, columns=_LIFECYCLE_COLUMNS)
    # Content cue boosts are reused across nights from <warehouse>/decay_cues/ (the regexes run on new or
    # edited contents only): the same scores, without most of the cost.
    decay = decay_for_day(memories, config, end_of_day(as_of), cue_cache=CueCache(wh.root / "decay_cues"))
    scores, intents = decay.table, decay.intents
    wh.write_table("decay_scores", as_of, scores)
    wh.write_proposals("decay_scores", as_of, intents)
    outcomes = value_counts(scores, "outcome")
    context.log.info(f"decay: {scores.num_rows} scored, outcomes {outcomes}, {intents.num_rows} transitions")
    return dg.MaterializeResult(
        metadata={
            **standard(DECAY_SCHEMA, scores.num_rows),
            "dagster/column_lineage": column_lineage(_DECAY_LINEAGE),
            "outcomes": dg.MetadataValue.json(outcomes),
            "policies": dg.MetadataValue.json(value_counts(scores, "policy")),
            "transitions": intents.num_rows,
            "stale": int(pc.sum(scores["stale_after"]).as_py() or 0),
            "mean_score": float(pc.mean(scores["score"]).as_py() or 0.0),
            "score_bands": dg.MetadataValue.md(
                inline_bars(score_bands(scores["score"].to_numpy(zero_copy_only=False).astype(float)))
            ),
            "score_distribution": dg.MetadataValue.md(
                markdown_image(
                    score_histogram(
                        scores["score"].to_numpy(zero_copy_only=False).astype(float),
                        threshold=config.decay.stale_threshold,
                        title=f"Decay scores as of {as_of}",
                    ),
                    "decay score distribution",
                )
            ),
            "sample": sample_markdown(scores, ["id", "namespace", "policy", "score", "outcome", "reasons"]),
        }
    )


_PROMOTIONS_LINEAGE: Lineage = {
    "id": {"memory_snapshot": ["id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    # STM rows are promoted in tier, episodic rows in kind.
    "promotion": {"memory_snapshot": ["tier", "kind"]},
    "to": {"memory_snapshot": ["tier", "kind"]},
    # The LTM quota is filled highest decay score first, then by id, within the namespace.
    "rank": {"decay_scores": ["score"], "memory_snapshot": ["namespace", "id"]},
    "reason": {"memory_snapshot": ["access_count", "importance", "tags"]},
}


@dg.asset(
    name="promotions",
    partitions_def=as_of_partitions,
    deps=inputs_of("promotions"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Promotions earned by access (seed 000: STM->LTM at promotion.stm_access_threshold ({config.promotion.stm_access_threshold}) accesses and "
        "importance >= promotion.stm_importance_threshold ({config.promotion.stm_importance_threshold}), highest decay score first within the namespace's LTM "
        "quota) and episodic->semantic (seed 004: heavy access with high importance, >= {config.promotion.semantic_min_inbound_links} referencing "
        "memories, or a critical/permanent tag). Idempotent: a promoted row no longer matches."
    ),
)
def promotions_asset(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    promoted = promotions_for_day(
        wh.read_table("memories", as_of, columns=_LIFECYCLE_COLUMNS),
        wh.read_table("decay_scores", as_of),
        wh.read_table("links", as_of),
        config,
    )
    table, intents = promoted.table, promoted.intents
    wh.write_table("promotions", as_of, table)
    wh.write_proposals("promotions", as_of, intents)
    return dg.MaterializeResult(
        metadata={
            **standard(PROMOTION_SCHEMA, table.num_rows),
            "dagster/column_lineage": column_lineage(_PROMOTIONS_LINEAGE),
            "by_promotion": dg.MetadataValue.json(value_counts(table, "promotion")),
            "transitions": intents.num_rows,
            "sample": sample_markdown(table, ["id", "namespace", "promotion", "to", "reason"]),
        }
    )


# Which rule moves a row: its zone and since when, a pin, an access since archiving, the deprecated tag, its
# age and its decay score. The reason also says how long the row has been in its zone (zone_since, else
# updated_at).
_RULE_INPUTS = [
    "zone",
    "zone_since",
    "last_accessed_at",
    "access_count",
    "pinned",
    "tags",
    "created_at",
    "importance",
    "metadata",  # a promotion's time restarts the clock
]

_RETENTION_LINEAGE: Lineage = {
    "id": {"memory_snapshot": ["id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    "from_zone": {"memory_snapshot": ["zone"]},
    "to_zone": {
        "memory_snapshot": ["zone", "zone_since", "last_accessed_at", "pinned"],
        "promotions": ["id"],
    },
    "rule": {"memory_snapshot": _RULE_INPUTS, "decay_scores": ["score"], "promotions": ["id"]},
    "reason": {"memory_snapshot": [*_RULE_INPUTS, "updated_at"], "decay_scores": ["score"]},
    "score": {"decay_scores": ["score"]},
}


@dg.asset(
    partitions_def=as_of_partitions,
    deps=inputs_of("retention"),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Retention zones (seed 001): Active -> Archived (decay score < {config.retention.archive_score_threshold} and older than "
        "{config.retention.archive_older_than_days} days; or past the archive age ({config.retention.archive_age_days} days), never accessed "
        "and importance < {config.retention.archive_max_importance}; or tagged {config.retention.deprecated_tag}) -> PurgeQueue after the archive "
        "grace period ({config.retention.archive_grace_days} days) -> purged after the purge grace period "
        "({config.retention.purge_grace_days} days) (the apply keeps a pre-image so `engram-pipelines "
        "restore` brings a row back). Importance >= retention.protect_importance ({config.retention.protect_importance}) is never archived by age "
        "or score alone; a row promoted tonight is not archived tonight and its age restarts at the promotion. "
        "Pinned rows, blocks and superseded rows are exempt; archived rows accessed since come back. "
        "Per-namespace policies. Judges only the rows whose next due date has come or that changed since they "
        "were dated (execution.reuse; metadata rows_judged)."
    ),
)
def retention(
    context: dg.AssetExecutionContext, warehouse: WarehouseResource, engram_config: EngramConfigResource
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    memories = wh.read_table("memories", as_of, columns=KEY_COLUMNS)
    # Only the rows that can move tonight are judged; the others' due dates are kept in <warehouse>/retention_due/.
    retained, judged = retention_for_day(
        memories,
        wh.read_table("decay_scores", as_of, columns=["id", "score", "decline_rate"]),
        wh.read_table("promotions", as_of, columns=["id"]),
        config,
        end_of_day(as_of),
        cache_root=wh.root,
    )
    moves, intents = retained.table, retained.intents
    context.log.info(f"retention: judged {judged} of {memories.num_rows} rows, {moves.num_rows} moves")
    wh.write_table("retention", as_of, moves)
    wh.write_proposals("retention", as_of, intents)
    return dg.MaterializeResult(
        metadata={
            **standard(RETENTION_SCHEMA, moves.num_rows),
            "dagster/column_lineage": column_lineage(_RETENTION_LINEAGE),
            "by_target_zone": dg.MetadataValue.json(value_counts(moves, "to_zone")),
            "by_rule": dg.MetadataValue.json(value_counts(moves, "rule")),
            "transitions": intents.num_rows,
            "rows_judged": judged,
            "sample": sample_markdown(moves, ["id", "namespace", "from_zone", "to_zone", "reason"]),
        }
    )


# The preview's table is the rows about to fall off: both scores re-run the decay policy (now and at the preview
# date); `would` re-runs retention at the preview date on the projected score, or says the row would go stale.
_PREVIEW_LINEAGE: Lineage = {
    "id": {"memory_snapshot": ["id"]},
    "namespace": {"memory_snapshot": ["namespace"]},
    "content": {"memory_snapshot": ["content"]},
    "score_now": {"memory_snapshot": _SCORE_INPUTS},
    "score_then": {"memory_snapshot": _SCORE_INPUTS},
    "would": {"memory_snapshot": sorted({*_SCORE_INPUTS, *_RULE_INPUTS, "updated_at"})},
}


class DecayPreviewConfig(dg.Config):
    days_ahead: int = 30


@dg.asset(
    partitions_def=as_of_partitions,
    deps=["memory_snapshot"],
    group_name="reports",
    kinds={"duckdb"},
    owners=["team:data-platform"],
    description=(
        "Decay preview (seed 001): every score projected `days_ahead` (default 30) past the as-of date, writing "
        "nothing: per namespace what would go stale, archive, queue for purge or purge, the rows about to fall "
        "off (the column schema on this page is theirs), and the score distribution now vs then. Run it before "
        "the first retention sweep on a store you care about, and pin what must stay. Not part of the nightly "
        "job; materialise it on demand."
    ),
)
def decay_preview(
    context: dg.AssetExecutionContext,
    config: DecayPreviewConfig,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    import datetime as dt

    from engram_pipelines.reports.decay_preview import (
        FALLING_OFF_SCHEMA,
        preview_decay,
        score_distribution_png,
    )

    settings = engram_config.for_run(warehouse.get())
    as_of = as_of_date(context)
    wh = warehouse.get()
    now = end_of_day(as_of)
    preview = preview_decay(
        wh.read_table("memories", as_of, columns=_LIFECYCLE_COLUMNS),
        settings,
        now,
        now + dt.timedelta(days=config.days_ahead),
    )
    png = score_distribution_png(preview, settings.decay.stale_threshold)
    reports = wh.reports_dir(as_of)
    (reports / "decay-preview.md").write_text(preview.markdown())
    (reports / "decay-preview.png").write_bytes(png)
    chart = markdown_image(png, "score distribution now vs then")
    return dg.MaterializeResult(
        metadata={
            "dagster/column_schema": column_schema(FALLING_OFF_SCHEMA),
            "dagster/column_lineage": column_lineage(_PREVIEW_LINEAGE),
            "totals": dg.MetadataValue.json(preview.totals()),
            "preview": dg.MetadataValue.md(preview.markdown()),
            "score_distribution": dg.MetadataValue.md(chart),
            "chart_path": dg.MetadataValue.path(str(reports / "decay-preview.png")),
        }
    )
