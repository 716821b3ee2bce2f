"""Retention zones (seed 001): Active -> Archived -> PurgeQueue -> purged, each step with its grace period.

- Active -> Archived: decay score below `archive_score_threshold` and older than `archive_older_than_days`;
  or older than `archive_age_days` and never accessed; or tagged `deprecated`.
- Archived -> PurgeQueue: archived for longer than `archive_grace_days`.
- PurgeQueue -> purged: queued for longer than `purge_grace_days`; the apply keeps a pre-image for `restore`.
- Archived rows accessed since they were archived come back to Active (an access is a signal).
- Pinned and `block` rows are exempt from every step; a pinned row found outside Active is brought back.
- Superseded rows are left where they are: a merge is reversible because its losers are never deleted.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.changes.compose import intents_from_sql
from engram_pipelines.config import Config

RETENTION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("from_zone", pa.string(), nullable=False),
        pa.field("to_zone", pa.string(), nullable=False),  # archived | purge_queue | purged | active
        pa.field("rule", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("score", pa.float64()),
    ]
)


def _group_sql(config: Config, group: str, as_of: dt.datetime) -> str:
    r = config.retention
    now = f"TIMESTAMPTZ '{as_of.isoformat()}'"
    age = f"epoch({now} - m.created_at) / 86400.0"
    in_zone = f"epoch({now} - coalesce(m.zone_since, m.updated_at)) / 86400.0"
    deprecated = r.deprecated_tag.replace("'", "''")
    return f"""
    SELECT m.id, m.namespace, m.zone AS from_zone,
        CASE
            WHEN m.pinned AND m.zone <> 'active' THEN 'active'
            WHEN m.zone = 'archived' AND m.last_accessed_at > m.zone_since THEN 'active'
            WHEN m.zone = 'active' THEN 'archived'
            WHEN m.zone = 'archived' THEN 'purge_queue'
            ELSE 'purged' END AS to_zone,
        CASE
            WHEN m.pinned AND m.zone <> 'active' THEN 'pinned'
            WHEN m.zone = 'archived' AND m.last_accessed_at > m.zone_since THEN 'accessed'
            WHEN m.zone = 'active' AND list_contains(from_json(m.tags, '["VARCHAR"]'), '{deprecated}')
                THEN 'deprecated'
            WHEN m.zone = 'active' AND s.score < {r.archive_score_threshold}
                 AND {age} > {r.archive_older_than_days} THEN 'low_score'
            WHEN m.zone = 'active' THEN 'unused'
            WHEN m.zone = 'archived' THEN 'archive_grace'
            ELSE 'purge_grace' END AS rule,
        CASE
            WHEN m.pinned AND m.zone <> 'active' THEN 'pinned: back to active'
            WHEN m.zone = 'archived' AND m.last_accessed_at > m.zone_since THEN 'accessed since it was archived'
            WHEN m.zone = 'active' AND list_contains(from_json(m.tags, '["VARCHAR"]'), '{deprecated}')
                THEN 'tagged {deprecated}'
            WHEN m.zone = 'active' AND s.score < {r.archive_score_threshold}
                 AND {age} > {r.archive_older_than_days}
                THEN 'score ' || round(s.score, 4) || ' < {r.archive_score_threshold} and ' || round({age}, 1)
                     || ' days old (> {r.archive_older_than_days})'
            WHEN m.zone = 'active' THEN 'never accessed in ' || round({age}, 1) || ' days (> {r.archive_age_days})'
            WHEN m.zone = 'archived' THEN 'archived ' || round({in_zone}, 1) || ' days (> grace {r.archive_grace_days})'
            ELSE 'queued ' || round({in_zone}, 1) || ' days (> grace {r.purge_grace_days})' END AS reason,
        s.score
    FROM memories m SEMI JOIN {group} g ON g.namespace = m.namespace
    LEFT JOIN scores s USING (id)
    WHERE m.kind <> 'block' AND m.superseded_by IS NULL AND (
        (m.pinned AND m.zone <> 'active')
        OR (NOT m.pinned AND (
            (m.zone = 'archived' AND m.last_accessed_at > m.zone_since)
            OR (m.zone = 'active' AND (
                list_contains(from_json(m.tags, '["VARCHAR"]'), '{deprecated}')
                OR (s.score < {r.archive_score_threshold} AND {age} > {r.archive_older_than_days})
                OR ({age} > {r.archive_age_days} AND m.access_count = 0)))
            OR (m.zone = 'archived' AND {in_zone} > {r.archive_grace_days})
            OR (m.zone = 'purge_queue' AND {in_zone} > {r.purge_grace_days}))))
    """


def leaving_active(moves: pa.Table) -> frozenset[str]:
    """Rows these moves take out of Active. They take no part in a merge of the same run: a merge into (or out
    of) one would hide a visible row behind an archived canonical once both change sets land."""
    leaving = pc.and_(pc.equal(moves["from_zone"], "active"), pc.not_equal(moves["to_zone"], "active"))
    return frozenset(moves.filter(leaving)["id"].to_pylist())


def retention_moves(memories: pa.Table, scores: pa.Table, config: Config, as_of: dt.datetime) -> pa.Table:
    """Every zone transition due as of `as_of`, with its rule and reason."""
    con = duckdb.connect()
    con.register(
        "memories",
        memories.select(
            [
                "id",
                "namespace",
                "kind",
                "zone",
                "zone_since",
                "updated_at",
                "created_at",
                "last_accessed_at",
                "access_count",
                "pinned",
                "tags",
                "superseded_by",
            ]
        ),
    )
    con.register("scores", scores.select(["id", "score"]))
    namespaces = [r[0] for r in con.execute("SELECT DISTINCT namespace FROM memories").fetchall()]
    parts = []
    for index, (effective, group) in enumerate(config.namespace_groups(namespaces, "retention")):
        con.register(f"group_{index}", pa.table({"namespace": group}))
        parts.append(con.sql(_group_sql(effective, f"group_{index}", as_of)).to_arrow_table())
    if not parts:
        return RETENTION_SCHEMA.empty_table()
    return pa.concat_tables([p.cast(RETENTION_SCHEMA) for p in parts]).sort_by("id")


def retention_intents(moves: pa.Table) -> pa.Table:
    con = duckdb.connect()
    con.register("moves", moves)
    return intents_from_sql(
        con,
        """
        SELECT namespace, 'memory' AS target_kind, id AS target_id,
            CASE WHEN to_zone = 'purged' THEN 'purge' ELSE 'move_zone' END AS op,
            CASE WHEN to_zone = 'purged' THEN '{}' ELSE to_json({'from': from_zone, 'to': to_zone}) END AS params,
            reason, to_json({'decay_score': score, 'rule': 'retention:' || rule}) AS evidence,
            'retention' AS source, 'auto' AS review_class, NULL AS cluster_id
        FROM moves
        """,
    )
