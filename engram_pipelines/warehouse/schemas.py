"""pandera schemas of the warehouse tables, and row-level validation that names row, field and reason."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pandas as pd
import pandera.pandas as pa
import pyarrow as pa_arrow

from engram_pipelines.core import jsontext, records

_TS = pd.DatetimeTZDtype(unit="us", tz="UTC")
# Text stays in Arrow on its way to pandas: no Python string per value (the conversion was a third of the
# validation at 1M rows) and pandera's string checks run as Arrow kernels.
_TEXT = pd.StringDtype("pyarrow")


def _json_kind(expected: type) -> pa.Check:
    """Strict JSON (RFC 8259) of the expected kind, read by orjson: what every reader downstream can parse.

    The standard library passes NaN and lone surrogate escapes (which DuckDB's JSON functions refuse), and its
    RecursionError on deep nesting reached pandera as a failure without a row index, so the row went through;
    orjson refuses all three with a ValueError, and is ~4x faster over a million rows."""

    def check(values: pd.Series) -> pd.Series:
        def ok(text: str) -> bool:
            try:
                value = orjson.loads(text)
            except (TypeError, ValueError):
                return False
            return isinstance(value, expected) and jsontext.depth(value) <= jsontext.MAX_DEPTH

        return pd.Series([ok(text) for text in values], index=values.index, dtype=bool)

    return pa.Check(
        check,
        name=f"json_{expected.__name__}",
        error=f"must be a JSON {expected.__name__} nested at most {jsontext.MAX_DEPTH} levels",
    )


MEMORY_SNAPSHOT_SCHEMA = pa.DataFrameSchema(
    {
        "id": pa.Column(_TEXT, pa.Check.str_length(min_value=1), unique=True),
        "namespace": pa.Column(_TEXT, pa.Check.str_length(min_value=1)),
        "tier": pa.Column(_TEXT, pa.Check.isin(records.TIERS)),
        "kind": pa.Column(_TEXT, pa.Check.isin(records.KINDS)),
        "content": pa.Column(_TEXT, pa.Check.str_length(min_value=1)),
        "embedding_model": pa.Column(_TEXT, nullable=True),
        "embedded_content_sha": pa.Column(_TEXT, nullable=True),
        "importance": pa.Column(float, pa.Check.in_range(0.0, 1.0)),
        "score": pa.Column(float, pa.Check.in_range(0.0, 1.0), nullable=True),
        "access_count": pa.Column("int64", pa.Check.ge(0)),
        "last_accessed_at": pa.Column(_TS, nullable=True),
        "created_at": pa.Column(_TS),
        "updated_at": pa.Column(_TS),
        "version": pa.Column("int64", pa.Check.ge(1)),
        "pinned": pa.Column(bool),
        "zone": pa.Column(_TEXT, pa.Check.isin(records.ZONES)),
        "zone_since": pa.Column(_TS, nullable=True),
        "superseded_by": pa.Column(_TEXT, nullable=True),
        "stale": pa.Column(bool),
        "tags": pa.Column(_TEXT, _json_kind(list)),
        "metadata": pa.Column(_TEXT, _json_kind(dict)),
    },
    name="memory_snapshot",
    description="One row per memory as the live store held it at snapshot time (embedding checked apart).",
    strict=False,
    coerce=False,
)

LINK_SNAPSHOT_SCHEMA = pa.DataFrameSchema(
    {
        "namespace": pa.Column(str),
        "src_id": pa.Column(str, pa.Check.str_length(min_value=1)),
        "dst_id": pa.Column(str, pa.Check.str_length(min_value=1)),
        "kind": pa.Column(str, pa.Check.isin(records.LINK_KINDS)),
        "weight": pa.Column(float),
        "origin": pa.Column(str),
    },
    name="link_snapshot",
    strict=False,
)


class SnapshotSchemaError(ValueError):
    """A snapshot batch fails the schema as a whole (not row by row): a defect to fix, not data to quarantine."""


_PROBLEMS_KEY = b"engram.row_problems"


def with_row_problems(batch: pa_arrow.RecordBatch, problems: dict[int, list[str]]) -> pa_arrow.RecordBatch:
    """`batch` carrying problems its reader found in rows it could not type (see `memory_row_problems`)."""
    encoded = json.dumps({str(k): v for k, v in problems.items()}).encode()
    return batch.replace_schema_metadata({**(batch.schema.metadata or {}), _PROBLEMS_KEY: encoded})


def memory_row_problems(batch: pa_arrow.RecordBatch) -> dict[int, list[str]]:
    """Row position -> reasons ("field: reason") for every invalid row of a snapshot batch, with those the
    store's reader found (`with_row_problems`)."""
    problems: dict[int, list[str]] = {}
    carried = (batch.schema.metadata or {}).get(_PROBLEMS_KEY)
    if carried:
        for row, reasons in json.loads(carried).items():
            problems.setdefault(int(row), []).extend(reasons)
    frame = batch.drop_columns(["embedding"]).to_pandas(types_mapper={pa_arrow.string(): _TEXT}.get)
    try:
        MEMORY_SNAPSHOT_SCHEMA.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as exc:
        cases = exc.failure_cases
        for column, check, case, index in zip(
            cases["column"], cases["check"], cases["failure_case"], cases["index"], strict=True
        ):
            if index is None or pd.isna(index):
                # A failure of no row (a column's type, a check that raised) cannot be quarantined row by row,
                # and skipping it would let the whole batch through unchecked.
                raise SnapshotSchemaError(
                    f"snapshot batch: column {column!r} fails {check}: {_shown(case)}"
                ) from exc
            reason = f"{column}: {_describe(check, case)}"
            if check == "not_nullable" and any(
                r.startswith(f"{column}: ") for r in problems.get(int(index), [])
            ):
                continue  # the reader already said why the value is missing
            problems.setdefault(int(index), []).append(reason)
    for position, reason in _embedding_problems(batch).items():
        problems.setdefault(position, []).append(reason)
    return problems


def _describe(check: str, case: object) -> str:
    if check == "not_nullable":
        return "is missing (null)"
    if check == "field_uniqueness":
        return f"duplicate value {_shown(case)}"
    if check.startswith("must "):
        return f"{_shown(case)} {check}"
    return f"value {_shown(case)} fails {check}"


def _shown(case: object, limit: int = 80) -> str:
    """The offending value as a reason quotes it: a long text is cut (the row itself is in the quarantine)."""
    text = repr(case)
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _embedding_problems(batch: pa_arrow.RecordBatch) -> dict[int, str]:
    """Embeddings must be finite. (A vector missing or of another size, next to a model name, is not a problem of
    the row: the snapshot drops it and the text is embedded, `snapshot._without_unusable_vectors`.)"""
    out: dict[int, str] = {}
    embedding = batch.column("embedding")
    dim = embedding.type.list_size
    present = embedding.is_valid().to_numpy(zero_copy_only=False)
    values = embedding.values.slice(embedding.offset * dim, len(embedding) * dim).to_numpy(
        zero_copy_only=False
    )
    finite = np.isfinite(values.reshape(len(embedding), dim)).all(axis=1)
    for position in np.flatnonzero(present & ~finite):
        out[int(position)] = "embedding: contains NaN or infinity"
    return out
