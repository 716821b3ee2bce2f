"""What an analysis may propose, and how proposals fold onto a row.

An *intent* is one analysis's wish for one target ("mark m1 stale", "supersede m7 by m3"). Intents on the
same row compose into one change (one CAS write). The fold below is used twice: when the change set is built
(on the snapshot row) and again at apply time when a CAS write missed (on the freshly read row), so the patch
is always derived the same way.

Precedence on one row (documented in docs/concepts.md):
1. `purge` deletes the row; every other intent on that row is dropped.
2. The others fold in OP_ORDER. Of several `move_zone`, the most advanced zone wins; of several `supersede`,
   the first in (source, by) order wins. Tag unions, duplicate annotations, contradiction flags accumulate.
3. Nothing but `supersede` writes `superseded_by`, and nothing clears it: decay, retention and promotion
   cannot un-hide a superseded row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core import jsontext
from engram_pipelines.core.digests import content_sha
from engram_pipelines.core.timestamps import format_timestamp


class Op(StrEnum):
    """What an intent asks for. Members are strings: they are written as they are into change sets and SQL."""

    PROMOTE_TIER = "promote_tier"
    PROMOTE_KIND = "promote_kind"
    CLEAR_STALE = "clear_stale"
    MARK_STALE = "mark_stale"
    SET_SCORE = "set_score"
    MOVE_ZONE = "move_zone"
    SUPERSEDE = "supersede"
    FLAG_CONTRADICTION = "flag_contradiction"
    UNION_TAGS = "union_tags"
    ANNOTATE_DUPLICATES = "annotate_duplicates"
    SET_METADATA = "set_metadata"
    PURGE = "purge"
    INSERT_MEMORY = "insert_memory"
    UPSERT_LINK = "upsert_link"
    DELETE_LINK = "delete_link"


# Ops on an existing memory, in the order they fold.
OP_ORDER = (
    Op.PROMOTE_TIER,
    Op.PROMOTE_KIND,
    Op.CLEAR_STALE,
    Op.MARK_STALE,
    Op.SET_SCORE,
    Op.MOVE_ZONE,
    Op.SUPERSEDE,
    Op.FLAG_CONTRADICTION,
    Op.UNION_TAGS,
    Op.ANNOTATE_DUPLICATES,
    Op.SET_METADATA,
)
MEMORY_UPDATE_OPS = frozenset(OP_ORDER)
PURGE = Op.PURGE
INSERT = Op.INSERT_MEMORY
LINK_OPS = frozenset({Op.UPSERT_LINK, Op.DELETE_LINK})
ALL_OPS = frozenset(Op)

# Ops that hide or delete: never on a pinned row or a `block` row (issue 4's pin guarantee).
HIDING_OPS = frozenset({Op.MOVE_ZONE, Op.PURGE, Op.SUPERSEDE, Op.MARK_STALE})
# Ops decided on access evidence: a row accessed since the snapshot is no longer eligible.
ACCESS_SENSITIVE_OPS = frozenset({Op.MARK_STALE, Op.MOVE_ZONE, Op.PURGE})
# Ops decided on content evidence (similarity, parsing): a row whose content changed is no longer eligible.
CONTENT_SENSITIVE_OPS = frozenset(
    {Op.SUPERSEDE, Op.FLAG_CONTRADICTION, Op.UNION_TAGS, Op.ANNOTATE_DUPLICATES}
)

ZONE_RANK = {"active": 0, "archived": 1, "purge_queue": 2}


# `auto` is applied by the nightly; `gated` (merges, compression, supersede) and `held` (what the volume guard
# held back: `guard.py`) wait for `approve`. Held changes are a set of their own, so approving the night's merges
# never approves a mass archive with them.
REVIEW_CLASSES = ("auto", "gated", "held")
REVIEWED_CLASSES = ("gated", "held")

INTENT_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("target_kind", pa.string(), nullable=False),  # memory | link
        pa.field("target_id", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),
        pa.field("params", pa.string(), nullable=False),  # JSON object
        pa.field("reason", pa.string(), nullable=False),
        pa.field("evidence", pa.string(), nullable=False),  # JSON object
        pa.field("source", pa.string(), nullable=False),
        pa.field("review_class", pa.string(), nullable=False),
        pa.field("cluster_id", pa.string()),
    ]
)


def intents_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Build an intent table from dicts (params/evidence given as dicts are serialised)."""
    prepared = []
    for row in rows:
        if row["op"] not in ALL_OPS:
            raise ValueError(f"unknown op {row['op']!r}")
        prepared.append(
            {
                **row,
                "params": jsontext.dumps(row.get("params", {})),
                "evidence": jsontext.dumps(row.get("evidence", {})),
                "reason": row.get("reason", ""),
                "cluster_id": row.get("cluster_id"),
                "target_kind": row.get("target_kind", "memory"),
            }
        )
    return pa.Table.from_pylist(prepared, schema=INTENT_SCHEMA)


def intents_from_sql(con: duckdb.DuckDBPyConnection, query: str) -> pa.Table:
    """An intent table from a query that yields INTENT_SCHEMA's columns, params and evidence as JSON objects
    (DuckDB's `to_json` of a struct whose keys are written in sorted order, as `intents_table` sorts them): for
    analyses that propose hundreds of thousands of intents, without a Python dict per intent."""
    table = con.sql(query).to_arrow_table().select(INTENT_SCHEMA.names).cast(INTENT_SCHEMA)
    unknown = set(pc.unique(table["op"]).to_pylist()) - set(ALL_OPS)
    if unknown:
        raise ValueError(f"unknown op {sorted(unknown)[0]!r}")
    return table


@dataclass(frozen=True)
class Intent:
    op: str
    params: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    reason: str = ""

    def sort_key(self) -> tuple[int, str, str]:
        rank = OP_ORDER.index(self.op) if self.op in MEMORY_UPDATE_OPS else len(OP_ORDER)
        return (rank, self.source, str(sorted(self.params.items(), key=lambda kv: kv[0])))


class Ineligible(Exception):
    """The row no longer qualifies for the change (the reason says why)."""


def _hiding(intents: list[Intent]) -> set[str]:
    # Moving a row back to Active un-hides it: neither a pin nor a fresh access stands in its way.
    return {
        i.op for i in intents if not (i.op == "move_zone" and i.params.get("to") == "active")
    } & HIDING_OPS


def hides(intents: list[Intent]) -> bool:
    """Whether these intents hide or delete their row (so a pin or a block forbids them)."""
    return bool(_hiding(intents))


def hides_by_ops(ops: Sequence[str]) -> bool | None:
    """`hides` of intents with these ops, where the ops decide it; None where a move is among them (its
    direction is in its params: see `_hiding`). The apply's first attempt asks this of every change, and parsing
    every change's intents took 3.8 us a change: about 3 s of a 1M first night's 755k memory changes."""
    if Op.MOVE_ZONE in ops:
        return None
    return not HIDING_OPS.isdisjoint(ops)


def hide_by_neglect(intents: list[Intent]) -> bool:
    """Whether these intents hide or delete their row because it was not used (an archive, a move to the purge
    queue, a purge: decay and retention), not because of what it says: an edit since the snapshot overrules
    them (`apply`)."""
    return bool((_hiding(intents) & ACCESS_SENSITIVE_OPS) - {"mark_stale"})


def check_eligible(intents: list[Intent], row: dict[str, Any] | None, guard: dict[str, Any]) -> None:
    """Raise Ineligible when `row` (fresh from the store) no longer qualifies for these intents.

    `guard` holds the evidence the decision was made on: access_count, last_accessed_at, pinned, content_sha.
    """
    if row is None:
        raise Ineligible("target no longer exists")
    hiding = _hiding(intents)
    if hiding and (row["pinned"] or row["kind"] == "block"):
        raise Ineligible("row is pinned or a block: nothing hides or deletes it")
    ops = {i.op for i in intents}
    if hiding & ACCESS_SENSITIVE_OPS and (
        row["access_count"] != guard.get("access_count")
        or row["last_accessed_at"] != guard.get("last_accessed_at")
    ):
        raise Ineligible("accessed since the snapshot: the decay evidence is stale")
    if ops & CONTENT_SENSITIVE_OPS and guard.get("content_sha") not in (None, content_sha(row["content"])):
        raise Ineligible("content changed since the similarity evidence was computed")
    for intent in intents:
        if intent.op == "move_zone" and row["zone"] != intent.params["from"]:
            raise Ineligible(f"zone is {row['zone']!r} now, not {intent.params['from']!r}")
        if intent.op == PURGE and row["zone"] != "purge_queue":
            raise Ineligible(f"zone is {row['zone']!r} now, not 'purge_queue'")
        if intent.op == "supersede" and row["superseded_by"] is not None:
            raise Ineligible(f"already superseded by {row['superseded_by']}")
        if intent.op == "promote_tier" and row["tier"] != intent.params.get("from", "stm"):
            raise Ineligible(f"tier is {row['tier']!r} now")
        if intent.op == "promote_kind" and row["kind"] != intent.params.get("from", "episodic"):
            raise Ineligible(f"kind is {row['kind']!r} now")


def select_intents(intents: list[Intent]) -> tuple[list[Intent], list[Intent]]:
    """Apply the precedence rules: returns (kept, dropped) in fold order."""
    ordered = sorted(intents, key=Intent.sort_key)
    if any(i.op == PURGE for i in ordered):
        purge = next(i for i in ordered if i.op == PURGE)
        return [purge], [i for i in ordered if i is not purge]
    kept: list[Intent] = []
    dropped: list[Intent] = []
    zone_moves = [i for i in ordered if i.op == "move_zone"]
    best_zone = max(zone_moves, key=lambda i: ZONE_RANK[i.params["to"]]) if zone_moves else None
    first_supersede = next((i for i in ordered if i.op == "supersede"), None)
    for intent in ordered:
        if (intent.op == "move_zone" and intent is not best_zone) or (
            intent.op == "supersede" and intent is not first_supersede
        ):
            dropped.append(intent)
        else:
            kept.append(intent)
    return kept, dropped


def fold(intents: list[Intent], row: dict[str, Any], at: dt.datetime) -> dict[str, Any]:
    """The row's writable columns after the intents; `row` is not modified."""
    out = {
        "tier": row["tier"],
        "kind": row["kind"],
        "score": row["score"],
        "stale": row["stale"],
        "zone": row["zone"],
        "zone_since": row["zone_since"],
        "superseded_by": row["superseded_by"],
        "tags": list(row["tags"]),
        # A shallow copy is enough: below, a nested value is only ever replaced by a new object, never edited.
        "metadata": dict(row["metadata"]),
    }
    when = format_timestamp(at)
    meta = out["metadata"]
    for intent in intents:
        p = intent.params
        match intent.op:
            case "promote_tier":
                out["tier"] = p["to"]
                meta["promotion"] = {"to": p["to"], "reason": intent.reason, "at": when}
            case "promote_kind":
                out["kind"] = p["to"]
                meta["kindPromotion"] = {"to": p["to"], "reason": intent.reason, "at": when}
            case "mark_stale":
                out["stale"] = True
                out["score"] = p["score"]
                meta["stale"] = {"reason": intent.reason, "score": p["score"], "at": when}
            case "clear_stale":
                out["stale"] = False
                out["score"] = p["score"]
                meta.pop("stale", None)
            case "set_score":
                out["score"] = p["score"]
            case "move_zone":
                out["zone"] = p["to"]
                out["zone_since"] = at
                meta["zone"] = {"from": p["from"], "to": p["to"], "reason": intent.reason, "at": when}
            case "supersede":
                out["superseded_by"] = p["by"]
                meta["supersededBy"] = p["by"]
                meta["supersededReason"] = intent.reason
                meta["supersededAt"] = when
            case "flag_contradiction":
                others = set(meta.get("contradictionWith", []))
                others.add(p["with"])
                meta["contradictionWith"] = sorted(others)
                reasons = dict(meta.get("contradictionReasons", {}))
                reasons[p["with"]] = intent.reason
                meta["contradictionReasons"] = reasons
                meta["contradictedAt"] = when
            case "union_tags":
                for tag in p["tags"]:
                    if tag not in out["tags"]:
                        out["tags"].append(tag)
            case "annotate_duplicates":
                matches = list(meta.get("duplicateMatches", []))
                known = {m["id"] for m in matches}
                matches.extend(m for m in p["matches"] if m["id"] not in known)
                meta["duplicateMatches"] = matches
            case "set_metadata":
                meta.update(p["values"])
            case _:
                raise ValueError(f"{intent.op!r} is not an update op")
    return out


def diff(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Columns whose value changes."""
    return {k: v for k, v in after.items() if before.get(k) != v}
