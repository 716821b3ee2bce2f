"""Compression (seed 001): a cluster of related low-importance memories becomes one `summary` row.

Eligible rows: episodic, active, not superseded, not pinned, not in a contradiction (a contradicted row stays
visible on both sides, so it is never archived into a summary), importance <= `compression.max_importance` and
decay score <= `compression.max_score` (the decay analysis' score of this partition; the row's stored score
when the scores table has none; no score at all is not eligible). High-importance and pinned rows are never
compressed: the importance filter is what makes the operation safe (seed 001).

Clusters: complete-linkage clusters of eligible rows at >= `compression.similarity_threshold` (every member
related to every other, no chaining; see `semantic.coherent_clusters`), of at least `min_cluster_size`,
settled in one run (`settled_clusters`: the rows left over are clustered again until nothing is found).

The summary is extractive (no LLM) and deterministic: the medoid's content first, then the member least
similar to everything already taken (the most distinct), and so on; exact repeats (case and spacing ignored)
are skipped and the text stops before `SUMMARY_MAX_CHARS` (the medoid is always kept, truncated if needed).

Intents, all review class `gated` (seed 001; applied only after approval):
- `insert_memory` of the summary: id `sum-` + sha256(namespace, sorted member ids)[:20], kind `summary`, tier
  `ltm` if any member is, importance = the members' maximum, tags = their union (medoid first), created_at =
  the as-of instant, `metadata.summary` = {members, representative, method, at};
- `move_zone` active -> archived for every member (archived, not deleted: still retrievable by filter);
- a `summarized-into` link member -> summary (weight: the member's cosine to the medoid).

Rerunning on the applied store finds nothing: the members are archived, the summary is not episodic.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.knowledge.clusters import CoherentCluster, coherent_clusters
from engram_pipelines.analyses.knowledge.rows import rows_by_id
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA, intents_table
from engram_pipelines.config.model import CompressionConfig, Config
from engram_pipelines.core.duck import duck
from engram_pipelines.core.timestamps import format_timestamp

SOURCE = "compression"
SUMMARY_MAX_CHARS = 600
_ELLIPSIS = "…"

COMPRESSION_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("summary_id", pa.string(), nullable=False),
        pa.field("member", pa.string(), nullable=False),
        pa.field("representative", pa.bool_(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),  # cosine to the representative
        pa.field("importance", pa.float64(), nullable=False),
        pa.field("decay_score", pa.float64()),
        pa.field("in_summary", pa.bool_(), nullable=False),  # its text made it into the summary
    ]
)


def compression(
    memories: pa.Table, pairs: pa.Table, scores: pa.Table, config: Config, at: dt.datetime
) -> AnalysisResult:
    """Summaries of clusters of low-importance memories; its table has COMPRESSION_SCHEMA, its intents are gated."""
    cfg = config.compression
    eligible = eligible_rows(memories, scores, cfg)
    clusters = settled_clusters(pairs, eligible, cfg)
    if not clusters:
        return AnalysisResult(table=COMPRESSION_SCHEMA.empty_table(), intents=INTENT_SCHEMA.empty_table())
    facts = rows_by_id(eligible, {m for c in clusters for m in c.members})
    result: list[dict[str, Any]] = []
    intents: list[dict[str, Any]] = []
    for cluster in clusters:
        order = distinct_first(cluster)
        content, included = extractive_summary([facts[m]["content"] for m in order], SUMMARY_MAX_CHARS)
        summary_id = summary_id_for(cluster.namespace, cluster.members)
        result.extend(_result_rows(cluster, summary_id, facts, {order[i] for i in included}))
        intents.extend(_cluster_intents(cluster, summary_id, content, facts, at))
    return AnalysisResult(
        table=pa.Table.from_pylist(result, schema=COMPRESSION_SCHEMA), intents=intents_table(intents)
    )


def settled_clusters(pairs: pa.Table, eligible: pa.Table, cfg: CompressionConfig) -> list[CoherentCluster]:
    """Clusters of at least `min_cluster_size`, repeated on the rows left over until a pass finds none.

    Once a cluster's members are archived, the next run clusters the rows left over, and their order (by degree)
    no longer counts the archived neighbours, so it can find clusters this pass did not. Repeating the pass here
    reaches the same outcome as successive runs in one, so a rerun on the applied store finds nothing.
    """
    out: list[CoherentCluster] = []
    remaining = eligible
    while True:
        found = [
            c
            for c in coherent_clusters(pairs, remaining, cfg.similarity_threshold, prefix="sum")
            if len(c.members) >= cfg.min_cluster_size
        ]
        if not found:
            return sorted(out, key=lambda c: (c.namespace, c.cluster_id))
        out.extend(found)
        taken = pa.array(sorted({m for c in found for m in c.members}), pa.string())
        remaining = remaining.filter(pc.invert(pc.is_in(remaining["id"], value_set=taken)))


def eligible_rows(memories: pa.Table, scores: pa.Table, cfg: CompressionConfig) -> pa.Table:
    """The rows compression may touch, with what the summary needs (id, namespace, content, tier, ...)."""
    with duck() as con:
        con.register(
            "m",
            memories.select(
                [
                    "id",
                    "namespace",
                    "tier",
                    "kind",
                    "content",
                    "importance",
                    "score",
                    "zone",
                    "superseded_by",
                    "pinned",
                    "tags",
                    "metadata",
                ]
            ),
        )
        con.register("s", scores.select(["id", "score"]))
        return con.sql(
            f"""
            SELECT m.id, m.namespace, m.tier, m.content, m.importance, m.tags,
                coalesce(s.score, m.score) AS decay_score
            FROM m LEFT JOIN s USING (id)
            WHERE m.kind = 'episodic' AND m.zone = 'active' AND m.superseded_by IS NULL AND NOT m.pinned
              AND json_extract(m.metadata, '$.contradictionWith') IS NULL
              AND m.importance <= {float(cfg.max_importance)!r}
              AND coalesce(s.score, m.score) <= {float(cfg.max_score)!r}
            ORDER BY m.id
            """
        ).to_arrow_table()


def summary_id_for(namespace: str, members: tuple[str, ...] | list[str]) -> str:
    key = "\x1f".join([namespace, *sorted(members)])
    return "sum-" + hashlib.sha256(key.encode()).hexdigest()[:20]


def distinct_first(cluster: CoherentCluster) -> list[str]:
    """The medoid, then repeatedly the member least similar to everything taken (ties: lowest id)."""
    taken = [cluster.medoid]
    rest = sorted(set(cluster.members) - {cluster.medoid})
    while rest:
        nearest = {m: max(cluster.score(m, t) for t in taken) for m in rest}
        pick = min(rest, key=lambda m: (nearest[m], m))
        taken.append(pick)
        rest.remove(pick)
    return taken


def extractive_summary(contents: list[str], max_chars: int) -> tuple[str, list[int]]:
    """The contents in order, each ended as a sentence, repeats skipped, stopping before `max_chars`.

    Returns the text and the positions of the contents it holds. The first is always kept (truncated with an
    ellipsis when it alone is too long).
    """
    pieces: list[str] = []
    included: list[int] = []
    seen: set[str] = set()
    length = 0
    for position, content in enumerate(contents):
        sentence = _as_sentence(content)
        key = sentence.casefold()
        if not sentence or key in seen:
            continue
        added = len(sentence) + (1 if pieces else 0)
        if pieces and length + added > max_chars:
            break
        if not pieces and added > max_chars:
            sentence = sentence[: max_chars - len(_ELLIPSIS)].rstrip() + _ELLIPSIS
            added = len(sentence)
        pieces.append(sentence)
        included.append(position)
        seen.add(key)
        length += added
    return " ".join(pieces), included


def _as_sentence(content: str) -> str:
    text = re.sub(r"\s+", " ", content).strip()
    return text if not text or text[-1] in ".!?…" else text + "."


def _result_rows(
    cluster: CoherentCluster, summary_id: str, facts: dict[str, dict[str, Any]], included: set[str]
) -> list[dict[str, Any]]:
    return [
        {
            "cluster_id": cluster.cluster_id,
            "namespace": cluster.namespace,
            "summary_id": summary_id,
            "member": m,
            "representative": m == cluster.medoid,
            "score": round(cluster.score(m, cluster.medoid), 6),
            "importance": facts[m]["importance"],
            "decay_score": facts[m]["decay_score"],
            "in_summary": m in included,
        }
        for m in cluster.members
    ]


def _summary_row(
    cluster: CoherentCluster, summary_id: str, content: str, facts: dict[str, dict[str, Any]], when: str
) -> dict[str, Any]:
    members = [cluster.medoid, *sorted(set(cluster.members) - {cluster.medoid})]
    tags: list[str] = []
    for member in members:
        tags.extend(t for t in json.loads(facts[member]["tags"]) if t not in tags)
    return {
        "id": summary_id,
        "namespace": cluster.namespace,
        "tier": "ltm" if any(facts[m]["tier"] == "ltm" for m in members) else "stm",
        "kind": "summary",
        "content": content,
        "importance": max(float(facts[m]["importance"]) for m in members),
        "created_at": when,
        "updated_at": when,
        "tags": tags,
        "metadata": {
            "summary": {
                "members": sorted(cluster.members),
                "representative": cluster.medoid,
                "method": "extractive",
                "cluster_id": cluster.cluster_id,
                "at": when,
            }
        },
    }


def _cluster_intents(
    cluster: CoherentCluster,
    summary_id: str,
    content: str,
    facts: dict[str, dict[str, Any]],
    at: dt.datetime,
) -> list[dict[str, Any]]:
    when = format_timestamp(at)
    base = {
        "namespace": cluster.namespace,
        "source": SOURCE,
        "review_class": "gated",
        "cluster_id": cluster.cluster_id,
    }
    evidence = {
        "rule": "compression",
        "cluster_id": cluster.cluster_id,
        "summary": summary_id,
        "members": sorted(cluster.members),
        "max_importance": max(float(facts[m]["importance"]) for m in cluster.members),
    }
    rows: list[dict[str, Any]] = [
        {
            **base,
            "target_id": summary_id,
            "op": "insert_memory",
            "params": {"row": _summary_row(cluster, summary_id, content, facts, when)},
            "reason": f"summary of {len(cluster.members)} related low-importance memories",
            "evidence": evidence,
        }
    ]
    for member in cluster.members:
        score = round(cluster.score(member, cluster.medoid), 6)
        reason = f"compressed into {summary_id} (cosine {score:.3f} to its representative)"
        member_evidence = {
            **evidence,
            "score": score,
            "importance": facts[member]["importance"],
            "decay_score": facts[member]["decay_score"],
        }
        rows.append(
            {
                **base,
                "target_id": member,
                "op": "move_zone",
                "params": {"from": "active", "to": "archived"},
                "reason": reason,
                "evidence": member_evidence,
            }
        )
        rows.append(
            {
                **base,
                "target_kind": "link",
                "target_id": f"{member}|{summary_id}|summarized-into",
                "op": "upsert_link",
                "params": {
                    "src_id": member,
                    "dst_id": summary_id,
                    "kind": "summarized-into",
                    "weight": score,
                    "origin": SOURCE,
                },
                "reason": reason,
                "evidence": member_evidence,
            }
        )
    return rows
