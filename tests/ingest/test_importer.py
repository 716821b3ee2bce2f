"""Tests of the JSON Lines import parser (engram_pipelines.ingest.parse)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from engram_pipelines.core import records
from engram_pipelines.ingest.parse import (
    DEFAULT_EMBEDDING_MODEL,
    LINE_FIELD,
    ParseResult,
    Reject,
    derive_id,
    import_schema,
    parse_jsonl,
    write_rejects,
)
from tests.support.paths import DATA

MIXED = DATA / "import_mixed.jsonl"
UTC = dt.UTC
NO_ZONE = "has no zone (add 'Z' or an offset like '+02:00')"
# What a vector of another size is told (the setting that decides, and the way out).
WRONG_SIZE = (
    ": the store holds {dim}-d vectors (the config's snapshot.embedding_dim); to keep these, set it to {got} in "
    "a fresh store, or leave `embedding` out and the nightly embeds the text"
)

# Good lines of import_mixed.jsonl (1-based line numbers) and the id each must get: explicit ids as
# written, derived ids as None (computed from the line in the test).
GOOD_LINES: dict[int, str | None] = {
    1: "alpha-001",
    2: None,
    4: None,
    7: None,
    9: None,
    13: "beta-007",
    16: None,
    19: None,
    21: None,
    24: None,
    25: None,
    26: "alpha-026",
}

# Every problem of every bad line of import_mixed.jsonl, in report order: (line, field, reason).
EXPECTED_REJECTS: list[tuple[int, str, str]] = [
    (3, LINE_FIELD, "invalid JSON: Expecting ',' delimiter (column 57)"),
    (6, LINE_FIELD, "not a JSON object (got an array)"),
    (8, "content", "required field is missing"),
    (8, "created_at", f"timestamp '2024-03-01T09:00:00' {NO_ZONE}"),
    (10, "namespcae", "unknown field (did you mean 'namespace'?)"),
    (10, "namespace", "required field is missing and no default namespace was given"),
    (11, "created_at", 'not an ISO-8601 timestamp: "2024-13-45T00:00:00Z"'),
    (11, "tier", 'must be one of stm, ltm, got "mtm"'),
    (11, "kind", 'must be one of episodic, semantic, summary, block, got "note"'),
    (11, "importance", "must be within 0..1, got 1.5"),
    (12, "importance", "must be a number in 0..1, got true"),
    (12, "access_count", "must be a non-negative integer, got -1"),
    (12, "pinned", 'must be true or false, got "yes"'),
    (14, "embedding", "value at index 2 is NaN or infinite"),
    (15, "last_accessed_at", f"timestamp '2024-03-08 10:00:00' {NO_ZONE}"),
    (15, "embedding", "must have exactly 384 values, got 3" + WRONG_SIZE.format(dim=384, got=3)),
    (17, "id", "duplicate id (first seen on line 1)"),
    (18, "id", 'must be a non-empty string, got ""'),
    (18, "content", 'must be a non-empty string, got ""'),
    (18, "tags", 'must be a list of strings, got "not-a-list"'),
    (18, "metadata", 'must be a JSON object, got "[]"'),
    (20, "created_at", "required field is missing"),
    (20, "embedding_model", "must be a non-empty string, got 7"),
    (20, "conversation_id", "must be a non-empty string, got 42"),
    (22, "namespace", "required field is missing and no default namespace was given"),
    (23, "id", "duplicate id (first seen on line 2)"),
]


def mixed_lines() -> list[str]:
    return MIXED.read_text(encoding="utf-8").split("\n")[:-1]  # the file ends with a newline


def mixed_record(line: int) -> dict[str, Any]:
    return json.loads(mixed_lines()[line - 1])


def parse_all(path: Path, **options: Any) -> ParseResult:
    """All batches of a parse merged into one result."""
    results = list(parse_jsonl(path, **options))
    return ParseResult(
        rows=pa.concat_tables([result.rows for result in results]),
        rejects=[reject for result in results for reject in result.rejects],
        lines_read=sum(result.lines_read for result in results),
    )


def write_jsonl(tmp_path: Path, *lines: str | dict[str, Any], name: str = "import.jsonl") -> Path:
    path = tmp_path / name
    texts = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    path.write_text("".join(text + "\n" for text in texts), encoding="utf-8")
    return path


_memory_numbers = itertools.count(1)


def memory(**fields: Any) -> dict[str, Any]:
    """A valid line with `fields` overriding its defaults; the content differs per call so that derived
    ids do not collide."""
    base: dict[str, Any] = {
        "namespace": "ns",
        "content": f"memory {next(_memory_numbers)}",
        "created_at": "2024-01-01T00:00:00Z",
    }
    base.update(fields)
    return base


def problems(result: ParseResult) -> list[tuple[int, str, str]]:
    return [(reject.line, reject.field, reject.reason) for reject in result.rejects]


def expected_id(line: int) -> str:
    explicit = GOOD_LINES[line]
    if explicit is not None:
        return explicit
    record = mixed_record(line)
    return derive_id(record["namespace"], record["content"], dt.datetime.fromisoformat(record["created_at"]))


# --- the mixed file ----------------------------------------------------------------------------------------


def test_mixed_file_accepts_every_good_line() -> None:
    result = parse_all(MIXED)

    rows = result.rows.to_pylist()
    assert [row["id"] for row in rows] == [expected_id(line) for line in GOOD_LINES]
    assert [row["content"] for row in rows] == [mixed_record(line)["content"] for line in GOOD_LINES]
    assert [row["namespace"] for row in rows] == [mixed_record(line)["namespace"] for line in GOOD_LINES]
    assert {row["namespace"] for row in rows} == {"agent-alpha", "agent-beta"}


def test_mixed_file_reports_every_bad_line_with_line_field_and_reason() -> None:
    result = parse_all(MIXED)

    assert problems(result) == EXPECTED_REJECTS
    lines = mixed_lines()
    assert all(reject.raw == lines[reject.line - 1] for reject in result.rejects)


def test_mixed_file_counts_skip_the_blank_line() -> None:
    result = parse_all(MIXED)

    assert result.lines_read == 25  # 26 lines, line 5 is blank
    assert result.rejected_lines == 13
    assert result.rows.num_rows + result.rejected_lines == result.lines_read


def test_mixed_file_values_and_defaults() -> None:
    rows = {row["id"]: row for row in parse_all(MIXED).rows.to_pylist()}

    full = rows["alpha-001"]
    assert (full["tier"], full["kind"], full["importance"], full["access_count"], full["pinned"]) == (
        "ltm",
        "semantic",
        0.9,
        7,
        True,
    )
    assert full["last_accessed_at"] == dt.datetime(2024, 3, 10, 17, 30, tzinfo=UTC)
    assert full["tags"] == '["deploy","process"]'
    assert full["metadata"] == '{"a":{"y":2,"z":1},"b":1,"source":"chat"}'  # keys sorted, nested too
    assert full["embedding_model"] == "all-MiniLM-L6-v2"

    minimal = rows[expected_id(2)]
    assert (minimal["tier"], minimal["kind"], minimal["importance"], minimal["access_count"]) == (
        "stm",
        "episodic",
        0.5,
        0,
    )
    assert (minimal["pinned"], minimal["tags"], minimal["metadata"]) == (False, "[]", "{}")
    assert minimal["embedding"] is None and minimal["embedding_model"] is None
    assert minimal["last_accessed_at"] is None
    assert minimal["created_at"] == dt.datetime(2024, 3, 1, 9, 15, tzinfo=UTC)  # 11:15+02:00 in UTC

    with_ids = rows[expected_id(4)]
    assert json.loads(with_ids["metadata"]) == {
        "conversation_id": "conv-9",
        "project_id": "proj-infra",
        "severity": "high",
    }
    assert with_ids["embedding_model"] == DEFAULT_EMBEDDING_MODEL  # an embedding without a model name

    accessed_before_created = rows[expected_id(7)]
    assert accessed_before_created["last_accessed_at"] < accessed_before_created["created_at"]
    assert rows[expected_id(9)]["content"] == "Prefers café ☕ and metric units – always."
    assert rows[expected_id(9)]["created_at"] == dt.datetime(2024, 1, 15, 13, 0, tzinfo=UTC)
    assert rows[expected_id(21)]["created_at"] == dt.datetime(2024, 5, 5, 12, 0, 0, 123456, tzinfo=UTC)


def test_a_file_without_lifecycle_fields_imports_every_row_active_and_visible() -> None:
    # An agent's export carries no pipeline state: every row gets the store's defaults for a new row.
    for row in parse_all(MIXED).rows.to_pylist():
        assert (row["zone"], row["zone_since"], row["stale"], row["score"], row["superseded_by"]) == (
            "active",
            None,
            False,
            None,
            None,
        )
        assert row["updated_at"] == row["created_at"]
        assert row["embedded_content_sha"] is None


def test_default_namespace_fills_only_lines_without_one() -> None:
    result = parse_all(MIXED, default_namespace="imported-ns")

    rows = result.rows.to_pylist()
    by_content = {row["content"]: row for row in rows}
    assert by_content["Memory without a namespace."]["namespace"] == "imported-ns"  # line 22
    assert {row["namespace"] for row in rows} == {"agent-alpha", "agent-beta", "imported-ns"}
    assert [r for r in problems(result) if r[0] == 22] == []
    # The typo line is still refused: a default must not paper over a misspelt field.
    assert (10, "namespcae", "unknown field (did you mean 'namespace'?)") in problems(result)
    assert result.rejected_lines == 12


def test_rows_have_the_import_schema() -> None:
    rows = parse_all(MIXED).rows
    full = records.memory_schema(384)

    assert rows.schema == import_schema(384)
    assert rows.column_names == [
        "id",
        "namespace",
        "tier",
        "kind",
        "content",
        "embedding",
        "embedding_model",
        "embedded_content_sha",
        "importance",
        "score",
        "access_count",
        "last_accessed_at",
        "created_at",
        "updated_at",
        "pinned",
        "zone",
        "zone_since",
        "superseded_by",
        "stale",
        "tags",
        "metadata",
    ]
    for field in rows.schema:
        assert field.equals(full.field(field.name))
    assert rows.schema.field("created_at").type == pa.timestamp("us", tz="UTC")
    assert set(full.names) - set(rows.column_names) == {"version"}  # the store's CAS counter starts at 1


# --- ids -------------------------------------------------------------------------------------------------


def test_derived_ids_are_deterministic_across_parses() -> None:
    first = parse_all(MIXED).rows.column("id").to_pylist()
    second = parse_all(MIXED).rows.column("id").to_pylist()

    assert first == second
    derived = [memory_id for memory_id in first if memory_id.startswith("m-")]
    assert len(derived) == 9
    assert all(re.fullmatch(r"m-[0-9a-f]{24}", memory_id) for memory_id in derived)


def test_derived_id_uses_the_canonical_instant_and_the_namespace() -> None:
    instant = dt.datetime(2024, 3, 1, 9, 15, tzinfo=UTC)
    same_instant = dt.datetime(2024, 3, 1, 11, 15, tzinfo=dt.timezone(dt.timedelta(hours=2)))

    assert derive_id("ns", "text", instant) == derive_id("ns", "text", same_instant)
    assert derive_id("ns", "text", instant) != derive_id("other", "text", instant)
    assert derive_id("ns", "text", instant) != derive_id("ns", "text2", instant)
    assert derive_id("a|b", "c", instant) != derive_id("a", "b|c", instant)


def test_derived_ids_differ_between_namespaces_for_the_same_content() -> None:
    rows = parse_all(MIXED).rows.to_pylist()
    same_content = [row for row in rows if row["content"] == "User asked to keep answers short."]

    assert {row["namespace"] for row in same_content} == {"agent-alpha", "agent-beta"}
    assert len({row["id"] for row in same_content}) == 2


def test_a_rejected_line_still_owns_its_id(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, memory(id="x", importance=2), memory(id="x"))

    result = parse_all(path)

    assert problems(result) == [
        (1, "importance", "must be within 0..1, got 2"),
        (2, "id", "duplicate id (first seen on line 1)"),
    ]


def test_explicit_id_colliding_with_a_derived_id_is_a_duplicate(tmp_path: Path) -> None:
    derived = derive_id("ns", "a memory", dt.datetime(2024, 1, 1, tzinfo=UTC))
    path = write_jsonl(tmp_path, memory(content="a memory"), memory(id=derived))

    assert problems(parse_all(path)) == [(2, "id", "duplicate id (first seen on line 1)")]


# --- batching ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [1, 2, 7, 24, 25, 1000])
def test_batching_gives_the_same_result_as_one_batch(batch_size: int) -> None:
    whole = list(parse_jsonl(MIXED))
    assert len(whole) == 1

    batches = list(parse_jsonl(MIXED, batch_size=batch_size))
    merged = parse_all(MIXED, batch_size=batch_size)

    assert merged.rows.equals(whole[0].rows)
    assert merged.rejects == whole[0].rejects
    assert merged.lines_read == whole[0].lines_read
    assert all(batch.lines_read <= batch_size for batch in batches)
    assert len(batches) == -(-whole[0].lines_read // batch_size)
    assert all(batch.rows.schema == import_schema(384) for batch in batches)


def test_batches_report_only_their_own_lines() -> None:
    batches = list(parse_jsonl(MIXED, batch_size=10))

    assert [batch.lines_read for batch in batches] == [10, 10, 5]
    # Non-blank lines 1-10 are file lines 1-11 (line 5 is blank).
    assert {reject.line for reject in batches[0].rejects} == {3, 6, 8, 10, 11}
    assert {reject.line for reject in batches[1].rejects} == {12, 14, 15, 17, 18, 20}
    assert {reject.line for reject in batches[2].rejects} == {22, 23}


def test_parsing_is_lazy() -> None:
    batches = parse_jsonl(MIXED, batch_size=5)
    first = next(batches)

    assert first.lines_read == 5
    batches.close()


# --- embeddings --------------------------------------------------------------------------------------------


def test_embeddings_round_trip_as_float32() -> None:
    result = parse_all(MIXED)
    embedding = result.rows.column("embedding").combine_chunks()
    ids = result.rows.column("id").to_pylist()

    assert embedding.type == pa.list_(pa.float32(), 384)
    for line in GOOD_LINES:
        given = mixed_record(line).get("embedding")
        stored = embedding[ids.index(expected_id(line))]
        if given is None:
            assert not stored.is_valid
        else:
            expected = np.array(given, dtype=np.float32)
            actual = stored.values.to_numpy()
            assert actual.dtype == np.float32
            np.testing.assert_array_equal(actual, expected)
    assert embedding.null_count == 9  # only lines 1, 4 and 26 carry an embedding


def test_embedding_checks(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(embedding=[0.1, 0.2, 0.3, 0.4], embedding_model="m"),
        memory(embedding=[0.1, float("inf"), 0.3, 0.4]),
        memory(embedding=[0.1, 0.2, 1e39, 0.4]),
        memory(embedding=[0.1, 0.2, 0.3, 10**400]),
        memory(embedding=[0.1, "0.2", 0.3, 0.4]),
        memory(embedding=[0.1, 0.2, True, 0.4]),
        memory(embedding=[0.1, 0.2, [0.3], 0.4]),
        memory(embedding="0.1,0.2,0.3,0.4"),
        memory(embedding=[]),
        memory(embedding=[-1e-3, 0, 3.4e38, -1]),
    )

    result = parse_all(path, embedding_dim=4)

    assert problems(result) == [
        (2, "embedding", "value at index 1 is NaN or infinite"),
        (3, "embedding", "value at index 2 is too large for float32"),
        (4, "embedding", "value at index 3 is too large for float32"),
        (5, "embedding", 'value at index 1 is not a number: "0.2"'),
        (6, "embedding", "value at index 2 is not a number: true"),
        (7, "embedding", "value at index 2 is not a number: [0.3]"),
        (8, "embedding", 'must be a list of numbers or null, got "0.1,0.2,0.3,0.4"'),
        (9, "embedding", "must have exactly 4 values, got 0" + WRONG_SIZE.format(dim=4, got=0)),
    ]
    vectors = result.rows.column("embedding").to_pylist()
    assert vectors[0] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    np.testing.assert_array_equal(
        np.array(vectors[1], dtype=np.float32), np.array([-1e-3, 0, 3.4e38, -1], dtype=np.float32)
    )


def test_embedding_model_without_embedding_is_kept(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, memory(embedding_model="m"), memory(embedding=None))

    rows = parse_all(path, embedding_dim=4).rows.to_pylist()

    assert [(row["embedding"], row["embedding_model"]) for row in rows] == [(None, "m"), (None, None)]


# --- field rules -------------------------------------------------------------------------------------------


def test_optional_nulls_mean_default_but_required_nulls_are_errors(tmp_path: Path) -> None:
    nulls = dict.fromkeys(
        ["id", "tier", "kind", "importance", "access_count", "last_accessed_at", "tags", "pinned", "metadata"]
        + ["updated_at", "embedded_content_sha", "zone", "zone_since", "stale", "score", "superseded_by"]
    )
    path = write_jsonl(
        tmp_path,
        memory(**nulls, embedding=None, embedding_model=None, conversation_id=None, project_id=None),
        memory(content=None, created_at=None),
    )

    result = parse_all(path, embedding_dim=4)

    row = result.rows.to_pylist()[0]
    assert (row["tier"], row["kind"], row["importance"], row["access_count"]) == ("stm", "episodic", 0.5, 0)
    assert (row["tags"], row["pinned"], row["metadata"]) == ("[]", False, "{}")
    assert (row["zone"], row["zone_since"], row["stale"], row["score"], row["superseded_by"]) == (
        "active",
        None,
        False,
        None,
        None,
    )
    assert (row["updated_at"], row["embedded_content_sha"]) == (row["created_at"], None)
    assert problems(result) == [
        (2, "content", "must be a non-empty string, got null"),
        (2, "created_at", "must be an ISO-8601 timestamp string with a zone, got null"),
    ]


def test_number_rules(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(importance=0, access_count=0),
        memory(importance=1.0, access_count=2**63 - 1),
        memory(importance=-0.01),
        memory(importance="0.5"),
        '{"namespace": "ns", "content": "c", "created_at": "2024-01-01T00:00:00Z", "importance": NaN}',
        memory(access_count=3.0),
        memory(access_count=2**63),
        memory(access_count=False),
    )

    result = parse_all(path)

    assert [row["importance"] for row in result.rows.to_pylist()] == [0.0, 1.0]
    assert result.rows.column("access_count").to_pylist() == [0, 2**63 - 1]
    assert problems(result) == [
        (3, "importance", "must be within 0..1, got -0.01"),
        (4, "importance", 'must be a number in 0..1, got "0.5"'),
        (5, "importance", "must be within 0..1, got NaN"),
        (6, "access_count", "must be a non-negative integer, got 3.0"),
        (7, "access_count", "must be a non-negative integer, got 9223372036854775808"),
        (8, "access_count", "must be a non-negative integer, got false"),
    ]


def test_timestamp_rules(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(created_at="2024-06-01T12:00:00-07:00", last_accessed_at="2024-06-01T20:00:00.5+01:00"),
        memory(created_at="2024-06-01"),
        memory(created_at=1717243200),
        memory(created_at="0001-01-01T00:00:00+01:00"),
        memory(last_accessed_at="soon"),
    )

    result = parse_all(path)

    row = result.rows.to_pylist()[0]
    assert row["created_at"] == dt.datetime(2024, 6, 1, 19, 0, tzinfo=UTC)
    assert row["last_accessed_at"] == dt.datetime(2024, 6, 1, 19, 0, 0, 500000, tzinfo=UTC)
    assert problems(result) == [
        (2, "created_at", f"timestamp '2024-06-01' {NO_ZONE}"),
        (3, "created_at", "must be an ISO-8601 timestamp string with a zone, got 1717243200"),
        (4, "created_at", 'not an ISO-8601 timestamp: "0001-01-01T00:00:00+01:00"'),
        (5, "last_accessed_at", 'not an ISO-8601 timestamp: "soon"'),
    ]


def test_lifecycle_fields_are_read(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(
            id="archived",
            zone="archived",
            zone_since="2024-02-01T01:00:00+01:00",
            stale=True,
            score=0.125,
            superseded_by="canonical",
            updated_at="2024-02-01T00:00:00.000001Z",
            embedding=[0.5, 0.5, 0.5, 0.5],
            embedded_content_sha="0123456789abcdef",
        ),
        memory(id="queued", zone="purge_queue", score=0),
        memory(id="scored", zone="active", zone_since="2024-01-02T00:00:00Z", score=1, stale=False),
        # Kept without a vector, like embedding_model: the embedding step replaces both when it embeds.
        memory(id="hash-only", embedded_content_sha="0123456789abcdef"),
    )

    result = parse_all(path, embedding_dim=4)

    assert problems(result) == []
    rows = {row["id"]: row for row in result.rows.to_pylist()}
    archived = rows["archived"]
    assert (archived["zone"], archived["stale"], archived["score"], archived["superseded_by"]) == (
        "archived",
        True,
        0.125,
        "canonical",
    )
    assert archived["zone_since"] == dt.datetime(2024, 2, 1, tzinfo=UTC)
    assert archived["updated_at"] == dt.datetime(2024, 2, 1, 0, 0, 0, 1, tzinfo=UTC)
    assert archived["embedded_content_sha"] == "0123456789abcdef"
    assert (rows["queued"]["zone"], rows["queued"]["zone_since"], rows["queued"]["score"]) == (
        "purge_queue",
        None,  # no zone_since: retention counts the time in the zone from updated_at
        0.0,
    )
    assert (
        rows["scored"]["zone_since"] == dt.datetime(2024, 1, 2, tzinfo=UTC) and rows["scored"]["score"] == 1.0
    )
    assert (rows["hash-only"]["embedding"], rows["hash-only"]["embedded_content_sha"]) == (
        None,
        "0123456789abcdef",
    )


def test_lifecycle_rules(tmp_path: Path) -> None:
    since = "2024-02-01T00:00:00Z"
    path = write_jsonl(
        tmp_path,
        memory(zone="deleted"),
        memory(zone="Archived", zone_since=since),
        memory(zone_since=since),  # a time without the zone it dates
        memory(zone=None, zone_since=since),
        memory(zone="archived", zone_since="2024-02-01"),
        memory(zone="archived", zone_since=1706745600),
        memory(stale="true"),
        memory(stale=1),
        memory(score=1.5),
        memory(score="0.3"),
        memory(score=True),
        '{"namespace": "ns", "content": "c", "created_at": "2024-01-01T00:00:00Z", "score": NaN}',
        memory(superseded_by=""),
        memory(superseded_by=42),
        memory(updated_at="2024-03-01 10:00:00"),
        memory(embedded_content_sha=["0123"]),
        memory(zone="purge_queue", zone_since=since, stale=True, score=0.01, superseded_by="m-1"),
        memory(zone="gone", stale="no", score=-1, superseded_by=" "),  # every problem of a line is reported
    )

    result = parse_all(path)

    assert problems(result) == [
        (1, "zone", 'must be one of active, archived, purge_queue, got "deleted"'),
        (2, "zone", 'must be one of active, archived, purge_queue, got "Archived"'),
        (3, "zone_since", "given without zone (the zone it dates)"),
        (4, "zone_since", "given without zone (the zone it dates)"),
        (5, "zone_since", f"timestamp '2024-02-01' {NO_ZONE}"),
        (6, "zone_since", "must be an ISO-8601 timestamp string with a zone, got 1706745600"),
        (7, "stale", 'must be true or false, got "true"'),
        (8, "stale", "must be true or false, got 1"),
        (9, "score", "must be within 0..1, got 1.5"),
        (10, "score", 'must be a number in 0..1, got "0.3"'),
        (11, "score", "must be a number in 0..1, got true"),
        (12, "score", "must be within 0..1, got NaN"),
        (13, "superseded_by", 'must be a non-empty string, got ""'),
        (14, "superseded_by", "must be a non-empty string, got 42"),
        (15, "updated_at", f"timestamp '2024-03-01 10:00:00' {NO_ZONE}"),
        (16, "embedded_content_sha", 'must be a non-empty string, got ["0123"]'),
        (18, "zone", 'must be one of active, archived, purge_queue, got "gone"'),
        (18, "stale", 'must be true or false, got "no"'),
        (18, "score", "must be within 0..1, got -1"),
        (18, "superseded_by", 'must be a non-empty string, got " "'),
    ]
    assert result.rejected_lines == 17
    good = result.rows.to_pylist()
    assert [(row["zone"], row["stale"], row["superseded_by"]) for row in good] == [
        ("purge_queue", True, "m-1")
    ]


def test_string_rules(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(content="   "),
        memory(namespace=""),
        memory(tags=["ok", 3]),
        memory(tier="LTM"),
        memory(kind=None, tier=["stm"]),
    )

    assert problems(parse_all(path)) == [
        (1, "content", 'must be a non-empty string, got "   "'),
        (2, "namespace", 'must be a non-empty string, got ""'),
        (3, "tags", 'must be a list of strings, got ["ok", 3]'),
        (4, "tier", 'must be one of stm, ltm, got "LTM"'),
        (5, "tier", 'must be one of stm, ltm, got ["stm"]'),
    ]


def test_text_the_store_cannot_hold_is_rejected(tmp_path: Path) -> None:
    start = '{"namespace": "ns", "created_at": "2024-01-01T00:00:00Z", '
    path = write_jsonl(
        tmp_path,
        start + '"content": "nul \\u0000 inside"}',
        start + '"content": "c0", "tags": ["\\ud800"]}',
        start + '"content": "c1", "metadata": {"k": "\\u0000"}}',
        start + '"content": "c2", "metadata": {"k": NaN}}',
        # A literal backslash followed by "u0000" is ordinary text, not a NUL.
        start + '"content": "c3", "metadata": {"k": "\\\\u0000"}}',
    )

    result = parse_all(path)

    assert problems(result) == [
        (1, "content", "contains a NUL character (\\u0000), which the store cannot hold"),
        (2, "tags", "contains an unpaired surrogate escape (\\ud800-\\udfff), which is not valid UTF-8"),
        (3, "metadata", "contains a NUL character (\\u0000), which the store cannot hold"),
        (4, "metadata", "must not contain NaN or Infinity (not valid JSON)"),
    ]
    assert json.loads(result.rows.column("metadata")[0].as_py()) == {"k": "\\u0000"}


def test_metadata_ids_merge_unless_they_conflict(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(project_id="p1", metadata={"project_id": "p1", "z": 0}),
        memory(conversation_id="c1", metadata={"conversation_id": "c2"}),
        memory(project_id="p1", metadata=["p1"]),
    )

    result = parse_all(path)

    assert result.rows.column("metadata").to_pylist() == ['{"project_id":"p1","z":0}']
    assert problems(result) == [
        (2, "conversation_id", 'conflicts with metadata.conversation_id = "c2"'),
        (3, "metadata", 'must be a JSON object, got ["p1"]'),
    ]


def test_unknown_fields_are_each_reported(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path,
        memory(emebdding=[1.0], colour="blue"),
        memory(zone_snice="2024-01-01T00:00:00Z", superseeded_by="m1", scor=0.5, updatedAt="x"),
    )

    assert problems(parse_all(path)) == [
        (1, "emebdding", "unknown field (did you mean 'embedding'?)"),
        (1, "colour", "unknown field"),
        (2, "zone_snice", "unknown field (did you mean 'zone_since'?)"),
        (2, "superseeded_by", "unknown field (did you mean 'superseded_by'?)"),
        (2, "scor", "unknown field (did you mean 'score'?)"),
        (2, "updatedAt", "unknown field (did you mean 'updated_at'?)"),
    ]


# --- lines -------------------------------------------------------------------------------------------------


def test_line_level_problems(tmp_path: Path) -> None:
    path = tmp_path / "lines.jsonl"
    path.write_bytes(
        b'"just a string"\n'
        b"null\n"
        b'{"namespace": "ns", "content": "a", "content": "b", "created_at": "2024-01-01T00:00:00Z"}\n'
        b'{"namespace": "ns", "content": "caf\xe9", "created_at": "2024-01-01T00:00:00Z"}\n'
        + b"[" * 100_000  # nesting too deep for json.loads
        + b"\n"
    )

    result = parse_all(path)

    assert problems(result)[:4] == [
        (1, LINE_FIELD, "not a JSON object (got a string)"),
        (2, LINE_FIELD, "not a JSON object (got null)"),
        (3, LINE_FIELD, "duplicate key 'content' in a JSON object"),
        (4, LINE_FIELD, "not valid UTF-8 (byte 36)"),
    ]
    assert problems(result)[4][:2] == (5, LINE_FIELD)
    assert problems(result)[4][2].startswith("invalid JSON: maximum recursion depth exceeded")
    assert (
        result.rejects[3].raw
        == '{"namespace": "ns", "content": "caf\ufffd", "created_at": "2024-01-01T00:00:00Z"}'
    )
    assert result.rows.num_rows == 0


def test_blank_lines_crlf_and_bom(tmp_path: Path) -> None:
    path = tmp_path / "windows.jsonl"
    line = json.dumps(memory(content="a memory")).encode()
    path.write_bytes(
        b"\xef\xbb\xbf" + line + b"\r\n\r\n   \t\r\n" + b"{bad\r\n" + line.replace(b"a memory", b"b")
    )

    result = parse_all(path)

    assert result.lines_read == 3  # the last line has no newline and still counts
    assert result.rows.column("content").to_pylist() == ["a memory", "b"]
    assert [(reject.line, reject.raw) for reject in result.rejects] == [(4, "{bad")]


def test_empty_file_yields_one_empty_result(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n", encoding="utf-8")

    results = list(parse_jsonl(path, embedding_dim=8))

    assert len(results) == 1
    assert results[0].rows.num_rows == 0 and results[0].rows.schema == import_schema(8)
    assert (results[0].lines_read, results[0].rejects, results[0].rejected_lines) == (0, [], 0)


def test_invalid_arguments_are_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path, memory())

    for options in ({"embedding_dim": 0}, {"batch_size": 0}, {"default_namespace": " "}):
        with pytest.raises(ValueError):
            parse_jsonl(path, **options)  # at the call, not at the first iteration


# --- rejects file ------------------------------------------------------------------------------------------


def test_write_rejects_round_trips(tmp_path: Path) -> None:
    rejects = parse_all(MIXED).rejects
    path = tmp_path / "rejects.jsonl"

    assert write_rejects(rejects, path) == len(EXPECTED_REJECTS)

    written = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [Reject(**record) for record in written] == rejects
    assert list(written[0]) == ["line", "field", "reason", "raw"]


def test_write_rejects_replaces_or_appends(tmp_path: Path) -> None:
    path = tmp_path / "rejects.jsonl"
    first = Reject(1, "content", "required field is missing", '{"é": 1}')
    second = Reject(2, "\ud800", "unknown field", "{}")  # a surrogate field name must not break the file

    write_rejects([first], path)
    assert write_rejects([first], path) == 1
    assert write_rejects([second], path, append=True) == 1

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2
    assert '"raw": "{\\"é\\": 1}"' in lines[0]  # readable, not \u-escaped
    assert Reject(**json.loads(lines[1])) == second


def test_metadata_deeper_than_the_change_sets_can_carry_is_rejected(tmp_path: Path) -> None:
    """Import and snapshot share one limit (`jsontext.MAX_DEPTH`): 200 levels passed import, then failed the
    night's change-set step, where orjson writes at most 254."""
    from engram_pipelines.core import jsontext

    deep = "[" * 200 + "]" * 200
    fine = "[" * 100 + "]" * 100
    path = tmp_path / "deep.jsonl"
    path.write_text(
        f'{{"namespace": "ns", "content": "a", "created_at": "2024-01-01T00:00:00Z", "metadata": {{"x": {deep}}}}}\n'
        f'{{"namespace": "ns", "content": "b", "created_at": "2024-01-01T00:00:00Z", "metadata": {{"x": {fine}}}}}\n'
    )
    result = parse_all(path)
    assert problems(result) == [(1, "metadata", f"nests deeper than {jsontext.MAX_DEPTH} levels")]
    assert result.rows.num_rows == 1


def test_supersede_cycles_self_references_and_other_namespaces_are_rejected(tmp_path: Path) -> None:
    """Each would hide a row for good: recall shows neither side of a cycle."""
    base = '"content": "x", "created_at": "2024-01-01T00:00:00Z"'
    path = tmp_path / "supersede.jsonl"
    path.write_text(
        f'{{"id": "a", "namespace": "ns", {base}, "superseded_by": "b"}}\n'
        f'{{"id": "b", "namespace": "ns", {base}, "superseded_by": "a"}}\n'
        f'{{"id": "c", "namespace": "ns", {base}, "superseded_by": "c"}}\n'
        f'{{"id": "d", "namespace": "other", {base}, "superseded_by": "e"}}\n'
        f'{{"id": "e", "namespace": "ns", {base}}}\n'
        f'{{"id": "f", "namespace": "other", {base}, "superseded_by": "e"}}\n'
        f'{{"id": "g", "namespace": "ns", {base}, "superseded_by": "e"}}\n'
    )
    result = parse_all(path)
    assert sorted(problems(result)) == [
        (1, "superseded_by", "makes a cycle of supersedes through 'a'"),
        (2, "superseded_by", "makes a cycle of supersedes through 'b'"),
        (3, "superseded_by", "names the memory itself"),
        (4, "superseded_by", "'e' is in another namespace ('ns')"),  # named before it was read
        (6, "superseded_by", "'e' is in another namespace ('ns')"),
    ]
    assert sorted(result.rows["id"].to_pylist()) == ["e", "g"]


def test_a_supersede_may_name_a_later_line_or_a_row_of_the_store(tmp_path: Path) -> None:
    """Checked against the whole file and the store: only lines before it were checked, so a cycle through a
    later line and a target in another namespace named before its line was read got in."""
    base = '"content": "x", "created_at": "2024-01-01T00:00:00Z"'
    path = tmp_path / "forward.jsonl"
    path.write_text(
        f'{{"id": "a", "namespace": "ns", {base}, "superseded_by": "b"}}\n'  # a later line: fine
        f'{{"id": "b", "namespace": "ns", {base}}}\n'
        f'{{"id": "c", "namespace": "ns", {base}, "superseded_by": "stored"}}\n'  # the store's row: fine
        f'{{"id": "d", "namespace": "ns", {base}, "superseded_by": "elsewhere"}}\n'  # the store's, other ns
        f'{{"id": "e", "namespace": "ns", {base}, "superseded_by": "nowhere"}}\n'
        f'{{"id": "f", "namespace": "ns", {base}, "superseded_by": "e"}}\n'  # e's line is rejected
    )
    store = {"stored": "ns", "elsewhere": "other"}
    result = parse_all(path, existing=lambda ids: {i: store[i] for i in ids if i in store}, batch_size=2)
    assert sorted(problems(result)) == [
        (4, "superseded_by", "'elsewhere' is in another namespace ('other')"),
        (5, "superseded_by", "'nowhere' is in neither the file nor the store"),
        (6, "superseded_by", "names 'e', whose line was rejected"),
    ]
    assert sorted(result.rows["id"].to_pylist()) == ["a", "b", "c"]
    assert sum(r.lines_read for r in parse_jsonl(path, batch_size=2)) == 6


def test_mem0_memories_import_with_their_scope_as_the_namespace_and_nothing_dropped(tmp_path: Path) -> None:
    """mem0 lines were rejected ("unknown field: memory, user_id")."""
    path = tmp_path / "mem0.jsonl"
    lines = [
        {  # an item of Memory.get_all()
            "id": "5f1b8e52-1f6a-4d3e-9a0e-2b9f0f7d1c11",
            "memory": "My name is liguoyu",
            "hash": "2c1f3e9a",
            "metadata": {"source": "chat"},
            "score": 0.42,
            "created_at": "2026-03-01T10:00:00.123456-08:00",
            "updated_at": None,
            "user_id": "liguoyu",
            "agent_id": "assistant",
        },
        {  # a row of its vector store
            "id": "6a2c9f63-2a7b-4e4f-8b1f-3cae1f8e2d22",
            "payload": {
                "data": "Prefers green tea",
                "hash": "9d8e",
                "agent_id": "coder",
                "created_at": "2026-03-02T09:00:00+00:00",
            },
        },
        {"memory": "no scope, no default", "created_at": "2026-03-03T09:00:00+00:00", "colour": "blue"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = parse_all(path, source_format="mem0")
    rows = {r["id"]: r for r in result.rows.to_pylist()}
    first = rows["5f1b8e52-1f6a-4d3e-9a0e-2b9f0f7d1c11"]
    assert (first["namespace"], first["content"]) == ("user:liguoyu", "My name is liguoyu")
    assert json.loads(first["metadata"]) == {
        "source": "chat",
        "mem0": {"hash": "2c1f3e9a", "user_id": "liguoyu", "agent_id": "assistant"},
    }
    second = rows["6a2c9f63-2a7b-4e4f-8b1f-3cae1f8e2d22"]
    assert (second["namespace"], second["content"]) == ("agent:coder", "Prefers green tea")
    assert sorted((p[0], p[1]) for p in problems(result)) == [(3, "colour"), (3, "namespace")]
    with pytest.raises(ValueError, match="unknown import format 'mem1'"):
        list(parse_jsonl(path, source_format="mem1"))
