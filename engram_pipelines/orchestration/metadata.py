"""Metadata helpers: what a data team reads on an asset's page (schema, row counts, samples)."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core import mdtext

_ARROW_TO_TYPE = {
    "string": "string",
    "large_string": "string",
    "double": "float64",
    "float": "float32",
    "int64": "int64",
    "int32": "int32",
    "bool": "bool",
}


def column_schema(schema: pa.Schema, descriptions: dict[str, str] | None = None) -> dg.TableSchema:
    descriptions = descriptions or {}
    columns = []
    for field in schema:
        type_name = _ARROW_TO_TYPE.get(str(field.type), str(field.type))
        columns.append(dg.TableColumn(field.name, type_name, description=descriptions.get(field.name)))
    return dg.TableSchema(columns=columns)


def sample_markdown(table: pa.Table, columns: list[str], limit: int = 10) -> dg.MetadataValue:
    """A small Markdown table of the first rows (long text cut) for the asset's page."""
    if table.num_rows == 0:
        return dg.MetadataValue.md("_(no rows)_")
    rows = table.select(columns).slice(0, limit).to_pylist()
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
    body = "".join("| " + " | ".join(_cell(r[c]) for c in columns) + " |\n" for r in rows)
    return dg.MetadataValue.md(head + body)


def value_counts(table: pa.Table, column: str) -> dict[str, int]:
    """How often each value of `column` occurs (for counts by outcome, rule, op... on an asset's page)."""
    if table.num_rows == 0:
        return {}
    return {str(item["values"]): int(item["counts"]) for item in pc.value_counts(table[column]).to_pylist()}


def _cell(value: Any) -> str:
    return mdtext.inline(value, 80)


def standard(table_schema: pa.Schema, row_count: int, **extra: Any) -> dict[str, Any]:
    return {"dagster/column_schema": column_schema(table_schema), "dagster/row_count": row_count, **extra}


# Output column -> upstream asset -> the upstream columns its value is computed from.
Lineage = dict[str, dict[str, list[str]]]


def column_lineage(deps: Lineage) -> dg.TableColumnLineage:
    """Which upstream columns each output column derives from (drawn by the UI where it supports it).

    A column lists the inputs its value is computed from, not the columns that only decide which rows appear:
    every column would list those, and the drawing would say nothing. Only declared columns can be named, so
    what comes from the snapshot's `links` table (written by memory_snapshot, not in its column schema) is
    left out; tests/orchestration/test_pipeline.py checks every named column against the upstream's schema.
    """
    return dg.TableColumnLineage(
        deps_by_column={
            column: [
                dg.TableColumnDep(asset_key=dg.AssetKey(upstream), column_name=name)
                for upstream, names in sources.items()
                for name in names
            ]
            for column, sources in deps.items()
        }
    )
