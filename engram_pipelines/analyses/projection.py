"""The snapshot as it will be once this run's auto transitions land, for analyses that build on row states.

Analyses run side by side on one snapshot. Semantic extraction counts a superseded or purge-queued source as
lost; if it read the raw snapshot, tonight's duplicate collapse and retention moves would only reach it
tomorrow, and the second run would propose again what the first could have known. Reading this projection
instead makes one night settle.
"""

from __future__ import annotations

import pyarrow as pa

from engram_pipelines.core.duck import duck


def project_auto_transitions(memories: pa.Table, duplicates: pa.Table, retention: pa.Table) -> pa.Table:
    """`memories` with tonight's duplicate losers superseded and retention's zone moves made."""
    with duck() as con:
        con.register("m", memories)
        con.register("d", duplicates.select(["loser", "canonical"]))
        con.register("r", retention.select(["id", "to_zone"]))
        projected = con.sql(
            """
            SELECT m.* REPLACE (
                coalesce(m.superseded_by, d.canonical) AS superseded_by,
                CASE WHEN r.to_zone IN ('archived', 'purge_queue', 'active') THEN r.to_zone ELSE m.zone END AS zone
            )
            FROM m
            LEFT JOIN (SELECT loser, min(canonical) AS canonical FROM d GROUP BY loser) d ON d.loser = m.id
            LEFT JOIN r ON r.id = m.id AND r.to_zone <> 'purged'
            ANTI JOIN (SELECT id FROM r WHERE to_zone = 'purged') gone ON gone.id = m.id
            ORDER BY m.id
            """
        ).to_arrow_table()
        return projected.cast(memories.schema)
