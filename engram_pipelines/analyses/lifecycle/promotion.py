"""Promotion: STM -> LTM (seed 000) and episodic -> semantic (seed 004), as transitions only.

STM -> LTM: accessed at least `stm_access_threshold` times with importance at least
`stm_importance_threshold`, within the namespace's LTM quota (highest decay score first, then id).
Episodic -> semantic: (access > `semantic_access_threshold` and importance > `semantic_importance_threshold`),
or referenced by at least `semantic_min_inbound_links` other memories (associated/derived-from links), or
tagged `critical`/`permanent`. Superseded, hidden, pinned-irrelevant: only active, unsuperseded rows move.
Idempotent: a promoted row no longer matches.
"""

from __future__ import annotations

import pyarrow as pa

from engram_pipelines.changes.intents import INTENT_SCHEMA, intents_table
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.sqltext import quoted

# Links that mean "another memory refers to this one" (temporal neighbours and merges do not), written by
# agents: the pipeline's own associations and derivations are evidence of similarity, not of reference.
REFERENCE_LINK_KINDS = ("associated", "derived-from")
PIPELINE_ORIGINS = (
    "pipeline",
    "associations",
    "semantic",
    "compression",
    "duplicates",
    "consolidation",
    "contradictions",
    "temporal",
    "gc",
)

PROMOTION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("promotion", pa.string(), nullable=False),  # tier | kind
        pa.field("to", pa.string(), nullable=False),
        pa.field("rank", pa.int64()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)


def _sql_list(values: list[str]) -> str:
    return "[" + ", ".join(quoted(v) for v in values) + "]"


def promotions(memories: pa.Table, scores: pa.Table, links: pa.Table, config: Config) -> pa.Table:
    """Every promotion the rules grant, with its reason (and its quota rank for tier promotions)."""
    with duck() as con:
        con.register(
            "memories",
            memories.select(
                [
                    "id",
                    "namespace",
                    "tier",
                    "kind",
                    "importance",
                    "access_count",
                    "zone",
                    "superseded_by",
                    "tags",
                ]
            ),
        )
        con.register("scores", scores.select(["id", "score"]))
        con.register("links", links.select(["dst_id", "kind", "origin"]))
        kinds = _sql_list(list(REFERENCE_LINK_KINDS))
        con.execute(
            f"""
            CREATE TEMP TABLE eligible AS
            SELECT m.*, s.score, from_json(m.tags, '["VARCHAR"]') AS tag_list,
                   coalesce(l.inbound, 0) AS inbound
            FROM memories m
            LEFT JOIN scores s USING (id)
            LEFT JOIN (SELECT dst_id, count(*) AS inbound FROM links
                       WHERE list_contains({kinds}, kind) AND NOT list_contains({_sql_list(list(PIPELINE_ORIGINS))}, origin)
                       GROUP BY dst_id) l ON l.dst_id = m.id
            WHERE m.zone = 'active' AND m.superseded_by IS NULL
            """
        )
        namespaces = [r[0] for r in con.execute("SELECT DISTINCT namespace FROM eligible").fetchall()]
        parts = []
        for index, (effective, group) in enumerate(config.namespace_groups(namespaces, "promotion")):
            con.register(f"group_{index}", pa.table({"namespace": group}))
            parts.append(con.sql(_tier_sql(effective, f"group_{index}")).to_arrow_table())
            parts.append(con.sql(_kind_sql(effective, f"group_{index}")).to_arrow_table())
        if not parts:
            return PROMOTION_SCHEMA.empty_table()
        return pa.concat_tables([p.cast(PROMOTION_SCHEMA) for p in parts]).sort_by(
            [("promotion", "ascending"), ("id", "ascending")]
        )


def _tier_sql(config: Config, group: str) -> str:
    p = config.promotion
    quota = "TRUE" if p.ltm_quota is None else f"rank <= greatest(0, {p.ltm_quota} - coalesce(ltm.n, 0))"
    return f"""
    WITH ltm AS (SELECT namespace, count(*) AS n FROM memories WHERE tier = 'ltm' GROUP BY namespace),
    candidates AS (
        SELECT e.*, row_number() OVER (PARTITION BY e.namespace ORDER BY e.score DESC NULLS LAST, e.id) AS rank
        FROM eligible e SEMI JOIN {group} g ON g.namespace = e.namespace
        WHERE e.tier = 'stm' AND e.access_count >= {p.stm_access_threshold}
          AND e.importance >= {p.stm_importance_threshold}
    )
    SELECT c.id, c.namespace, 'tier' AS promotion, 'ltm' AS "to", c.rank,
        'STM->LTM: accessed ' || c.access_count || 'x (>= {p.stm_access_threshold}), importance ' ||
        round(c.importance, 3) || ' (>= {p.stm_importance_threshold})' AS reason
    FROM candidates c LEFT JOIN ltm USING (namespace)
    WHERE {quota}
    """


def _kind_sql(config: Config, group: str) -> str:
    p = config.promotion
    tags = _sql_list(p.semantic_tags)
    return f"""
    SELECT id, namespace, 'kind' AS promotion, 'semantic' AS "to", NULL::BIGINT AS rank,
        'episodic->semantic: ' || CASE
            WHEN access_count > {p.semantic_access_threshold} AND importance > {p.semantic_importance_threshold}
                THEN 'accessed ' || access_count || 'x (> {p.semantic_access_threshold}) with importance '
                     || round(importance, 3) || ' (> {p.semantic_importance_threshold})'
            WHEN inbound >= {p.semantic_min_inbound_links}
                THEN 'referenced by ' || inbound || ' memories (>= {p.semantic_min_inbound_links})'
            ELSE 'tagged ' || array_to_string(list_intersect(tag_list, {tags}), ', ')
        END AS reason
    FROM eligible e SEMI JOIN {group} g ON g.namespace = e.namespace
    WHERE kind = 'episodic' AND (
        (access_count > {p.semantic_access_threshold} AND importance > {p.semantic_importance_threshold})
        OR inbound >= {p.semantic_min_inbound_links}
        OR list_has_any(tag_list, {tags}))
    """


def promotion_intents(table: pa.Table) -> pa.Table:
    if table.num_rows == 0:
        return INTENT_SCHEMA.empty_table()
    return intents_table(
        [
            {
                "namespace": row["namespace"],
                "target_id": row["id"],
                "op": "promote_tier" if row["promotion"] == "tier" else "promote_kind",
                "params": {"from": "stm" if row["promotion"] == "tier" else "episodic", "to": row["to"]},
                "reason": row["reason"],
                "evidence": {"rule": f"promotion:{row['promotion']}", "quota_rank": row["rank"]},
                "source": "promotions",
                "review_class": "auto",
            }
            for row in table.to_pylist()
        ]
    )
