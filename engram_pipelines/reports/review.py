"""Review reports of a change set: Markdown, and a single self-contained HTML page.

Changes are grouped by cluster (a canonical and its losers), then by contradiction pair, then the rest,
so a reviewer sees each decision whole: the canonical, the losers, their scores, the tag union, the text.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engram_pipelines.changes.intents import REVIEWED_CLASSES
from engram_pipelines.changes.registry import read_changes
from engram_pipelines.core import mdtext
from engram_pipelines.store import ChangeSetRecord, Store, redact


def _clusters(rows: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
    """Memory changes grouped by cluster, and the rest; a cluster's links are shown through its losers."""
    clusters: dict[str, list[dict[str, Any]]] = defaultdict(list)
    rest = []
    for row in rows:
        if row.get("cluster_id") and row["target_kind"] == "link":
            continue
        if row.get("cluster_id"):
            clusters[row["cluster_id"]].append(row)
        else:
            rest.append(row)
    return dict(sorted(clusters.items())), rest


def _commands(record: ChangeSetRecord, url: str) -> list[str]:
    store = f" --store {redact(url)}"
    if record.status == "proposed" and record.review_class in REVIEWED_CLASSES:
        return [
            f"engram-pipelines approve {record.change_set_id}{store}",
            f"engram-pipelines apply {record.change_set_id}{store}",
        ]
    if record.status in ("proposed", "approved"):
        return [f"engram-pipelines apply {record.change_set_id}{store}"]
    if record.status == "applied":
        return [f"engram-pipelines revert {record.change_set_id}{store}"]
    return []


def _content(memories: dict[str, dict[str, Any]], memory_id: str | None) -> str:
    if memory_id is None or memory_id not in memories:
        return "(not in the store)"
    return str(memories[memory_id]["content"])


def _when(memories: dict[str, dict[str, Any]], memory_id: str | None) -> str:
    """When the memory was written (a merge or a contradiction reads differently a year apart)."""
    row = memories.get(memory_id or "")
    created = row.get("created_at") if row else None
    return f"written {created:%Y-%m-%d %H:%M}" if created is not None else ""


def _scores(row: dict[str, Any]) -> str:
    scores = []
    for item in json.loads(row["evidence"]):
        for key in ("score", "cosine", "decay_score"):
            if key in item:
                scores.append(
                    f"{key} {item[key]:.3f}" if isinstance(item[key], float) else f"{key} {item[key]}"
                )
    return ", ".join(scores)


def _canonical_of(members: list[dict[str, Any]]) -> str | None:
    for row in members:
        patch = json.loads(row["patch"])
        if isinstance(patch, dict) and patch.get("superseded_by"):
            return str(patch["superseded_by"])
    return None


@dataclass
class _ClusterView:
    """One cluster as a reviewer reads it: the row that stays (or is created) and the rows that go."""

    hub_label: str
    hub_id: str | None
    hub_text: str
    member_label: str
    members: list[dict[str, Any]]
    tags: list[str]


def _view(members: list[dict[str, Any]], memories: dict[str, dict[str, Any]]) -> _ClusterView:
    created = next((r for r in members if r["op"] == "insert"), None)
    if created is not None:  # compression: a new summary row; its members are archived into it
        text = str(json.loads(created["patch"]).get("content", ""))
        rest = [r for r in members if r is not created]
        return _ClusterView("summary (new)", created["target_id"], text, "archived into it", rest, [])
    canonical = _canonical_of(members)
    tags: list[str] = next(
        (json.loads(r["patch"]).get("tags", []) for r in members if r["target_id"] == canonical), []
    )
    rest = [r for r in members if r["target_id"] != canonical]
    return _ClusterView("canonical", canonical, _content(memories, canonical), "loser", rest, tags)


def review_markdown(
    record: ChangeSetRecord, rows: list[dict[str, Any]], memories: dict[str, dict[str, Any]], url: str
) -> str:
    out = [
        f"# Change set {record.change_set_id}",
        "",
        f"- status: **{record.status}** ({record.review_class}), as of {record.as_of}, job {record.job}",
        f"- changes: {record.total}; by op: "
        + (", ".join(f"{k} {v}" for k, v in record.counts.get("by_op", {}).items()) or "none"),
        "",
    ]
    clusters, rest = _clusters(rows)
    if clusters:
        out += ["## Clusters", ""]
    for cluster_id, members in clusters.items():
        view = _view(members, memories)
        hub = f"{mdtext.inline(view.hub_id)}: {mdtext.inline(view.hub_text)}"
        out += [f"### {mdtext.inline(cluster_id)}", "", f"- {view.hub_label} {hub}"]
        if view.tags:
            out.append(f"- tag union onto the canonical: {mdtext.inline(', '.join(view.tags))}")
        for row in view.members:
            out.append(
                f"- {view.member_label} {mdtext.inline(row['target_id'])} ({_scores(row)}; "
                f"{'+'.join(row['ops'])}): {mdtext.inline(_content(memories, row['target_id']))}"
            )
        out.append("")
    if rest:
        out += ["## Other changes", "", "| target | namespace | ops | reason |", "|---|---|---|---|"]
        for row in rest:
            reason, namespace = mdtext.inline(row["reason"]), mdtext.inline(row["namespace"])
            out.append(
                f"| {mdtext.inline(row['target_id'])} | {namespace} | {'+'.join(row['ops'])} | {reason} |"
            )
        out.append("")
    commands = _commands(record, url)
    if commands:
        out += ["## Next step", "", "```", *commands, "```", ""]
    return "\n".join(out)


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2rem;color:#1d2330;background:#f7f8fa}
h1{font-size:1.4rem} .meta{color:#555} .card{background:#fff;border:1px solid #dde;border-radius:8px;
padding:1rem;margin:1rem 0} .pair{display:grid;grid-template-columns:1fr 1fr;gap:1rem}
.canon{border-left:4px solid #2a7} .loser{border-left:4px solid #c73;padding-left:.5rem;margin:.4rem 0}
code{background:#eef;padding:0 .25rem;border-radius:3px} table{border-collapse:collapse;width:100%;background:#fff}
td,th{border:1px solid #dde;padding:.3rem .5rem;text-align:left;font-size:.9rem} .cmd{background:#1d2330;
color:#e8f0ff;padding:.8rem;border-radius:6px;font-family:monospace;white-space:pre} .tag{display:inline-block;
background:#e6f0ff;border-radius:10px;padding:0 .5rem;margin:0 .2rem;font-size:.85rem}
.filters{margin:1rem 0} select{margin-right:1rem}
"""

_SCRIPT = """
function applyFilters(){const ns=document.getElementById('ns').value;const op=document.getElementById('op').value;
document.querySelectorAll('[data-ns]').forEach(e=>{const okNs=!ns||e.dataset.ns===ns;
const okOp=!op||e.dataset.ops.split(' ').includes(op);e.style.display=(okNs&&okOp)?'':'none';});}
"""


def review_html(
    record: ChangeSetRecord, rows: list[dict[str, Any]], memories: dict[str, dict[str, Any]], url: str
) -> str:
    e = html.escape
    clusters, rest = _clusters(rows)
    namespaces = sorted({r["namespace"] for r in rows})
    ops = sorted({op for r in rows for op in r["ops"]})
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>Change set {e(record.change_set_id)}</title><style>{_STYLE}</style><script>{_SCRIPT}</script>",
        "</head><body>",
        f"<h1>Change set <code>{e(record.change_set_id)}</code></h1>",
        f"<p class='meta'>status <b>{e(record.status)}</b> ({e(record.review_class)}), as of {e(record.as_of)}, "
        f"job {e(record.job)}, {record.total} changes</p>",
        "<p>By op: "
        + (", ".join(f"{e(k)} {v}" for k, v in record.counts.get("by_op", {}).items()) or "none")
        + "</p>",
        "<div class='filters'>Namespace <select id='ns' onchange='applyFilters()'><option value=''>all</option>"
        + "".join(f"<option>{e(n)}</option>" for n in namespaces)
        + "</select> Op <select id='op' onchange='applyFilters()'><option value=''>all</option>"
        + "".join(f"<option>{e(o)}</option>" for o in ops)
        + "</select></div>",
    ]
    if clusters:
        parts.append(f"<h2>Clusters ({len(clusters)})</h2>")
    for cluster_id, members in clusters.items():
        view = _view(members, memories)
        member_ops = " ".join(sorted({op for r in members for op in r["ops"]}))
        parts.append(
            f"<div class='card cluster' data-ns='{e(members[0]['namespace'])}' data-ops='{e(member_ops)}'>"
            f"<h3>{e(cluster_id)}</h3><div class='pair'><div class='canon'><b>{e(view.hub_label)}</b> "
            f"<code>{e(str(view.hub_id))}</code> <small>{e(_when(memories, view.hub_id))}</small>"
            f"<p>{e(view.hub_text)}</p>"
        )
        if view.tags:
            parts.append("tag union: " + "".join(f"<span class='tag'>{e(t)}</span>" for t in view.tags))
        parts.append("</div><div>")
        for row in view.members:
            parts.append(
                f"<div class='loser'><b>{e(view.member_label)}</b> <code>{e(row['target_id'])}</code> "
                f"<small>{e(_when(memories, row['target_id']))}; {e(_scores(row))}</small>"
                f"<p>{e(_content(memories, row['target_id']))}</p></div>"
            )
        parts.append("</div></div></div>")
    # Beside the merges: the pairs flagged as contradicting, and the older rows a contradiction supersedes.
    contradictions = [
        r for r in rest if "flag_contradiction" in r["ops"] or "contradiction" in (r.get("source") or "")
    ]
    if contradictions:
        parts.append(f"<h2>Contradictions ({len(contradictions)})</h2>")
        for row in contradictions:
            for intent in json.loads(row["intents"]):
                other = intent["params"].get("with") or intent["params"].get("by")
                if other is None:
                    continue
                side = "".join(
                    f"<div><code>{e(i)}</code> <small>{e(_when(memories, i))}</small>"
                    f"<p>{e(_content(memories, i))}</p></div>"
                    for i in (row["target_id"], other)
                )
                parts.append(
                    f"<div class='card' data-ns='{e(row['namespace'])}' data-ops='{e(' '.join(row['ops']))}'>"
                    f"<p><b>{e(intent['op'])}:</b> {e(intent['reason'])}</p><div class='pair'>{side}</div></div>"
                )
    others = [r for r in rest if r not in contradictions]
    if others:
        parts.append(
            f"<h2>Other changes ({len(others)})</h2><table><tr><th>target</th><th>namespace</th>"
            "<th>ops</th><th>reason</th><th>outcome</th></tr>"
        )
        for row in others:
            parts.append(
                f"<tr data-ns='{e(row['namespace'])}' data-ops='{e(' '.join(row['ops']))}'>"
                f"<td><code>{e(row['target_id'])}</code></td><td>{e(row['namespace'])}</td>"
                f"<td>{e('+'.join(row['ops']))}</td><td>{e(row['reason'])}</td><td>{e(row.get('outcome', ''))}</td></tr>"
            )
        parts.append("</table>")
    commands = _commands(record, url)
    if commands:
        parts.append("<h2>Next step</h2><div class='cmd'>" + e("\n".join(commands)) + "</div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def referenced_ids(rows: list[dict[str, Any]]) -> list[str]:
    """Every memory a review shows: targets, canonicals, link ends and contradiction partners."""
    ids = {r["target_id"] for r in rows if r["target_kind"] == "memory"}
    for row in rows:
        patch = json.loads(row["patch"])
        if isinstance(patch, dict):
            ids.update(
                patch[k] for k in ("superseded_by", "src_id", "dst_id") if isinstance(patch.get(k), str)
            )
        ids.update(i["params"]["with"] for i in json.loads(row["intents"]) if i["op"] == "flag_contradiction")
    return sorted(ids)


# A review page lists every change with both sides of it; past this many changes it is too long to read in a
# browser, and `changes show ID` (filtered, paged) is the way in.
REVIEW_PAGE_MAX_CHANGES = 5000


def write_review_page(store: Store, record: ChangeSetRecord, folder: Path, url: str) -> Path | None:
    """`<folder>/review-<set>.html` for one set (None when it is empty or longer than a page holds; such a set
    is not read at all: a first night's held set can hold hundreds of thousands)."""
    if not 0 < record.total <= REVIEW_PAGE_MAX_CHANGES:
        return None
    rows = read_changes(record).to_pylist()
    path = folder / f"review-{record.change_set_id}.html"
    path.write_text(review_html(record, rows, store.read_memories(referenced_ids(rows)), url))
    return path
