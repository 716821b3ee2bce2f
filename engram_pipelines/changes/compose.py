"""Compose the analyses' intents into change sets: one CAS-guarded write per target and review class.

Input: an Arrow table of intents (INTENT_SCHEMA) and the snapshot's memories. Output: one change table per
review class (CHANGE_SCHEMA), sorted and content-addressed, so the same snapshot and config give
byte-identical change sets. Intents that would change nothing are dropped: only transitions are written.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.changes.fold_sql import SQL_TARGETS_SCHEMA, fold_in_sql, sql_fold_targets
from engram_pipelines.changes.intents import (
    INSERT,
    PURGE,
    REVIEW_CLASSES,
    Intent,
    diff,
    fold,
    select_intents,
)
from engram_pipelines.core import jsontext, records
from engram_pipelines.core.digests import content_sha_sql
from engram_pipelines.core.duck import duck

CHANGE_SCHEMA = pa.schema(
    [
        pa.field("change_id", pa.string(), nullable=False),
        pa.field("change_set_id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("target_kind", pa.string(), nullable=False),
        pa.field("target_id", pa.string(), nullable=False),
        pa.field("op", pa.string(), nullable=False),  # update | delete | insert | link_upsert | link_delete
        pa.field("ops", pa.list_(pa.string()), nullable=False),
        pa.field("intents", pa.string(), nullable=False),  # JSON list of {op, params, source, reason}
        pa.field("dropped", pa.string(), nullable=False),  # JSON list of intents overruled by precedence
        pa.field("expected_version", pa.int64()),
        pa.field("guard_access_count", pa.int64()),
        pa.field("guard_last_accessed_at", records.TIMESTAMP),
        pa.field("guard_pinned", pa.bool_()),
        pa.field("guard_content_sha", pa.string()),
        pa.field("patch", pa.string(), nullable=False),  # JSON: column -> new value
        pa.field("reason", pa.string(), nullable=False),
        pa.field("evidence", pa.string(), nullable=False),  # JSON list, one per intent
        pa.field("source", pa.string(), nullable=False),
        pa.field("review_class", pa.string(), nullable=False),
        pa.field("cluster_id", pa.string()),
        pa.field("destructive", pa.bool_(), nullable=False),
    ]
)


# The snapshot columns compose reads (not the vectors): the guards' evidence, the writable columns the fold
# starts from, and the content (only its digest is used).
_GUARD_COLUMNS = ["id", "version", "access_count", "last_accessed_at", "pinned"]
SNAPSHOT_COLUMNS = [*_GUARD_COLUMNS, *records.WRITABLE_COLUMNS, "content"]
_FOLD_COLUMNS = ", ".join(
    [*_GUARD_COLUMNS, *records.WRITABLE_COLUMNS, f"{content_sha_sql('content')} AS content_sha"]
)


def snapshot_rows(con: duckdb.DuckDBPyConnection, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The snapshot rows (table `memories` in `con`) of `ids` as python dicts: the columns the fold and the
    guards read, tags and metadata decoded."""
    if not ids:
        return {}
    con.register("wanted", pa.table({"id": pa.array(ids, pa.string())}))
    wanted = con.sql(f"SELECT {_FOLD_COLUMNS} FROM memories SEMI JOIN wanted USING (id)").to_arrow_table()
    rows = {}
    for row in wanted.to_pylist():
        row["tags"] = jsontext.loads(row["tags"])
        row["metadata"] = jsontext.loads(row["metadata"])
        rows[row["id"]] = row
    return rows


# Intents composed at once, at most (a namespace is never split): a first night at 1M memories has 4M intents,
# and composing them in one piece held 17 GB (3.3 GB per copy of its 3.5M changes). Measured on the stored 1M
# first night, compose alone: ranges of 500k peaked at 5,883 MB in 43 s, 250k at 5,354 MB in 47 s, 125k at
# 5,032 MB in 52 s.
RANGE_INTENTS = 250_000


def compose(
    intents: pa.Table,
    memories: pa.Table,
    *,
    as_of: dt.date,
    at: dt.datetime,
    job: str,
    sql_fold: bool = True,
) -> dict[str, pa.Table]:
    """review class -> change table (possibly empty), change_set_id filled in (`compose_ranges` of the
    intents' namespace ranges). `sql_fold=False` folds every memory change in Python (the reference the SQL
    fold is tested against)."""
    return compose_ranges(namespace_ranges(intents), memories, as_of=as_of, at=at, job=job, sql_fold=sql_fold)


def namespace_ranges(intents: pa.Table) -> Iterator[pa.Table]:
    """The intents in ranges of consecutive namespaces (in sort order) of about RANGE_INTENTS each, each range
    a table of its own, cut as it is asked for: cut all at once, the ranges and the intents they were cut from
    were two copies of a 1M first night's 4M intents, the change set step's peak (5.3 GB)."""
    for names in _namespace_ranges(intents["namespace"], RANGE_INTENTS):
        yield intents.filter(pc.is_in(intents["namespace"], value_set=pa.array(names, pa.string())))


def compose_ranges(
    ranges: Iterable[pa.Table],
    memories: pa.Table,
    *,
    as_of: dt.date,
    at: dt.datetime,
    job: str,
    sql_fold: bool = True,
) -> dict[str, pa.Table]:
    """`compose` of `namespace_ranges`. Namespaces are independent and the ranges follow the set's sort order,
    so their addressed parts concatenate into the same table one piece would give."""
    parts: dict[str, list[pa.Table]] = {klass: [] for klass in REVIEW_CLASSES}
    for composed in composed_parts(ranges, memories, at=at, sql_fold=sql_fold):
        for klass, part in composed.items():
            parts[klass].append(part)
    return {klass: _finish(tables, as_of=as_of, job=job, klass=klass) for klass, tables in parts.items()}


def composed_parts(
    ranges: Iterable[pa.Table], memories: pa.Table, *, at: dt.datetime, sql_fold: bool = True
) -> Iterator[dict[str, pa.Table]]:
    """Per range, in the set's order: review class -> its addressed changes (CHANGE_SCHEMA but the set's id,
    which hashes them all); each range is let go once composed. `compose_ranges` gathers them into tables;
    `spool.spool_change_sets` writes them to the sets' files as they come."""
    memories = memories.drop_columns([c for c in ("embedding",) if c in memories.column_names])
    for intents in ranges:
        composed = _compose_range(intents, memories, at, sql_fold)
        # Nothing of the range stays in this frame while the caller writes it: not its intents, not its
        # changes before they were addressed.
        del intents
        yield {klass: _address(composed.pop(klass)).cast(ADDRESSED) for klass in list(composed)}


def _namespace_ranges(namespaces: pa.ChunkedArray, limit: int) -> list[list[str]]:
    """Consecutive namespaces (in sort order) with about `limit` intents per range."""
    counts = sorted((c["values"].as_py(), c["counts"].as_py()) for c in pc.value_counts(namespaces))
    ranges: list[list[str]] = [[]]
    size = 0
    for name, count in counts:
        if ranges[-1] and size + count > limit:
            ranges.append([])
            size = 0
        ranges[-1].append(name)
        size += count
    return ranges


def _compose_range(
    intents: pa.Table, memories: pa.Table, at: dt.datetime, sql_fold: bool
) -> dict[str, pa.Table]:
    """review class -> unaddressed changes of these intents."""
    with duck() as con:
        con.register("intents", intents)
        con.register("memories", memories)
        # A link with one intent is most of a nightly's changes (temporal edges): composed in SQL, in bulk.
        lone_links = con.sql(_LONE_LINKS_SQL).to_arrow_table()
        # So are the memory changes made only of lifecycle ops (see fold_sql).
        con.register("sql_targets", sql_fold_targets(con) if sql_fold else SQL_TARGETS_SCHEMA.empty_table())
        folded = fold_in_sql(con, at)
        # Ordered: a change lists its intents' evidence in this order, and a join's output order is not fixed.
        rest = con.sql(
            "SELECT i.* FROM intents i ANTI JOIN lone_links l USING (review_class, target_kind, target_id) "
            "ANTI JOIN sql_targets t ON i.target_kind = 'memory' AND t.review_class = i.review_class "
            "AND t.target_id = i.target_id "
            "ORDER BY review_class, target_kind, target_id, source, op, params, reason, evidence"
        ).to_arrow_table()
        grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
        for row in rest.to_pylist():
            grouped[(row["review_class"], row["target_kind"], row["target_id"])].append(row)
        memory_ids = sorted({target for (_, kind, target) in grouped if kind == "memory"})
        rows = snapshot_rows(con, memory_ids)
        out: dict[str, list[dict[str, Any]]] = {klass: [] for klass in REVIEW_CLASSES}
        for (klass, kind, target), members in sorted(grouped.items()):
            change = _compose_one(kind, target, members, rows.get(target), at)
            if change is not None:
                out[klass].append({**change, "review_class": klass})
        return {
            klass: pa.concat_tables(
                [
                    pa.Table.from_pylist(changes, schema=_UNADDRESSED),
                    *(
                        t.filter(pc.equal(t["review_class"], klass)).cast(_UNADDRESSED)
                        for t in (lone_links, folded)
                    ),
                ]
            )
            for klass, changes in out.items()
        }


# The same documents _compose_one writes for a link with one intent, spelled in SQL (json text is built from
# the intent's already-serialised params and evidence, so nothing is parsed).
_LONE_LINKS_SQL = """
WITH lone AS (
    SELECT * FROM intents WHERE target_kind = 'link'
    QUALIFY count(*) OVER (PARTITION BY review_class, target_kind, target_id) = 1
)
SELECT namespace, target_kind, target_id,
    CASE WHEN op = 'delete_link' THEN 'link_delete' ELSE 'link_upsert' END AS op,
    [op] AS ops,
    '[{"op":' || to_json(op) || ',"params":' || params || ',"reason":' || to_json(reason)
        || ',"source":' || to_json(source) || '}]' AS intents,
    '[]' AS dropped,
    NULL::BIGINT AS expected_version, NULL::BIGINT AS guard_access_count,
    NULL::TIMESTAMPTZ AS guard_last_accessed_at, NULL::BOOLEAN AS guard_pinned, NULL::VARCHAR AS guard_content_sha,
    json_merge_patch(params, json_object('namespace', namespace))::VARCHAR AS patch,
    reason, '[' || evidence || ']' AS evidence, source, review_class, cluster_id,
    op = 'delete_link' AS destructive
FROM lone
"""


def _compose_one(
    kind: str, target: str, members: list[dict[str, Any]], row: dict[str, Any] | None, at: dt.datetime
) -> dict[str, Any] | None:
    intents = [Intent(m["op"], jsontext.loads(m["params"]), m["source"], m["reason"]) for m in members]
    namespace = members[0]["namespace"]
    if any(m["namespace"] != namespace for m in members):
        raise ValueError(f"intents on {target} name different namespaces: nothing may cross a namespace")
    cluster_id = next((m["cluster_id"] for m in members if m["cluster_id"]), None)
    base = {
        "namespace": namespace,
        "target_kind": kind,
        "target_id": target,
        # Each intent's evidence is JSON text already: listed as it is, not parsed and written again.
        "evidence": "[" + ",".join(m["evidence"] for m in members) + "]",
        "cluster_id": cluster_id,
        "expected_version": None,
        "guard_access_count": None,
        "guard_last_accessed_at": None,
        "guard_pinned": None,
        "guard_content_sha": None,
        "dropped": "[]",
    }
    if kind == "link":
        intent = sorted(intents, key=Intent.sort_key)[-1]
        op = "link_delete" if intent.op == "delete_link" else "link_upsert"
        return {
            **base,
            "op": op,
            "ops": [i.op for i in intents],
            "intents": _intents_json(intents),
            "patch": jsontext.dumps({**intent.params, "namespace": namespace}),
            "reason": "; ".join(sorted({i.reason for i in intents if i.reason})),
            "source": ",".join(sorted({i.source for i in intents})),
            "destructive": op == "link_delete",
        }
    if any(i.op == INSERT for i in intents):
        insert = next(i for i in intents if i.op == INSERT)
        return {
            **base,
            "op": "insert",
            "ops": [INSERT],
            "intents": _intents_json([insert]),
            "patch": jsontext.dumps(insert.params["row"]),
            "reason": insert.reason,
            "source": insert.source,
            "destructive": False,
        }
    if row is None:
        raise ValueError(f"intent on memory {target} which is not in the snapshot")
    kept, dropped = select_intents(intents)
    guard = {
        "expected_version": row["version"],
        "guard_access_count": row["access_count"],
        "guard_last_accessed_at": row["last_accessed_at"],
        "guard_pinned": row["pinned"],
        "guard_content_sha": row["content_sha"],
    }
    common = {
        **base,
        **guard,
        "ops": [i.op for i in kept],
        "intents": _intents_json(kept),
        "dropped": _intents_json(dropped),
        "reason": "; ".join(i.reason for i in kept if i.reason),
        "source": ",".join(sorted({i.source for i in kept})),
    }
    if kept[0].op == PURGE:
        return {**common, "op": "delete", "patch": "{}", "destructive": True}
    patch = diff(row, fold(kept, row, at))
    if not patch:
        return None
    hides = patch.get("zone", "active") != "active" or patch.get("superseded_by") is not None
    return {**common, "op": "update", "patch": jsontext.dumps(patch), "destructive": hides}


def _intents_json(intents: list[Intent]) -> str:
    return jsontext.dumps(
        [{"op": i.op, "params": i.params, "source": i.source, "reason": i.reason} for i in intents]
    )


_UNADDRESSED = pa.schema([f for f in CHANGE_SCHEMA if f.name not in ("change_id", "change_set_id")])
# A composed change before its set is named: every column but the set's id.
ADDRESSED = pa.schema([f for f in CHANGE_SCHEMA if f.name != "change_set_id"])


def _address(changes: pa.Table) -> pa.Table:
    """Each change's id hashes all its columns; sorted as the set is stored."""
    with duck() as con:
        con.register("changes", changes)
        columns = ", ".join(f.name for f in _UNADDRESSED)
        return con.sql(
            f"SELECT sha256(to_json(struct_pack({columns})))[:24] AS change_id, {columns} FROM changes "
            "ORDER BY namespace, target_kind, target_id"
        ).to_arrow_table()


def joined_sha256(strings: pa.ChunkedArray | pa.Array) -> str:
    """The sha256 hex digest of the strings' UTF-8 bytes one after the other (`"".join(values).encode()`), read
    from the arrays' own data buffers: a 1M first night's 3.34M change ids as Python strings, then joined, were
    ~400 MB at the night's peak."""
    digest = hashlib.sha256()
    update_joined(digest, strings)
    return digest.hexdigest()


def update_joined(digest: Any, strings: pa.ChunkedArray | pa.Array) -> None:
    """Feed the strings' UTF-8 bytes, one after the other, to `digest` (`joined_sha256`, a part at a time)."""
    chunks = strings.chunks if isinstance(strings, pa.ChunkedArray) else [strings]
    for chunk in chunks:
        if chunk.null_count:
            raise ValueError("joined_sha256: a null string has no bytes to hash")
        if len(chunk) == 0:
            continue
        if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            chunk = chunk.cast(pa.string())
        width = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
        offsets = np.frombuffer(chunk.buffers()[1], dtype=width, count=chunk.offset + len(chunk) + 1)
        data = chunk.buffers()[2]
        start, end = int(offsets[chunk.offset]), int(offsets[chunk.offset + len(chunk)])
        digest.update(memoryview(data)[start:end] if data is not None else b"")


def _finish(parts: list[pa.Table], *, as_of: dt.date, job: str, klass: str) -> pa.Table:
    """The set's id hashes its sorted change ids (the parts come in the set's order)."""
    addressed = pa.concat_tables(parts)  # a part per namespace range, and there is always one range
    change_set_id = set_id(as_of, job, klass, joined_sha256(addressed["change_id"]))
    return named(addressed, change_set_id).replace_schema_metadata(
        set_metadata(as_of, job, klass, change_set_id)
    )


def set_id(as_of: dt.date, job: str, klass: str, digest: str) -> str:
    """A set's id: its date, job and class, and the digest of its change ids in order (`joined_sha256`)."""
    return f"{as_of.isoformat()}-{job}-{klass}-{digest[:10]}"


def set_metadata(as_of: dt.date, job: str, klass: str, change_set_id: str) -> dict[str, str]:
    """What a set's Parquet schema carries of it."""
    return {"change_set_id": change_set_id, "review_class": klass, "job": job, "as_of": as_of.isoformat()}


def named(addressed: pa.Table, change_set_id: str) -> pa.Table:
    """Addressed changes (ADDRESSED) with their set's id: CHANGE_SCHEMA."""
    table = addressed.add_column(
        1, "change_set_id", pa.repeat(pa.scalar(change_set_id, pa.string()), addressed.num_rows)
    )
    return table.cast(CHANGE_SCHEMA)


def altered_changes(path: str | Path, change_set_id: str) -> list[str]:
    """Target ids of the stored changes whose content no longer hashes to their `change_id`, and "<set>" when
    the changes no longer hash to the set's id (a change added, dropped or reordered): a stored plan is what
    gets applied, or nothing is. Hashed by DuckDB as it reads the file (a first night's 3.5M changes were 3.3
    GB read whole into Arrow first); the set's digest needs only the id column."""
    columns = ", ".join(f.name for f in _UNADDRESSED)
    with duck() as con:
        bad = con.execute(
            f"SELECT target_id FROM read_parquet(?) WHERE sha256(to_json(struct_pack({columns})))[:24] "
            "IS DISTINCT FROM change_id ORDER BY namespace, target_kind, target_id",
            [str(path)],
        ).fetchall()
    altered = [row[0] for row in bad]
    ids = pq.read_table(path, columns=["change_id"])["change_id"]
    if not change_set_id.endswith(joined_sha256(ids)[:10]):
        altered.append("<set>")
    return altered


def change_set_id_of(table: pa.Table | pa.Schema) -> str:
    schema = table if isinstance(table, pa.Schema) else table.schema
    return (schema.metadata or {})[b"change_set_id"].decode()
