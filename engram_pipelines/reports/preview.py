"""What tonight's nightly would change, per analysis, namespace and review class; nothing is written.

`engram-pipelines preview` runs the snapshot and every analysis into a scratch warehouse (the `preview` job),
then reads their proposals as the change-set step would (the analysis switches, the volume guard) without
composing, storing or applying a change set. The counts are of intended changes (intents): one per row and
analysis, before several analyses' writes to one row are folded into one.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from engram_pipelines.changes.propose import guarded_intents
from engram_pipelines.config.model import ANALYSES, Config
from engram_pipelines.core.duck import duck
from engram_pipelines.warehouse.tables import Warehouse


@dataclass
class NightPreview:
    as_of: dt.date
    rows: list[dict[str, Any]]  # analysis, namespace, review_class, op, changes
    held: list[dict[str, Any]] = field(default_factory=list)

    def by_analysis(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for row in self.rows:
            klass = out.setdefault(row["analysis"], {})
            klass[row["review_class"]] = klass.get(row["review_class"], 0) + row["changes"]
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of.isoformat(),
            "by_analysis": self.by_analysis(),
            "rows": self.rows,
            "held": self.held,
        }


def night_preview(warehouse: Warehouse, as_of: dt.date, config: Config) -> NightPreview:
    """The proposals of a `preview` run in `warehouse`, through the switches and the volume guard."""
    intents, held = guarded_intents(warehouse, as_of, list(ANALYSES), config)
    with duck() as con:
        con.register("i", intents.select(["source", "namespace", "review_class", "op", "params"]))
        rows = con.sql(
            """
            SELECT source AS analysis, namespace, review_class,
                CASE WHEN op = 'move_zone' THEN 'move_zone:' || json_extract_string(params, '$.to') ELSE op END AS op,
                count(*) AS changes
            FROM i GROUP BY ALL ORDER BY analysis, namespace, review_class, op
            """
        ).to_arrow_table()
        return NightPreview(as_of, rows.to_pylist() if rows.num_rows else [], held)
