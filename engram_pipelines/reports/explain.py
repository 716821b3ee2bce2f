"""`explain MEMORY_ID`: the memory's lifecycle, from its row, the change sets and the audit log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engram_pipelines.changes.registry import change_set_places
from engram_pipelines.core.duck import duck
from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.store import Store


def explain_memory(store: Store, memory_id: str, warehouse_root: Path | None = None) -> dict[str, Any]:
    row = store.get(memory_id)
    audit = store.audit_rows(target_id=memory_id)
    story: dict[str, Any] = {
        "id": memory_id,
        "exists": row is not None,
        "state": _state(row) if row else None,
        "changes": _changes_touching(store, memory_id, warehouse_root),
        "audit": [
            {
                "at": format_timestamp(a["at"]),
                "actor": a["actor"],
                "change_set_id": a["change_set_id"],
                "change_id": a["change_id"],
                "op": a["op"],
                "after": a["after"],
            }
            for a in audit
        ],
    }
    return story


def _state(row: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "namespace",
        "tier",
        "kind",
        "zone",
        "superseded_by",
        "stale",
        "pinned",
        "score",
        "version",
        "access_count",
        "importance",
        "content",
    )
    state = {k: row[k] for k in keys}
    state["last_accessed_at"] = format_timestamp(row["last_accessed_at"])
    state["markers"] = {
        k: v for k, v in row["metadata"].items() if k not in ("conversation_id", "project_id")
    }
    return state


def _readable(path: Path) -> bool:
    """A set file that is missing or damaged is left out (explain shows what it can; apply refuses it)."""
    try:
        pq.read_metadata(path)
    except (OSError, pa.ArrowException):
        return False
    return True


def _changes_touching(store: Store, memory_id: str, warehouse_root: Path | None) -> list[dict[str, Any]]:
    """Every stored change on this memory, or whose patch names it (a canonical, a contradiction partner)."""
    records = {r.change_set_id: r for r in store.list_change_sets()}
    # The warehouse's own copy first (a copied store and warehouse), else where the set was written.
    paths = [
        p
        for r in records.values()
        if (p := next((f for f in change_set_places(r, warehouse_root) if _readable(f)), None)) is not None
    ]
    if not paths:
        return []
    with duck() as con:
        # Quotes in a path are doubled: a warehouse under "O'Brien's files" is a path like any other.
        files = "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"
        rows = con.execute(
            f"""
            SELECT change_set_id, change_id, target_id, ops, reason, evidence, patch, cluster_id
            FROM read_parquet({files}, union_by_name = true)
            WHERE target_id = ? OR contains(patch, ?) OR contains(intents, ?)
            ORDER BY change_set_id, change_id
            """,
            # The id as the JSON texts hold it (a `"` in it is escaped there).
            [memory_id, json.dumps(memory_id, ensure_ascii=False), json.dumps(memory_id, ensure_ascii=False)],
        ).fetchall()
        ledgers: dict[str, dict[str, tuple[str, str | None]]] = {}
        out = []
        for change_set_id, change_id, target, ops, reason, evidence, patch, cluster in rows:
            ledger = ledgers.setdefault(change_set_id, store.ledger(change_set_id))
            record = records[change_set_id]
            out.append(
                {
                    "change_set_id": change_set_id,
                    "as_of": record.as_of,
                    "snapshot_partition": f"memories/as_of={record.as_of}",
                    "status": record.status,
                    "target_id": target,
                    "role": "target" if target == memory_id else "referenced",
                    "ops": list(ops),
                    "reason": reason,
                    "evidence": json.loads(evidence),
                    "cluster_id": cluster,
                    "outcome": ledger.get(change_id, ("pending", None))[0],
                    "patch": json.loads(patch),
                }
            )
        return out


def render_explanation(story: dict[str, Any]) -> str:
    lines = [f"[bold]memory {story['id']}[/]"]
    if not story["exists"]:
        lines.append("[red]not in the store[/] (purged? `engram-pipelines restore` brings it back)")
    else:
        s = story["state"]
        visible = s["zone"] == "active" and s["superseded_by"] is None
        lines.append(
            f"{s['namespace']} · {s['tier']}/{s['kind']} · zone {s['zone']} · "
            f"{'[green]in recall[/]' if visible else '[yellow]hidden from default recall[/]'} · "
            f"version {s['version']} · score {s['score']} · accessed {s['access_count']}x "
            f"(last {s['last_accessed_at']}) · pinned {s['pinned']}"
        )
        lines.append(f"  “{s['content']}”")
        for key, value in s["markers"].items():
            lines.append(f"  marker {key}: {json.dumps(value, default=str)}")
    lines.append("")
    lines.append(f"[bold]changes ({len(story['changes'])})[/]")
    for c in story["changes"]:
        lines.append(
            f"  {c['as_of']} {c['change_set_id']} [{c['status']}] {c['role']}: {'+'.join(c['ops'])} -> "
            f"{c['outcome']}; {c['reason']}" + (f" (cluster {c['cluster_id']})" if c["cluster_id"] else "")
        )
        for ev in c["evidence"]:
            lines.append(f"      evidence: {json.dumps(ev, default=str)}")
        lines.append(f"      from snapshot {c['snapshot_partition']}")
    lines.append("")
    lines.append(f"[bold]audit ({len(story['audit'])})[/]")
    for a in story["audit"]:
        lines.append(f"  {a['at']} {a['actor']} {a['op']} ({a['change_set_id']})")
    return "\n".join(lines)
