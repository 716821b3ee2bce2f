"""The fold of the common memory changes, in SQL: most of a night's rows, composed in bulk.

A night at 1M memories proposes about a million memory changes, nearly all of them one or two of the lifecycle
ops (a decay mark, a zone move, a promotion, a metadata marker). Folding each in Python cost ~100 us a row. Here
DuckDB folds the rows whose intents are all lifecycle ops, each op at most once (so no precedence rule has
anything to decide), into the same change documents `compose._compose_one` writes: same ops, patch values,
guards, reason, source, evidence order and cluster. Everything else (merges, purges, inserts, tags, contradiction
flags, two intents of one op, a JSON null in the params, a target missing from the snapshot) stays with the
Python fold, the reference. The JSON texts are equal as JSON, not byte for byte (key order, number spelling);
`tests/changes/test_change_sets.py` compares the two paths change by change.
"""

from __future__ import annotations

import datetime as dt

import duckdb
import pyarrow as pa

from engram_pipelines.changes.intents import OP_ORDER
from engram_pipelines.core.digests import content_sha_sql
from engram_pipelines.core.sqltext import quoted
from engram_pipelines.core.timestamps import format_timestamp

# Ops this fold handles, in fold order: each sets plain columns and replaces (or removes) whole top-level
# metadata keys. Not the ones that point at other rows or accumulate into lists.
SQL_FOLD_OPS = tuple(
    op
    for op in OP_ORDER
    if op not in ("supersede", "flag_contradiction", "union_tags", "annotate_duplicates")
)


def _targets_sql() -> str:
    ops = ", ".join(quoted(op) for op in SQL_FOLD_OPS)
    # A JSON null anywhere in the params sends the row to Python: dict.update keeps a null value, while the
    # fold below reads a missing value as "the key goes". So does metadata that is not a JSON object.
    return f"""
    SELECT review_class, target_id FROM intents i JOIN memories m ON m.id = i.target_id
    WHERE target_kind = 'memory'
    GROUP BY review_class, target_id
    HAVING bool_and(op IN ({ops})) AND count(*) = count(DISTINCT op) AND count(DISTINCT i.namespace) = 1
        AND NOT bool_or(contains(params, 'null'))
        -- In the aggregate, not a WHERE: only the targets' rows are parsed, not the whole snapshot's.
        AND bool_and(json_type(m.metadata) = 'OBJECT')
    """


SQL_TARGETS_SCHEMA = pa.schema([("review_class", pa.string()), ("target_id", pa.string())])


def sql_fold_targets(con: duckdb.DuckDBPyConnection) -> pa.Table:
    """(review_class, target_id) of the memory changes `fold_in_sql` composes (`intents`, `memories` registered)."""
    return con.sql(_targets_sql()).to_arrow_table().cast(SQL_TARGETS_SCHEMA)


def fold_in_sql(con: duckdb.DuckDBPyConnection, at: dt.datetime) -> pa.Table:
    """Changes (compose's unaddressed schema) for the targets in the registered table `sql_targets`."""
    return con.sql(_fold_sql(at)).to_arrow_table()


def _fold_sql(at: dt.datetime) -> str:
    when = quoted(format_timestamp(at) or "")
    at_us = int(at.timestamp() * 1_000_000)
    rank = "CASE op " + " ".join(f"WHEN '{op}' THEN {OP_ORDER.index(op)}" for op in SQL_FOLD_OPS) + " END"
    pivot = ",\n            ".join(
        f"max(struct_pack(op, params, reason, source, evidence, cluster_id, p)) FILTER (WHERE op = '{op}') AS m_{op}"
        for op in SQL_FOLD_OPS
    )
    in_fold_order = ", ".join(f"m_{op}" for op in SQL_FOLD_OPS)
    return f"""
    WITH members AS (
        SELECT i.*, {rank} AS rank, params::JSON AS p
        FROM intents i SEMI JOIN sql_targets t USING (review_class, target_id)
        WHERE i.target_kind = 'memory'
    ),
    -- Each op's top-level metadata key and its new value (NULL: the key goes), as fold() writes them; keys in
    -- order, as the Python side writes them, so that an unchanged value compares equal as text.
    metadata_sets AS (
        SELECT review_class, target_id, rank, key, value FROM (
            SELECT review_class, target_id, rank,
                CASE op WHEN 'promote_tier' THEN 'promotion' WHEN 'promote_kind' THEN 'kindPromotion'
                        WHEN 'clear_stale' THEN 'stale' WHEN 'mark_stale' THEN 'stale' ELSE 'zone' END AS key,
                CASE op
                    WHEN 'promote_tier' THEN json_object('at', {when}, 'reason', reason, 'to', p->'to')
                    WHEN 'promote_kind' THEN json_object('at', {when}, 'reason', reason, 'to', p->'to')
                    WHEN 'mark_stale' THEN json_object('at', {when}, 'reason', reason, 'score', p->'score')
                    WHEN 'move_zone' THEN json_object('at', {when}, 'from', p->'from', 'reason', reason, 'to', p->'to')
                END AS value
            FROM members WHERE op IN ('promote_tier', 'promote_kind', 'clear_stale', 'mark_stale', 'move_zone')
            UNION ALL
            SELECT review_class, target_id, rank, e.key, e.value FROM (
                SELECT review_class, target_id, rank,
                    unnest(map_entries((p->'values')::MAP(VARCHAR, JSON))) AS e
                FROM members WHERE op = 'set_metadata'
            )
        )
        QUALIFY row_number() OVER (PARTITION BY review_class, target_id, key ORDER BY rank DESC) = 1
    ),
    -- One row per target, each op's intent in a column of its own (an op occurs once per target here), so the
    -- lists below are built in fold order without ordered aggregates (those were 3 s of 4 at 90k targets).
    pivoted AS (
        SELECT review_class, target_id, any_value(namespace) AS namespace,
            {pivot}
        FROM members GROUP BY review_class, target_id
    ),
    per_target AS (
        SELECT *,
            -- compose lists a change's evidence (and takes its cluster) in this order of the members
            list_sort(list_transform(kept, lambda m: struct_pack(source := m.source, op := m.op,
                params := m.params, reason := m.reason, evidence := m.evidence, cluster_id := m.cluster_id))) AS listed
        FROM (SELECT *, list_filter([{in_fold_order}], lambda m: m IS NOT NULL) AS kept FROM pivoted)
    ),
    summed AS (
        SELECT review_class, target_id, namespace,
            list_transform(kept, lambda m: m.op) AS ops,
            '[' || array_to_string(list_transform(kept, lambda m: '{{"op":' || to_json(m.op) || ',"params":'
                || m.params || ',"reason":' || to_json(m.reason) || ',"source":' || to_json(m.source) || '}}'),
                ',') || ']' AS intents,
            array_to_string(list_filter(list_transform(kept, lambda m: m.reason), lambda r: r <> ''), '; ')
                AS reason,
            array_to_string(list_sort(list_distinct(list_transform(kept, lambda m: m.source))), ',') AS source,
            '[' || array_to_string(list_transform(listed, lambda m: m.evidence), ',') || ']' AS evidence,
            list_filter(listed, lambda m: m.cluster_id <> '')[1].cluster_id AS cluster_id,
            m_promote_tier.p->>'to' AS new_tier,
            m_promote_kind.p->>'to' AS new_kind,
            m_move_zone.p->>'to' AS new_zone,
            m_mark_stale IS NOT NULL AS marks, m_clear_stale IS NOT NULL AS clears,
            -- The last of clear_stale, mark_stale, set_score (fold order) sets the score.
            (coalesce(m_set_score, m_mark_stale, m_clear_stale).p->>'score')::DOUBLE AS new_score,
            coalesce(m_set_score, m_mark_stale, m_clear_stale) IS NOT NULL AS scores
        FROM per_target
    ),
    old_entries AS (
        SELECT t.review_class, t.target_id, e.key, e.value FROM (
            SELECT t.review_class, t.target_id, unnest(map_entries(m.metadata::JSON::MAP(VARCHAR, JSON))) AS e
            FROM sql_targets t JOIN memories m ON m.id = t.target_id
        ) t
    ),
    new_metadata AS (
        SELECT review_class, target_id,
            -- Keys in order, as compose's Python side writes them (sorted per row: an ordered aggregate is slower).
            to_json(map_from_entries(list_sort(list({{'key': key, 'value': value}}) FILTER (WHERE value IS NOT NULL))))
                AS metadata,
            bool_or(changed) AS metadata_changed
        FROM (
            SELECT coalesce(s.review_class, o.review_class) AS review_class,
                coalesce(s.target_id, o.target_id) AS target_id, coalesce(s.key, o.key) AS key,
                CASE WHEN s.key IS NULL THEN o.value ELSE s.value END AS value,
                s.key IS NOT NULL AND (s.value IS DISTINCT FROM o.value) AS changed
            FROM metadata_sets s FULL JOIN old_entries o USING (review_class, target_id, key)
        )
        GROUP BY review_class, target_id
    ),
    folded AS (
        SELECT t.*, m.version, m.access_count, m.last_accessed_at, m.pinned, {content_sha_sql("m.content")} AS content_sha,
            coalesce(t.new_tier, m.tier) AS tier, coalesce(t.new_kind, m.kind) AS kind,
            CASE WHEN t.scores THEN t.new_score ELSE m.score END AS score,
            CASE WHEN t.marks THEN TRUE WHEN t.clears THEN FALSE ELSE m.stale END AS stale,
            coalesce(t.new_zone, m.zone) AS zone,
            t.new_zone IS NOT NULL AND m.zone_since IS DISTINCT FROM make_timestamptz({at_us}) AS zone_since_changed,
            t.new_tier IS NOT NULL AND t.new_tier IS DISTINCT FROM m.tier AS tier_changed,
            t.new_kind IS NOT NULL AND t.new_kind IS DISTINCT FROM m.kind AS kind_changed,
            t.scores AND t.new_score IS DISTINCT FROM m.score AS score_changed,
            (t.marks OR t.clears) AND t.marks IS DISTINCT FROM m.stale AS stale_changed,
            t.new_zone IS NOT NULL AND t.new_zone IS DISTINCT FROM m.zone AS zone_changed,
            coalesce(n.metadata_changed, FALSE) AS metadata_changed,
            coalesce(n.metadata, '{{}}') AS new_metadata
        FROM summed t JOIN memories m ON m.id = t.target_id
        LEFT JOIN new_metadata n USING (review_class, target_id)
    ),
    patched AS (
        SELECT *, '{{' || concat_ws(',',
                CASE WHEN kind_changed THEN '"kind":' || to_json(kind) END,
                CASE WHEN metadata_changed THEN '"metadata":' || new_metadata END,
                CASE WHEN score_changed THEN '"score":' || to_json(score) END,
                CASE WHEN stale_changed THEN '"stale":' || to_json(stale) END,
                CASE WHEN tier_changed THEN '"tier":' || to_json(tier) END,
                CASE WHEN zone_changed THEN '"zone":' || to_json(zone) END,
                CASE WHEN zone_since_changed THEN '"zone_since":' || to_json({when}) END
            ) || '}}' AS patch
        FROM folded
    )
    SELECT namespace, 'memory' AS target_kind, target_id, 'update' AS op, ops, intents, '[]' AS dropped,
        version AS expected_version, access_count AS guard_access_count,
        last_accessed_at AS guard_last_accessed_at, pinned AS guard_pinned, content_sha AS guard_content_sha,
        patch, reason, evidence, source, review_class, cluster_id,
        zone_changed AND zone <> 'active' AS destructive
    FROM patched WHERE patch <> '{{}}'
    """
