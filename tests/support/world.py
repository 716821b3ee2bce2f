"""A small world of memories and links for the knowledge and link analyses' tests: vectors at chosen angles,
rows, links, pairs, and the apply of an analysis's intents onto it."""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from engram_pipelines.changes.compose import compose
from engram_pipelines.core import records
from engram_pipelines.core.timestamps import parse_timestamp
from engram_pipelines.vectors.comparable import vector_schema
from engram_pipelines.vectors.pairs import vector_pairs
from tests.support.lifecycle import days_ago, snapshot

DIM = 8
_LETTERS = str.maketrans("0123456789", "abcdefghij")
MODEL = "test-8"


def direction(degrees: float, toward: int = 1, dim: int = DIM) -> list[float]:
    """A unit vector at `degrees` from e0 toward e_toward (same plane: the cosine is cos of the gap)."""
    v = [0.0] * dim
    v[0], v[toward] = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    return v


def axis(k: int, dim: int = DIM) -> list[float]:
    v = [0.0] * dim
    v[k] = 1.0
    return v


def episode(
    memory_id: str, vector: list[float] | None, conversation: str | None, **fields: Any
) -> dict[str, Any]:
    metadata = dict(fields.pop("metadata", {}))
    if conversation is not None:
        metadata.setdefault("conversation_id", conversation)
        metadata.setdefault("project_id", "p1")
    return {
        "id": memory_id,
        # Digits spelled as letters: rows whose numbers differ never repeat one fact (`same_fact_pairs`).
        "content": f"The team deploys the billing service from host-{memory_id.translate(_LETTERS)}",
        "embedding": vector,
        "embedding_model": MODEL if vector is not None else None,
        "metadata": metadata,
        "created_at": days_ago(20),
        "updated_at": days_ago(20),
        **fields,
    }


def link(src: str, dst: str, kind: str, **fields: Any) -> dict[str, Any]:
    return {
        "namespace": "ns1",
        "src_id": src,
        "dst_id": dst,
        "kind": kind,
        "weight": 1.0,
        "origin": "agent",
        "created_at": days_ago(10),
        "updated_at": days_ago(10),
        "traversed_at": None,
        **fields,
    }


def links_table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=records.LINK_SCHEMA)


def vectors_of(memories: pa.Table) -> pa.Table:
    with_vector = memories.filter(memories["embedding"].is_valid())
    return pa.table(
        {
            "id": with_vector["id"],
            "namespace": with_vector["namespace"],
            "model": pa.array([MODEL] * with_vector.num_rows, pa.string()),
            "source": pa.array(["stored"] * with_vector.num_rows, pa.string()),
            "vector": with_vector["embedding"],
        }
    ).cast(vector_schema(DIM))


def pairs_for(memories: pa.Table, threshold: float = 0.70) -> pa.Table:
    found, _ = vector_pairs(vectors_of(memories), threshold, exact_cutoff=1000)
    return found


def ops(intents: pa.Table) -> list[tuple[str, str]]:
    return sorted(zip(intents["op"].to_pylist(), intents["target_id"].to_pylist(), strict=True))


def params_of(intents: pa.Table, op: str, target: str) -> dict[str, Any]:
    for row in intents.to_pylist():
        if row["op"] == op and row["target_id"] == target:
            return json.loads(row["params"])
    raise KeyError((op, target))


@dataclass
class World:
    """Memories and links as python rows; `apply` composes intents and writes their post-images, as apply would.

    Writes land three hours after the as-of instant (the nightly runs after the partition's day ends), so a link
    the run upserted carries `updated_at` after the as-of instant, as in the store.
    """

    rows: list[dict[str, Any]]
    links: list[dict[str, Any]] = field(default_factory=list)

    def memories(self) -> pa.Table:
        return snapshot(self.rows, dim=DIM)

    def links_table(self) -> pa.Table:
        return links_table(self.links)

    def vectors(self) -> pa.Table:
        return vectors_of(self.memories())

    def pairs(self, threshold: float = 0.70) -> pa.Table:
        return pairs_for(self.memories(), threshold)

    def row(self, memory_id: str) -> dict[str, Any]:
        return next(r for r in self.rows if r["id"] == memory_id)

    def apply(
        self, intents: pa.Table, at: dt.datetime, classes: tuple[str, ...] = ("auto", "gated")
    ) -> World:
        written = at + dt.timedelta(hours=3)
        sets = compose(intents, self.memories(), as_of=(at - dt.timedelta(days=1)).date(), at=at, job="test")
        rows = {r["id"]: copy.deepcopy(r) for r in self.rows}
        links = {(x["src_id"], x["dst_id"], x["kind"]): dict(x) for x in self.links}
        for klass in classes:
            for change in sets[klass].to_pylist():
                _apply_change(change, rows, links, written)
        return World(list(rows.values()), list(links.values()))


def _apply_change(
    change: dict[str, Any],
    rows: dict[str, dict[str, Any]],
    links: dict[tuple[str, str, str], dict[str, Any]],
    written: dt.datetime,
) -> None:
    patch = json.loads(change["patch"])
    target = change["target_id"]
    match change["op"]:
        case "update":
            row = rows[target]
            for column, value in patch.items():
                timestamp = column in records.TIMESTAMP_COLUMNS and value is not None
                row[column] = parse_timestamp(value) if timestamp else value
            row["version"] = row.get("version", 1) + 1
            row["updated_at"] = written
        case "delete":
            rows.pop(target)
        case "insert":
            row = {
                k: (parse_timestamp(v) if k in records.TIMESTAMP_COLUMNS and v else v)
                for k, v in patch.items()
            }
            rows[row["id"]] = row
        case "link_upsert":
            key = (patch["src_id"], patch["dst_id"], patch["kind"])
            before = links.get(key)
            links[key] = {
                "namespace": patch["namespace"],
                "src_id": key[0],
                "dst_id": key[1],
                "kind": key[2],
                "weight": patch["weight"],
                "origin": patch.get("origin", "pipeline"),
                "created_at": before["created_at"] if before else written,
                "updated_at": written,
                "traversed_at": before["traversed_at"] if before else None,
            }
        case "link_delete":
            links.pop((patch["src_id"], patch["dst_id"], patch["kind"]), None)
