"""What knowledge extraction reads of the snapshot: the rows' facts, their vectors by id, and who contradicts whom."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core.duck import duck
from engram_pipelines.warehouse.parquet import vector_matrix


class VectorIndex:
    """Unit vectors of the partition's `vectors` table, looked up by id; centroids within one model."""

    def __init__(self, vectors: pa.Table) -> None:
        ids = vectors["id"].to_pylist()
        self._row = dict(zip(ids, range(len(ids)), strict=True))
        self.models = np.asarray(vectors["model"].to_pylist(), dtype=object)
        # The table's own vectors (a view when they are one chunk) and their norms; rows are normalised when
        # asked for. At 1M x 384 a copy is 1.5 GB: copying and normalising them all made the night's peak.
        self._vectors = np.asarray(vector_matrix(vectors["vector"]), dtype=np.float32)
        norms = np.sqrt(np.einsum("ij,ij->i", self._vectors, self._vectors))
        self._norms = np.where(norms == 0, 1.0, norms).astype(np.float32)[:, None]

    def unit(self, rows: np.ndarray | int) -> np.ndarray:
        """The unit vectors of `rows` (one row: a vector)."""
        return self._vectors[rows] / self._norms[rows]

    def rows(self, ids: Iterable[str]) -> np.ndarray:
        """Row index of each id, -1 when it has no vector."""
        return np.fromiter((self._row.get(i, -1) for i in ids), dtype=np.int64)

    def model_of(self, memory_id: str) -> str | None:
        row = self._row.get(memory_id, -1)
        return None if row < 0 else str(self.models[row])

    def rows_of_model(self, ids: Iterable[str], model: str | None) -> np.ndarray:
        rows = self.rows(ids)
        rows = rows[rows >= 0]
        if model is None:
            return rows[:0]
        return rows[self.models[rows] == model]

    def centroid(self, ids: Iterable[str], model: str | None) -> np.ndarray | None:
        rows = self.rows_of_model(ids, model)
        if rows.size == 0:
            return None
        mean = self.unit(rows).mean(axis=0)
        norm = float(np.linalg.norm(mean))
        return None if norm == 0 else mean / norm

    def cosine(self, memory_id: str, centroid: np.ndarray | None) -> float | None:
        row = self._row.get(memory_id, -1)
        if row < 0 or centroid is None:
            return None
        return float(self.unit(row) @ centroid)


def memory_facts(memories: pa.Table) -> pa.Table:
    """Per row: what the analyses of this module read, with the context key and markers decoded."""
    with duck() as con:
        con.register(
            "m",
            memories.select(
                [
                    "id",
                    "namespace",
                    "tier",
                    "kind",
                    "content",
                    "importance",
                    "zone",
                    "superseded_by",
                    "pinned",
                    "tags",
                    "metadata",
                ]
            ),
        )
        return con.sql(
            """
            SELECT id, namespace, tier, kind, content, importance, zone, superseded_by, pinned, tags,
                coalesce(json_extract_string(metadata, '$.conversation_id'), '') || chr(31)
                    || coalesce(json_extract_string(metadata, '$.project_id'), '') AS context,
                json_extract(metadata, '$.semantic')::VARCHAR AS semantic,
                json_extract(metadata, '$.semanticCompressed') IS NOT NULL AS compressed,
                zone = 'active' AND superseded_by IS NULL AS live,
                json_extract(metadata, '$.contradictionWith') IS NOT NULL AS contradicted,
                zone <> 'purge_queue' AND superseded_by IS NULL AS evidence
            FROM m ORDER BY id
            """
        ).to_arrow_table()


def rows_by_id(facts: pa.Table, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    table = facts.filter(pc.is_in(facts["id"], pa.array(wanted, pa.string())))
    return {row["id"]: row for row in table.to_pylist()}


def contradiction_partners(memories: pa.Table, links: pa.Table) -> dict[str, set[str]]:
    """id -> the ids it contradicts or is contradicted by (`contradicts` links either way, contradictionWith)."""
    with duck() as con:
        con.register("m", memories.select(["id", "metadata"]))
        con.register("l", links.select(["src_id", "dst_id", "kind"]))
        edges = con.sql(
            """
            WITH flagged AS (
                SELECT id, unnest(from_json(json_extract(metadata, '$.contradictionWith'), '["VARCHAR"]')) AS other
                FROM m WHERE json_extract(metadata, '$.contradictionWith') IS NOT NULL
                  AND json_type(json_extract(metadata, '$.contradictionWith')) = 'ARRAY'
            )
            SELECT src_id AS a, dst_id AS b FROM l WHERE kind = 'contradicts'
            UNION SELECT id, other FROM flagged WHERE other IS NOT NULL
            """
        ).fetchall()
        partners: dict[str, set[str]] = {}
        for a, b in edges:
            if a != b:
                partners.setdefault(a, set()).add(b)
                partners.setdefault(b, set()).add(a)
        return partners
