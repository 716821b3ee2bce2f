"""Decay scores (seeds 000, 001, 004), computed in bulk by DuckDB over the snapshot.

Three policies, chosen per namespace and per kind:
- `engram` (default): cue and access boosts times a recency half-life from the last access;
- `halflife`: importance x 0.5^(age_hours / half_life_hours), age from creation;
- `ebbinghaus`: max(S e^(-lambda t) x repetition bonus, S x floor), per-kind half-lives, age from creation.
Pinned rows never score below the pinned floor; `block` rows live outside every decay cycle (no score).
The stale mark is metadata only (the row still recalls) and is lifted when the score recovers.
"""

from __future__ import annotations

import datetime as dt
import math

import duckdb
import pyarrow as pa

from engram_pipelines.changes.compose import INTENT_SCHEMA, intents_table
from engram_pipelines.config import Config, DecayConfig

DECAY_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("policy", pa.string(), nullable=False),
        pa.field("age_days", pa.float64()),
        pa.field("score", pa.float64()),
        pa.field("previous_score", pa.float64()),
        pa.field("stale_before", pa.bool_(), nullable=False),
        pa.field("stale_after", pa.bool_(), nullable=False),
        pa.field(
            "outcome", pa.string(), nullable=False
        ),  # ok | stale | recovered | became_stale | pinned | exempt
        pa.field("review_interval_days", pa.float64()),
        pa.field("reasons", pa.string(), nullable=False),
    ]
)

_COLUMNS = [
    "id",
    "namespace",
    "kind",
    "content",
    "importance",
    "score",
    "access_count",
    "last_accessed_at",
    "created_at",
    "pinned",
    "stale",
    "tags",
]


def _sql_list(values: list[str]) -> str:
    return "[" + ", ".join("'" + v.replace("'", "''") + "'" for v in values) + "]"


def _word_regex(words: list[str]) -> str:
    # Word starts: "error" matches "errors" but not "terror"; RE2 syntax.
    escaped = "|".join(w.replace("\\", "\\\\").replace("'", "''") for w in words)
    return f"\\b({escaped})"


def _engram_sql(cfg: DecayConfig) -> str:
    p = cfg.engram
    cues = (
        " + ".join(
            f"CASE WHEN regexp_matches(lower(content), '{_word_regex(rule.words)}') THEN {rule.weight} ELSE 0 END"
            for rule in p.cues
        )
        or "0"
    )
    tag_cue = f"CASE WHEN list_has_any(tag_list, {_sql_list(p.cue_tags)}) THEN {p.cue_tag_weight} ELSE 0 END"
    raw = (
        f"({p.base} + least({p.access_boost_cap}, {p.access_boost_per_log2} * log2(access_count + 1)) "
        f"+ {cues} + {tag_cue} + CASE WHEN pinned THEN {p.pin_boost} ELSE 0 END)"
        f" * CASE WHEN pinned THEN 1 ELSE exp(-ln(2) * age_access_days / {p.half_life_days}) END"
    )
    return f"least(1.0, greatest(0.0, {raw}))"


def _halflife_sql(cfg: DecayConfig) -> str:
    return f"importance * pow(0.5, age_created_days * 24 / {cfg.halflife.half_life_hours})"


def _ebbinghaus_lambda_sql(cfg: DecayConfig) -> str:
    p = cfg.ebbinghaus
    cases = []
    for kind, half_life in sorted(p.kind_half_life_days.items()):
        lam = math.log(2) / half_life if half_life > 0 and math.isfinite(half_life) else 0.0
        cases.append(f"WHEN kind = '{kind}' THEN {lam!r}")
    default = (
        math.log(2) / p.half_life_days if p.half_life_days > 0 and math.isfinite(p.half_life_days) else 0.0
    )
    return f"(CASE {' '.join(cases)} ELSE {default!r} END)"


def _ebbinghaus_sql(cfg: DecayConfig) -> str:
    p = cfg.ebbinghaus
    bonus = (
        f"CASE WHEN access_count > 0 THEN 1 + log10(access_count + 1) * ({p.repetition_boost} - 1) ELSE 1 END"
    )
    raw = (
        f"greatest(importance * exp(-lam * age_created_days) * ({bonus}), importance * {p.floor_multiplier})"
    )
    return f"least(1.0, {raw})"


def _policy_case(cfg: DecayConfig) -> tuple[str, str]:
    """SQL for (policy name, score) of a row, honouring per-kind policy overrides."""
    scores = {"engram": _engram_sql(cfg), "halflife": _halflife_sql(cfg), "ebbinghaus": _ebbinghaus_sql(cfg)}
    if not cfg.kind_policy:
        return f"'{cfg.policy}'", scores[cfg.policy]
    name_cases = " ".join(f"WHEN kind = '{k}' THEN '{v}'" for k, v in sorted(cfg.kind_policy.items()))
    score_cases = " ".join(f"WHEN kind = '{k}' THEN {scores[v]}" for k, v in sorted(cfg.kind_policy.items()))
    return (
        f"CASE {name_cases} ELSE '{cfg.policy}' END",
        f"CASE {score_cases} ELSE {scores[cfg.policy]} END",
    )


def _group_sql(cfg: Config, namespaces_table: str, as_of: dt.datetime) -> str:
    d = cfg.decay
    policy, score = _policy_case(d)
    floor = d.engram.pinned_floor
    threshold = d.stale_threshold
    lam = _ebbinghaus_lambda_sql(d)
    review = (
        f"CASE WHEN lam > 0 AND final_score > {d.ebbinghaus.review_threshold} "
        f"THEN -ln({d.ebbinghaus.review_threshold} / final_score) / lam ELSE NULL END"
    )
    as_of_literal = f"TIMESTAMPTZ '{as_of.isoformat()}'"
    return f"""
    WITH base AS (
        SELECT m.*,
            from_json(m.tags, '["VARCHAR"]') AS tag_list,
            greatest(0.0, epoch(({as_of_literal}) - coalesce(m.last_accessed_at, m.created_at)) / 86400.0)
                AS age_access_days,
            greatest(0.0, epoch(({as_of_literal}) - m.created_at) / 86400.0) AS age_created_days,
            {lam} AS lam
        FROM memories m SEMI JOIN {namespaces_table} g ON g.namespace = m.namespace
    ),
    scored AS (
        SELECT *, {policy} AS policy_name,
            CASE WHEN kind = 'block' THEN NULL
                 WHEN pinned THEN greatest({floor}, {score})
                 ELSE {score} END AS final_score
        FROM base
    )
    SELECT id, namespace, kind,
        CASE WHEN kind = 'block' THEN 'exempt' ELSE policy_name END AS policy,
        CASE WHEN policy_name = 'engram' THEN age_access_days ELSE age_created_days END AS age_days,
        final_score AS score,
        score AS previous_score,
        stale AS stale_before,
        (final_score IS NOT NULL AND NOT pinned AND final_score < {threshold}) AS stale_after,
        CASE WHEN kind = 'block' THEN 'exempt'
             WHEN pinned THEN 'pinned'
             WHEN final_score < {threshold} AND NOT stale THEN 'became_stale'
             WHEN final_score < {threshold} THEN 'stale'
             WHEN stale THEN 'recovered'
             ELSE 'ok' END AS outcome,
        {review} AS review_interval_days,
        CASE WHEN kind = 'block' THEN 'block: outside every decay cycle'
             WHEN pinned THEN 'pinned: floor ' || {floor}
             ELSE policy_name || ' score ' || round(final_score, 4) || ' after ' ||
                  round(CASE WHEN policy_name = 'engram' THEN age_access_days ELSE age_created_days END, 1)
                  || ' days' ||
                  CASE WHEN final_score < {threshold} THEN ' < stale threshold {threshold}' ELSE '' END
        END AS reasons
    FROM scored
    """


def decay_scores(memories: pa.Table, config: Config, as_of: dt.datetime) -> pa.Table:
    """One row per memory: policy, age, score, stale before/after, outcome, review interval, reasons."""
    con = duckdb.connect()
    con.register("memories", memories.select(_COLUMNS))
    namespaces = con.execute("SELECT DISTINCT namespace FROM memories").fetchnumpy()["namespace"].tolist()
    parts = []
    for index, (effective, group) in enumerate(config.namespace_groups(namespaces, "decay")):
        con.register(f"group_{index}", pa.table({"namespace": group}))
        parts.append(con.sql(_group_sql(effective, f"group_{index}", as_of)).to_arrow_table())
    if not parts:
        return DECAY_SCHEMA.empty_table()
    return pa.concat_tables(parts).cast(DECAY_SCHEMA).sort_by("id")


def decay_intents(scores: pa.Table) -> pa.Table:
    """Only transitions: mark rows that became stale, lift the mark from rows that recovered or are pinned."""
    con = duckdb.connect()
    con.register("scores", scores)
    rows = con.execute(
        """
        SELECT namespace, id, score, reasons, policy, age_days,
            CASE WHEN stale_after THEN 'mark_stale' ELSE 'clear_stale' END AS op
        FROM scores WHERE stale_after <> stale_before ORDER BY id
        """
    ).fetchall()
    return (
        intents_table(
            [
                {
                    "namespace": namespace,
                    "target_id": memory_id,
                    "op": op,
                    "params": {"score": round(score, 6) if score is not None else None},
                    "reason": reasons,
                    "evidence": {"rule": "decay", "policy": policy, "decay_score": score, "age_days": age},
                    "source": "decay_scores",
                    "review_class": "auto",
                }
                for namespace, memory_id, score, reasons, policy, age, op in rows
            ]
        )
        if rows
        else INTENT_SCHEMA.empty_table()
    )
