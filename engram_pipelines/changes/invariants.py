"""Invariants every change set must hold before it may be applied (run as blocking asset checks)."""

from __future__ import annotations

import pyarrow as pa

from engram_pipelines.core.duck import duck


def _violations(sql: str, **tables: pa.Table) -> list[dict[str, str]]:
    with duck() as con:
        for name, table in tables.items():
            con.register(name, table)
        rows = con.execute(sql).fetchall()
        columns = [d[0] for d in con.description]
        return [dict(zip(columns, map(str, r), strict=True)) for r in rows]


def destructive_on_pinned(changes: pa.Table, memories: pa.Table) -> list[dict[str, str]]:
    """Changes that hide or delete a row the snapshot shows pinned or as a block."""
    return _violations(
        """
        SELECT c.change_id, c.target_id, array_to_string(c.ops, '+') AS ops
        FROM changes c JOIN memories m ON m.id = c.target_id
        WHERE c.target_kind = 'memory' AND c.destructive AND (m.pinned OR m.kind = 'block')
        ORDER BY c.target_id
        """,
        changes=changes,
        memories=memories.select(["id", "pinned", "kind"]),
    )


def crosses_namespace(changes: pa.Table, memories: pa.Table) -> list[dict[str, str]]:
    """Changes whose target, or any memory their patch refers to, lives in another namespace."""
    return _violations(
        """
        WITH refs AS (
            SELECT change_id, namespace, target_id AS ref FROM changes WHERE target_kind = 'memory' AND op <> 'insert'
            UNION ALL
            SELECT change_id, namespace, json_extract_string(patch, '$.superseded_by') FROM changes
            WHERE json_extract_string(patch, '$.superseded_by') IS NOT NULL
            UNION ALL
            SELECT change_id, namespace, json_extract_string(patch, '$.src_id') FROM changes WHERE target_kind = 'link'
            UNION ALL
            SELECT change_id, namespace, json_extract_string(patch, '$.dst_id') FROM changes WHERE target_kind = 'link'
            UNION ALL
            SELECT change_id, namespace, unnest(json_extract_string(patch, '$.metadata.contradictionWith[*]'))
            FROM changes WHERE json_exists(patch, '$.metadata.contradictionWith')
        )
        SELECT r.change_id, r.ref AS memory, r.namespace AS change_namespace, m.namespace AS memory_namespace
        FROM refs r JOIN memories m ON m.id = r.ref
        WHERE m.namespace <> r.namespace
        ORDER BY r.change_id
        """,
        changes=changes,
        memories=memories.select(["id", "namespace"]),
    )


def several_writes_per_row(changes: pa.Table) -> list[dict[str, str]]:
    """Targets written more than once in one change set (it would conflict with itself)."""
    return _violations(
        """
        SELECT target_kind, target_id, count(*) AS writes FROM changes
        GROUP BY target_kind, target_id HAVING count(*) > 1 ORDER BY target_id
        """,
        changes=changes,
    )
