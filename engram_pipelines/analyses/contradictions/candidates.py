"""Contradiction candidates beyond the cosine band: memories with the same parsed subject and relation
(`structural_candidates`, any cosine) and links a person or agent wrote into metadata (`explicit_candidates`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.contradictions.rules import RuleBook, load_rules
from engram_pipelines.core.duck import duck

# Structural candidates: at most this many most-recent memories per (namespace, subject, relation), so one
# subject repeated in 10k memories yields at most K*(K-1)/2 pairs instead of 50M.
STRUCTURAL_GROUP_LIMIT = 50

# The parsed features the structural join reads: every memory's, where the rules read every feature only of the
# memories in a candidate pair (`find_contradictions` looks up the two apart).
STRUCTURAL_COLUMNS = [
    "id",
    "subject",
    "relation",
    "value",
    "negated",
    "pronoun_subject",
    "single_valued",
    "quantity_key",
]


def structural_candidates(
    features: pa.Table, namespaces: pa.Table, group_limit: int = STRUCTURAL_GROUP_LIMIT
) -> pa.Table:
    """Pairs with the same (namespace, subject, relation) and different values, whatever their cosine.

    `namespaces`: id, namespace, optionally created_at (recency for the cap, and passed on as
    left_created_at/right_created_at so the result feeds `detect` directly). Only claims that could fire are
    joined: unnegated, a non-pronoun subject, a single-valued relation or a quantity. Each group keeps its
    `group_limit` most recent memories (created_at, then id, descending): one subject repeated 10k times gives
    at most K*(K-1)/2 pairs instead of 50M, and an older row of such a group is compared only through the
    cosine band. Returns left_id < right_id and namespace, deduplicated, in a stable order.
    """
    has_time = "created_at" in namespaces.column_names
    recency = "n.created_at" if has_time else "NULL"
    times = ", a.created_at AS left_created_at, b.created_at AS right_created_at" if has_time else ""
    with duck() as con:
        con.register(
            "features",
            features.select(STRUCTURAL_COLUMNS),
        )
        con.register("namespaces", namespaces)
        return con.sql(
            f"""
            WITH claims AS (
                SELECT DISTINCT f.id, n.namespace, f.subject, f.relation, f.value, {recency} AS created_at
                FROM features f JOIN namespaces n ON n.id = f.id
                WHERE f.subject IS NOT NULL AND NOT f.negated AND NOT f.pronoun_subject
                  AND (f.single_valued OR f.quantity_key IS NOT NULL)
            ), ranked AS (
                SELECT *, row_number() OVER (PARTITION BY namespace, subject, relation
                                             ORDER BY created_at DESC NULLS LAST, id DESC) AS recency
                FROM claims
            )
            SELECT DISTINCT a.id AS left_id, b.id AS right_id, a.namespace{times}
            FROM ranked a
            JOIN ranked b ON a.namespace = b.namespace AND a.subject = b.subject AND a.relation = b.relation
                         AND a.id < b.id
            WHERE a.recency <= {int(group_limit)} AND b.recency <= {int(group_limit)} AND a.value <> b.value
            ORDER BY a.namespace, left_id, right_id
            """
        ).to_arrow_table()


def _linked_ids(metadata: Any, keys: Sequence[str]) -> list[str]:
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata)
        except ValueError:
            return []
    if not isinstance(metadata, dict):
        return []
    linked: list[str] = []
    for key in keys:
        value = metadata.get(key)
        if isinstance(value, str):
            linked.append(value)
        elif isinstance(value, list):
            linked.extend(str(v) for v in value if isinstance(v, str | int))
    return linked


def explicit_candidates(
    ids: Sequence[str], metadata_json: Sequence[str | Mapping[str, Any] | None], rules: RuleBook | None = None
) -> pa.Table:
    """Pairs asserted by `metadata.contradicts` (an id or a list of ids; keys from the rules file).

    Links to ids outside `ids` (not in this snapshot) and self-links are dropped. Returns left_id < right_id,
    explicit = true; deduplicated (a link stated on both sides is one pair).
    """
    keys = (rules or load_rules()).explicit_keys
    return _explicit_pairs(ids, metadata_json, keys, pa.array(list(map(str, ids)), pa.string()))


def explicit_candidates_of(memories: pa.Table, rules: RuleBook | None = None) -> pa.Table:
    """`explicit_candidates` of a table's `id` and `metadata` (JSON text) columns, the same pairs, parsing only
    the rows whose text can hold a key: a key is written as itself, or escaped (then the text has a backslash).
    Parsing every row's metadata took 7.5 s at 1M memories, for the few rows that link."""
    keys = (rules or load_rules()).explicit_keys
    text = memories["metadata"]
    maybe = pc.match_substring(text, "\\")
    for key in keys:
        maybe = pc.or_(maybe, pc.match_substring(text, key))
    rows = memories.select(["id", "metadata"]).filter(pc.fill_null(maybe, False))
    return _explicit_pairs(rows["id"].to_pylist(), rows["metadata"].to_pylist(), keys, memories["id"])


def _explicit_pairs(
    ids: Sequence[str],
    metadata_json: Sequence[str | Mapping[str, Any] | None],
    keys: Sequence[str],
    known: pa.Array | pa.ChunkedArray,
) -> pa.Table:
    """The pairs the rows' metadata links, of ids among `known` (self-links dropped)."""
    links = sorted(
        {
            (memory_id, other)
            for memory_id, metadata in zip(map(str, ids), metadata_json, strict=True)
            for other in _linked_ids(metadata, keys)
            if other != memory_id
        }
    )
    present = pc.is_in(pa.array([other for _, other in links], pa.string()), value_set=known).to_pylist()
    ordered = sorted({(min(a, b), max(a, b)) for (a, b), ok in zip(links, present, strict=True) if ok})
    return pa.table(
        {
            "left_id": pa.array([p[0] for p in ordered], pa.string()),
            "right_id": pa.array([p[1] for p in ordered], pa.string()),
            "explicit": pa.array([True] * len(ordered), pa.bool_()),
        }
    )
