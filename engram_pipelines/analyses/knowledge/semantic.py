"""Semantic extraction (seed 003): repeated episodic patterns become context-free `semantic` nodes.

Deterministic, no LLM. One run, per namespace (nothing ever crosses one) and per embedding model:

1. **Clusters.** Episodic rows that may *seed* (`_seeds`), paired at >= `cluster_similarity_threshold`, form
   *coherent* clusters (`coherent_clusters`): centres are visited by degree, then summed similarity, then id; a
   centre takes its unassigned neighbours best-first, each only if it is at or above the threshold to every
   member already taken (complete linkage, no chaining). A row seeds when it was active as the night started
   (a row tonight's retention archives still seeds: the node keeps what fades), is in no contradiction (a
   replaced or disputed fact never becomes knowledge) and states knowledge rather than chit-chat
   (`knowledge.carries_knowledge`); a row merged into a canonical still seeds (the canonical holds it). A node's text is its
   most informative source (`knowledge.informativeness`; the medoid's order breaks ties). Once a row is a
   source, archiving it changes nothing: archived sources stay evidence for the cascade.
2. **Dissent first.** Members are taken most central first (summed similarity, then id); one that contradicts
   a member already taken (a `contradicts` link either way, or `metadata.contradictionWith`) is not evidence:
   it is recorded as dissent on the node. The medoid comes first, so whatever contradicts it is dissent; so is
   a new member that contradicts one of the reinforced node's sources.
3. **Qualify.** A cluster counts when it has at least `min_sources_for_corroborated` members from at least two
   contexts and enough context variability: distinct (`conversation_id`, `project_id`) pairs from the members' metadata / members >=
   `context_variability_threshold`. A missing id is a value like any other, so memories without context
   metadata share one context and never corroborate each other.
4. **Reinforce or create.** The cluster centroid (mean of its unit vectors) is compared with the centroid of
   every node of the namespace and model (the mean of its valid sources' vectors; the node's own vector when no
   source has one). At >= `cluster_similarity_threshold` the best node is reinforced by the members that are
   not yet a source of any node. Otherwise a node is created from those unclaimed members, if they qualify on
   their own. A memory is the source of at most one node, so a rerun finds nothing new to count.
5. **Maintain every node**, in this order: *cascade* (sources replaced by a row that contradicts them, queued
   for purge or gone scale the confidence by valid now / valid before, so the product over time is valid /
   total; a source merged into its canonical stays evidence: the canonical says everything it says); *reinforcement*
   (per new source: confidence += (1 - c) x 0.1, probability += (1 - p) x 0.05; a node's state therefore does
   not depend on how its sources were batched); *anti-anchoring* (not reinforced for `stale_threshold_days`:
   confidence x `stale_decay_rate`, once per as-of instant); the *single-source ceiling* (one valid source or
   none: confidence <= `single_source_ceiling`); the *tier*; *dissent* (memories outside the sources that
   contradict a valid source or the node are appended, never removed).
6. **Tiers** (ICD 203), the highest that holds, recomputed each run (losing evidence demotes):
   baseline (>= 8 valid sources, confidence >= 0.8), assessed (>= 4, >= 2 cycles, variability >= threshold),
   corroborated (>= 2), raw. A *cycle* is an as-of instant at which the node got evidence (created or
   reinforced), counted once per instant, so a node is never rewritten just because a night passed.
7. **Compression marks.** Active, unsuperseded episodic rows at >= `compression_threshold` to an assessed or
   baseline node get `metadata.semanticCompressed` = {node, score, at} (a marker only: nothing is hidden).

A new node is an `insert_memory` (id `sem-` + sha256(namespace, sorted source ids)[:20], kind `semantic`, tier
`ltm`, content = its most informative source's content, importance = the sources' maximum, tags every source shares,
created_at = the as-of instant) plus one `derived-from` link node -> source per source (weight: the source's
cosine to the node centroid). The node's state is `metadata.semantic`:

    {"probability", "confidence", "tier", "sources": [ids, sorted], "lost": [ids no longer valid],
     "contexts", "variability", "cycles", "cycleAt", "reinforcedAt", "decayedAt", "createdAt",
     "representative", "dissent": [{"id", "reason", "at"}]}

Reinforcement, cascade, anti-anchoring, tier and dissent are one `set_metadata` on the node. Only rows whose
`metadata.semantic` this module wrote are nodes here (rows promoted to `semantic` by seed 004's rule are not).
Nothing here hides a row: every op is an insert, a link upsert or a metadata write. Review class `auto`.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.knowledge.chitchat import informativeness
from engram_pipelines.analyses.knowledge.clusters import CoherentCluster, coherent_clusters
from engram_pipelines.analyses.knowledge.nodes import (
    PRIOR_CONFIDENCE,
    PRIOR_PROBABILITY,
    ROUND_DIGITS,
    NodeState,
    node_id_for,
    reinforce,
    tier_of,
)
from engram_pipelines.analyses.knowledge.rows import (
    VectorIndex,
    contradiction_partners,
    memory_facts,
    rows_by_id,
)
from engram_pipelines.analyses.knowledge.texts import cached_text_facts
from engram_pipelines.analyses.merges.containment import SAME_FACT_SCHEMA, same_fact_pairs
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.changes.intents import INTENT_SCHEMA, intents_table
from engram_pipelines.config.model import Config, SemanticConfig
from engram_pipelines.core.timestamps import format_timestamp, parse_timestamp

SOURCE = "semantic"


SEMANTIC_SCHEMA = pa.schema(
    [
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("node_id", pa.string()),  # null for a rejected cluster
        pa.field("cluster_id", pa.string()),
        pa.field("action", pa.string(), nullable=False),  # create | update | reject
        pa.field("changes", pa.list_(pa.string()), nullable=False),
        pa.field("tier", pa.string()),
        pa.field("previous_tier", pa.string()),
        pa.field("probability", pa.float64()),
        pa.field("confidence", pa.float64()),
        pa.field("sources", pa.int64(), nullable=False),  # valid sources (members for a rejected cluster)
        pa.field("new_sources", pa.int64(), nullable=False),
        pa.field("contexts", pa.int64(), nullable=False),
        pa.field("variability", pa.float64(), nullable=False),
        pa.field("cycles", pa.int64()),
        pa.field("marked", pa.int64(), nullable=False),  # episodic rows newly marked semanticCompressed
        pa.field("representative", pa.string()),
        pa.field("reason", pa.string(), nullable=False),
    ]
)


@dataclass
class _NodeWork:
    node_id: str
    namespace: str
    before: NodeState | None  # None: created in this run
    state: NodeState
    model: str | None
    new_sources: list[str] = field(default_factory=list)
    pending_dissent: dict[str, str] = field(default_factory=dict)  # id -> reason
    cluster_ids: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    marks: list[tuple[str, float]] = field(default_factory=list)
    insert_row: dict[str, Any] | None = None


@dataclass
class _Run:
    cfg: SemanticConfig
    at: dt.datetime
    facts: dict[str, dict[str, Any]]
    partners: dict[str, set[str]]
    vectors: VectorIndex
    nodes: dict[str, _NodeWork]
    claimed: set[str]
    rejects: list[dict[str, Any]] = field(default_factory=list)
    _centroids: dict[tuple[str, str | None, bool], np.ndarray | None] = field(default_factory=dict)
    _matrices: dict[tuple[str, str | None], tuple[list[str], np.ndarray]] = field(default_factory=dict)
    # The nodes that existed before this run (those given: created ones are added later), by namespace and model,
    # in id order: scanning every node for each namespace and model took 5.6 s at 1M memories (28k nodes, 400
    # namespaces).
    _existing: dict[tuple[str, str | None], list[_NodeWork]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for node_id in sorted(self.nodes):
            work = self.nodes[node_id]
            self._existing.setdefault((work.namespace, work.model), []).append(work)

    @property
    def when(self) -> str:
        return format_timestamp(self.at)

    def is_valid_source(self, memory_id: str) -> bool:
        """Not queued for purge, and not replaced: a row merged into a canonical (superseded by a row it does
        not contradict) stays evidence, since the canonical says everything it says; a row superseded by a
        contradicting one is lost. So tonight's gated merges, applied after the night, cascade nothing."""
        row = self.facts.get(memory_id)
        if row is None or row["zone"] == "purge_queue":
            return False
        return not _replaced(memory_id, row["superseded_by"], self.partners)

    def contexts(self, ids: Sequence[str]) -> int:
        return len({self.facts[i]["context"] for i in ids if i in self.facts})

    def qualifies(self, ids: Sequence[str]) -> tuple[bool, str]:
        n = len(ids)
        if n < self.cfg.min_sources_for_corroborated:
            return False, f"{n} source(s) < {self.cfg.min_sources_for_corroborated}"
        contexts = self.contexts(ids)
        if contexts < 2:
            # Repetition inside one conversation is one context, whatever the ratio (2 rows, 1 context = 0.5).
            return False, f"{n} memories from one context"
        variability = contexts / n
        if variability < self.cfg.context_variability_threshold:
            return False, (
                f"context variability {variability:.2f} < {self.cfg.context_variability_threshold} "
                f"({contexts} context(s) for {n} memories)"
            )
        return True, ""

    def node_centroid(self, work: _NodeWork, *, with_new: bool = False) -> np.ndarray | None:
        """Mean of the node's sources valid *now* (and, with_new, this run's new ones); else its own vector.

        Validity is read from the snapshot, not from the stored `lost` list, so the centroid a rerun sees on
        the applied store is the one this run used.
        """
        with_new = with_new and bool(work.new_sources)  # nothing new: the centroid of the sources
        sources = [*work.state.sources, *(work.new_sources if with_new else [])]
        key = (work.node_id, work.model, with_new)
        if key not in self._centroids:
            valid = sorted({s for s in sources if self.is_valid_source(s)})
            centroid = self.vectors.centroid(valid, work.model)
            if centroid is None:
                centroid = self.vectors.centroid([work.node_id], work.model)
            self._centroids[key] = centroid
        return self._centroids[key]

    def best_node(self, namespace: str, model: str | None, centroid: np.ndarray | None) -> tuple[str, float]:
        """The existing node of this namespace and model closest to `centroid`, if at the threshold."""
        if centroid is None:
            return "", 0.0
        ids, matrix = self._node_matrix(namespace, model)
        if not ids:
            return "", 0.0
        similarity = matrix @ centroid
        best = int(np.argmax(similarity))  # first maximum: ids are sorted, so ties go to the lowest id
        if similarity[best] < self.cfg.cluster_similarity_threshold:
            return "", 0.0
        return ids[best], float(similarity[best])

    def _node_matrix(self, namespace: str, model: str | None) -> tuple[list[str], np.ndarray]:
        """Centroids of the nodes that existed before this run, per namespace and model (built once)."""
        key = (namespace, model)
        if key not in self._matrices:
            ids, rows = [], []
            for work in self._existing.get(key, []):
                centroid = self.node_centroid(work)
                if centroid is not None:
                    ids.append(work.node_id)
                    rows.append(centroid)
            self._matrices[key] = (ids, np.stack(rows) if rows else np.zeros((0, 1), dtype=np.float32))
        return self._matrices[key]


def semantic_extraction(
    memories: pa.Table,
    links: pa.Table,
    pairs: pa.Table,
    vectors: pa.Table | Callable[[pa.Array], pa.Table],
    config: Config,
    at: dt.datetime,
    *,
    fading: pa.Array | None = None,
    cache_root: Path | None = None,
) -> AnalysisResult:
    """Create, reinforce and maintain semantic nodes; its table has SEMANTIC_SCHEMA.

    `vectors`: the partition's vectors, or a function that reads those of the ids it is given: only the rows
    the run looks up are read (nodes, their sources, the rows that may cluster; then the rows compression may
    mark), about a quarter of them at 1M memories. `memories` may carry tonight's projected transitions;
    `fading` names the rows that were active when the night started and that tonight's retention archives:
    they still seed (a node keeps what fades). `cache_root` (the warehouse): texts are parsed once per distinct
    content across nights (`texts`).
    """
    cfg = config.semantic
    facts = memory_facts(memories)
    states = _node_states(facts)
    partners = contradiction_partners(memories, links)
    episodic = facts.filter(pc.equal(facts["kind"], "episodic"))
    close = pairs.filter(pc.greater_equal(pairs["score"], cfg.cluster_similarity_threshold))
    candidates = _seeds(episodic, close, fading, partners, cache_root)
    if isinstance(vectors, pa.Table):
        index, load = VectorIndex(vectors), None
    else:
        looked_up = {i for row, state in states for i in (row["id"], state.representative, *state.sources)}
        looked_up.update(candidates["id"].to_pylist())
        index, load = VectorIndex(vectors(pa.array(sorted(looked_up), pa.string()))), vectors
    run = _start_run(facts, states, partners, index, cfg, at)
    clusters = coherent_clusters(
        _repeating(close, candidates), candidates, cfg.cluster_similarity_threshold, prefix="sem"
    )
    run.facts.update(rows_by_id(facts, {m for c in clusters for m in c.members} - run.facts.keys()))
    for cluster in clusters:
        _absorb(cluster, run)
    _drop_existing_ids(run, facts)
    for node_id in sorted(run.nodes):
        _maintain(run.nodes[node_id], run)
    _mark_compressed(run, episodic.filter(episodic["live"]), load)
    works = [run.nodes[n] for n in sorted(run.nodes)]
    return AnalysisResult(table=_result_table(works, run.rejects, cfg), intents=_intents(works, run))


def _replaced(memory_id: str, superseded_by: str | None, partners: dict[str, set[str]]) -> bool:
    """Superseded by a row it contradicts: its fact was replaced (a row merged into a canonical was not)."""
    return superseded_by is not None and superseded_by in partners.get(memory_id, ())


def _seeds(
    episodic: pa.Table,
    close: pa.Table,
    fading: pa.Array | None,
    partners: dict[str, set[str]],
    cache_root: Path | None,
) -> pa.Table:
    """The rows that may seed or reinforce a node: active when the night starts (a row archived or queued
    before tonight never revives as knowledge; one tonight's retention archives still seeds), neither
    disputed (`contradictionWith`) nor replaced (superseded by one of its contradiction `partners`): such a
    fact never becomes knowledge; in a `close` pair (at the threshold), and knowledge rather than
    chit-chat (`knowledge.carries_knowledge`, parsed only for the paired rows). A row merged into a canonical
    (superseded, not contradicted) still seeds: its canonical says everything it says, so whether tonight's
    gated merges are approved before the next run changes no cluster. The rows carry their `same_fact_features`
    (parsed with the knowledge test) for `_repeating`."""
    paired = pc.unique(pa.chunked_array([*close["left_id"].chunks, *close["right_id"].chunks], pa.string()))
    active = pc.equal(episodic["zone"], "active")
    if fading is not None and len(fading):
        active = pc.or_(active, pc.is_in(episodic["id"], fading))
    superseded = episodic.filter(pc.is_valid(episodic["superseded_by"])).select(["id", "superseded_by"])
    replaced = [r["id"] for r in superseded.to_pylist() if _replaced(r["id"], r["superseded_by"], partners)]
    undisputed = pc.and_(
        pc.invert(episodic["contradicted"]),
        pc.invert(pc.is_in(episodic["id"], pa.array(replaced, pa.string()))),
    )
    rows = episodic.filter(pc.and_(pc.and_(active, undisputed), pc.is_in(episodic["id"], paired)))
    texts = cached_text_facts(rows["content"], cache_root)
    for name in SAME_FACT_SCHEMA.names:
        rows = rows.append_column(f"text_{name}", texts[name])
    return rows.filter(texts["knowledge"])


def _repeating(close: pa.Table, candidates: pa.Table) -> pa.Table:
    """The `close` pairs between two candidates that may repeat one fact (`same_fact_pairs`: the same numbers
    and names): a node is a repetition, not two related facts."""
    ids = candidates["id"]
    among = close.filter(pc.and_(pc.is_in(close["left_id"], ids), pc.is_in(close["right_id"], ids)))
    features = candidates.select([f"text_{name}" for name in SAME_FACT_SCHEMA.names])
    return same_fact_pairs(among, ids.to_pylist(), features.rename_columns(SAME_FACT_SCHEMA.names))


def _node_states(facts: pa.Table) -> list[tuple[dict[str, Any], NodeState]]:
    """(row, state) of every row whose `metadata.semantic` this module wrote."""
    node_rows = facts.filter(pc.and_(pc.equal(facts["kind"], "semantic"), pc.is_valid(facts["semantic"])))
    parsed = ((row, _parse_state(row["semantic"])) for row in node_rows.to_pylist())
    return [(row, state) for row, state in parsed if state is not None]


def _start_run(
    facts: pa.Table,
    states: list[tuple[dict[str, Any], NodeState]],
    partners: dict[str, set[str]],
    index: VectorIndex,
    cfg: SemanticConfig,
    at: dt.datetime,
) -> _Run:
    nodes: dict[str, _NodeWork] = {}
    claimed: set[str] = set()
    for row, state in states:
        # A hidden node (archived by retention, superseded) is not maintained, but its sources stay claimed:
        # otherwise they would derive the same node id again every night.
        claimed.update(state.sources)
        if not row["live"]:
            continue
        model = index.model_of(state.representative) or next(
            (m for m in (index.model_of(s) for s in state.sources) if m), index.model_of(row["id"])
        )
        nodes[row["id"]] = _NodeWork(row["id"], row["namespace"], state.copy(), state, model)
    # The rows the run looks up by id (node sources, nodes, contradiction partners; cluster members are added
    # once the clusters are known) as python dicts; the corpus-sized table stays in Arrow.
    return _Run(
        cfg=cfg,
        at=at,
        facts=rows_by_id(facts, claimed | set(nodes) | set(partners)),
        partners=partners,
        vectors=index,
        nodes=nodes,
        claimed=claimed,
    )


def _parse_state(text: str | None) -> NodeState | None:
    try:
        value = json.loads(text) if text else None
        return NodeState.from_json(value) if isinstance(value, dict) else None
    except (TypeError, ValueError):
        return None


def _absorb(cluster: CoherentCluster, run: _Run) -> None:
    """Reinforce the closest node with this cluster's unclaimed members, or create one from them."""
    evidence, dissent = _split_dissent(cluster, cluster.members, run)
    unclaimed = [m for m in evidence if m not in run.claimed]
    if not unclaimed and not dissent:
        # A cluster of sources only (most of them, every night after the first: 29,611 at 1M memories) can
        # reinforce nothing, reject nothing and record no dissent, whichever node it is closest to.
        return
    model = run.vectors.model_of(cluster.medoid)
    node_id, _ = run.best_node(cluster.namespace, model, run.vectors.centroid(evidence, model))
    if node_id:
        work = run.nodes[node_id]
        # A new member that contradicts one of the node's sources is dissent on the node, not evidence.
        valid = [s for s in work.state.sources if run.is_valid_source(s)]
        for member in list(unclaimed):
            against = sorted(run.partners.get(member, set()) & set(valid))
            if against:
                unclaimed.remove(member)
                dissent[member] = f"contradicts {against[0]}, a source of {node_id}"
        for member, reason in dissent.items():
            work.pending_dissent.setdefault(member, reason)
        evidence = [m for m in evidence if m not in dissent]
        ok, why = run.qualifies(evidence)
        if unclaimed and not ok:
            run.rejects.append(_reject_row(cluster, evidence, run, f"cannot reinforce {node_id}: {why}"))
        elif unclaimed:
            work.new_sources.extend(unclaimed)
            work.cluster_ids.append(cluster.cluster_id)
            run.claimed.update(unclaimed)
        return
    ok, why = run.qualifies(unclaimed)
    if not ok:
        if unclaimed:
            run.rejects.append(_reject_row(cluster, unclaimed, run, why))
        return
    _create(cluster, unclaimed, dissent, model, run)


def _drop_existing_ids(run: _Run, facts: pa.Table) -> None:
    """A new node whose id is taken already (a row without node state) is not proposed: it could never land."""
    fresh = [n for n, w in run.nodes.items() if w.before is None]
    for node_id in rows_by_id(facts, fresh):
        del run.nodes[node_id]


def _split_dissent(
    cluster: CoherentCluster, members: Sequence[str], run: _Run
) -> tuple[list[str], dict[str, str]]:
    """(evidence, dissent -> reason): members taken most central first; one that contradicts a member already
    taken is dissent. The medoid is taken first, so whatever contradicts it is dissent."""
    central_first = sorted(members, key=lambda i: (-sum(cluster.score(i, j) for j in members if j != i), i))
    evidence: list[str] = []
    dissent: dict[str, str] = {}
    for member in central_first:
        against = sorted(run.partners.get(member, set()) & set(evidence))
        if against:
            dissent[member] = f"contradicts {against[0]}, a source in {cluster.cluster_id}"
        else:
            evidence.append(member)
    return sorted(evidence), dissent


def _create(
    cluster: CoherentCluster, sources: list[str], dissent: dict[str, str], model: str | None, run: _Run
) -> None:
    node_id = node_id_for(cluster.namespace, sources)
    state = NodeState(
        probability=PRIOR_PROBABILITY,
        confidence=PRIOR_CONFIDENCE,
        tier="raw",
        sources=[],
        lost=[],
        contexts=0,
        variability=0.0,
        cycles=0,
        cycle_at=None,
        reinforced_at=None,
        decayed_at=None,
        created_at=run.when,
        representative=_most_informative(cluster, sources, run),
    )
    work = _NodeWork(node_id, cluster.namespace, None, state, model, cluster_ids=[cluster.cluster_id])
    work.new_sources = sorted(sources)
    work.pending_dissent.update(dissent)
    run.nodes[node_id] = work
    run.claimed.update(sources)


def _most_informative(cluster: CoherentCluster, sources: Sequence[str], run: _Run) -> str:
    """The source that says the most (its text becomes the node's); the medoid's order breaks ties."""
    central = sorted(sources, key=lambda i: (-sum(cluster.score(i, j) for j in sources if j != i), i))
    return max(central, key=lambda i: informativeness(run.facts[i]["content"] or ""))


def _maintain(work: _NodeWork, run: _Run) -> None:
    """Cascade, reinforcement, anti-anchoring, ceiling, tier and dissent, in that order (module docstring)."""
    state = work.state
    new = sorted(set(work.new_sources) - set(state.sources))
    if work.before is not None:
        _cascade(work, run)
    if new:
        steps = len(new) - (1 if work.before is None else 0)
        reinforce(state, steps)
        state.sources = sorted(set(state.sources) | set(new))
        state.reinforced_at = run.when
        if state.cycle_at != run.when:
            state.cycles += 1
            state.cycle_at = run.when
        if work.before is not None:
            work.changes.append("reinforce")
    elif _anti_anchoring_due(state, run):
        state.confidence *= run.cfg.stale_decay_rate
        state.decayed_at = run.when
        work.changes.append("anti_anchoring")
    lost = set(state.lost)
    valid = [s for s in state.sources if s not in lost]
    if len(valid) <= 1 and state.confidence > run.cfg.single_source_ceiling:
        state.confidence = run.cfg.single_source_ceiling
        work.changes.append("single_source_ceiling")
    state.contexts = run.contexts(valid)
    state.variability = state.contexts / len(valid) if valid else 0.0
    state.tier = tier_of(len(valid), state.confidence, state.cycles, state.variability, run.cfg)
    if work.before is not None and state.tier != work.before.tier:
        work.changes.append("tier")
    _record_dissent(work, valid, run)
    work.new_sources = new
    if work.before is None:
        work.insert_row = _insert_row(work, run)
        work.changes.insert(0, "create")


def _cascade(work: _NodeWork, run: _Run) -> None:
    state = work.state
    lost = sorted(s for s in state.sources if not run.is_valid_source(s))
    if lost == state.lost:
        return
    valid_before = len(state.sources) - len(state.lost)
    valid_now = len(state.sources) - len(lost)
    # Scaling by the ratio of this change keeps the product over all changes at valid / total.
    if valid_before > 0:
        state.confidence *= valid_now / valid_before
    state.lost = lost
    work.changes.append("cascade")


def _anti_anchoring_due(state: NodeState, run: _Run) -> bool:
    if state.reinforced_at is None or state.decayed_at == run.when:
        return False
    idle = run.at - parse_timestamp(state.reinforced_at)
    return idle > dt.timedelta(days=run.cfg.stale_threshold_days)


def _record_dissent(work: _NodeWork, valid: list[str], run: _Run) -> None:
    known = {d["id"] for d in work.state.dissent}
    sources = set(work.state.sources)
    found = dict(work.pending_dissent)
    for anchor in sorted({*valid, work.node_id}):
        for other in sorted(run.partners.get(anchor, ())):
            found.setdefault(other, f"contradicts {anchor}")
    added = [
        {"id": other, "reason": reason, "at": run.when}
        for other, reason in sorted(found.items())
        if other not in known
        and other not in sources
        and other != work.node_id
        and run.facts.get(other, {}).get("namespace") == work.namespace
    ]
    if added:
        work.state.dissent = [*work.state.dissent, *added]
        if work.before is not None:
            work.changes.append("dissent")


def _insert_row(work: _NodeWork, run: _Run) -> dict[str, Any]:
    sources = work.state.sources
    representative = run.facts[work.state.representative]
    shared = [
        t
        for t in json.loads(representative["tags"])
        if all(t in json.loads(run.facts[s]["tags"]) for s in sources)
    ]
    return {
        "id": work.node_id,
        "namespace": work.namespace,
        "tier": "ltm",
        "kind": "semantic",
        "content": representative["content"],
        "importance": max(float(run.facts[s]["importance"]) for s in sources),
        "created_at": run.when,
        "updated_at": run.when,
        "tags": shared,
        "metadata": {"semantic": work.state.to_json()},
    }


def _mark_compressed(run: _Run, candidates: pa.Table, load: Callable[[pa.Array], pa.Table] | None) -> None:
    """Episodic rows at >= compression_threshold to an assessed or baseline node: marked for the closest.
    With `load`, the vectors of the unmarked rows of those nodes' namespaces are read now (only those)."""
    strong = [run.nodes[n] for n in sorted(run.nodes) if run.nodes[n].state.tier in ("assessed", "baseline")]
    groups: dict[tuple[str, str], list[_NodeWork]] = {}
    for work in strong:
        if work.model is not None:
            groups.setdefault((work.namespace, work.model), []).append(work)
    if not groups:
        return
    unmarked = candidates.filter(pc.invert(candidates["compressed"]))
    unmarked = unmarked.filter(
        pc.is_in(unmarked["namespace"], pa.array(sorted({n for n, _ in groups}), pa.string()))
    )
    vectors = run.vectors if load is None else VectorIndex(load(unmarked["id"].combine_chunks()))
    for (namespace, model), works in sorted(groups.items()):
        # After maintenance `state.sources` holds this run's new sources too: the centroid a rerun will see.
        usable = [(w, c) for w in works if (c := run.node_centroid(w, with_new=True)) is not None]
        ids = np.asarray(
            unmarked.filter(pc.equal(unmarked["namespace"], namespace))["id"].to_pylist(), dtype=object
        )
        rows = vectors.rows(ids)
        in_model = rows >= 0
        in_model[in_model] = vectors.models[rows[in_model]] == model
        ids, rows = ids[in_model], rows[in_model]
        if not usable or rows.size == 0:
            continue
        similarity = vectors.unit(rows) @ np.stack([c for _, c in usable]).T
        best = np.argmax(similarity, axis=1)
        best_score = similarity[np.arange(rows.size), best]
        for position in np.flatnonzero(best_score >= run.cfg.compression_threshold).tolist():
            score = round(float(best_score[position]), ROUND_DIGITS)
            usable[int(best[position])][0].marks.append((str(ids[position]), score))


def _reject_row(cluster: CoherentCluster, ids: Sequence[str], run: _Run, reason: str) -> dict[str, Any]:
    contexts = run.contexts(ids)
    return {
        "namespace": cluster.namespace,
        "node_id": None,
        "cluster_id": cluster.cluster_id,
        "action": "reject",
        "changes": [],
        "tier": None,
        "previous_tier": None,
        "probability": None,
        "confidence": None,
        "sources": len(ids),
        "new_sources": 0,
        "contexts": contexts,
        "variability": contexts / len(ids) if ids else 0.0,
        "cycles": None,
        "marked": 0,
        "representative": cluster.medoid_of(list(ids)) if ids else cluster.medoid,
        "reason": reason,
    }


def _changed(work: _NodeWork) -> bool:
    return work.before is None or work.state.to_json() != work.before.to_json()


def _result_table(works: list[_NodeWork], rejects: list[dict[str, Any]], cfg: SemanticConfig) -> pa.Table:
    rows = [
        {
            "namespace": w.namespace,
            "node_id": w.node_id,
            "cluster_id": w.cluster_ids[0] if w.cluster_ids else None,
            "action": "create" if w.before is None else "update",
            "changes": w.changes + (["compressed_marks"] if w.marks else []),
            "tier": w.state.tier,
            "previous_tier": None if w.before is None else w.before.tier,
            "probability": round(w.state.probability, ROUND_DIGITS),
            "confidence": round(w.state.confidence, ROUND_DIGITS),
            "sources": w.state.valid_count,
            "new_sources": len(w.new_sources),
            "contexts": w.state.contexts,
            "variability": round(w.state.variability, ROUND_DIGITS),
            "cycles": w.state.cycles,
            "marked": len(w.marks),
            "representative": w.state.representative,
            "reason": _reason(w, cfg),
        }
        for w in works
        if _changed(w) or w.marks
    ]
    return pa.Table.from_pylist(rows + rejects, schema=SEMANTIC_SCHEMA)


def _reason(work: _NodeWork, cfg: SemanticConfig) -> str:
    s = work.state
    if work.before is None:
        return (
            f"{len(s.sources)} sources from {s.contexts} contexts (variability {s.variability:.2f}): "
            f"{s.tier}, probability {s.probability:.3f}, confidence {s.confidence:.3f}"
        )
    parts = []
    for change in work.changes:
        match change:
            case "reinforce":
                parts.append(f"reinforced by {len(work.new_sources)} new source(s)")
            case "cascade":
                parts.append(f"{len(s.lost)} of {len(s.sources)} sources lost")
            case "anti_anchoring":
                parts.append(f"not reinforced since {s.reinforced_at}: confidence x {cfg.stale_decay_rate}")
            case "single_source_ceiling":
                parts.append("single-source ceiling")
            case "tier":
                parts.append(f"tier {work.before.tier} -> {s.tier}")
            case "dissent":
                parts.append(f"{len(s.dissent) - len(work.before.dissent)} dissent(s) recorded")
    if work.marks:
        parts.append(f"{len(work.marks)} episodic row(s) marked semanticCompressed")
    return "; ".join(parts) + f" (confidence {s.confidence:.3f}, {s.tier})"


def _intents(works: list[_NodeWork], run: _Run) -> pa.Table:
    rows: list[dict[str, Any]] = []
    for work in works:
        base = {
            "namespace": work.namespace,
            "source": SOURCE,
            "review_class": "auto",
            "cluster_id": work.cluster_ids[0] if work.cluster_ids else None,
        }
        evidence = {
            "rule": "semantic",
            "cluster_ids": work.cluster_ids,
            "changes": work.changes,
            "tier": work.state.tier,
            "confidence": round(work.state.confidence, ROUND_DIGITS),
            "probability": round(work.state.probability, ROUND_DIGITS),
            "new_sources": work.new_sources,
        }
        reason = _reason(work, run.cfg)
        if work.insert_row is not None:
            rows.append(
                {
                    **base,
                    "target_id": work.node_id,
                    "op": "insert_memory",
                    "params": {"row": work.insert_row},
                    "reason": reason,
                    "evidence": evidence,
                }
            )
        elif _changed(work):
            rows.append(
                {
                    **base,
                    "target_id": work.node_id,
                    "op": "set_metadata",
                    "params": {"values": {"semantic": work.state.to_json()}},
                    "reason": reason,
                    "evidence": evidence,
                }
            )
        rows.extend(_derived_from_links(work, run, base, evidence))
        rows.extend(_mark_intents(work, run, base))
    return intents_table(rows) if rows else INTENT_SCHEMA.empty_table()


def _derived_from_links(
    work: _NodeWork, run: _Run, base: dict[str, Any], evidence: dict[str, Any]
) -> list[dict[str, Any]]:
    if not work.new_sources:
        return []
    centroid = run.node_centroid(work, with_new=True)
    out = []
    for source in work.new_sources:
        cosine = run.vectors.cosine(source, centroid)
        weight = round(1.0 if cosine is None else max(0.0, min(1.0, cosine)), ROUND_DIGITS)
        out.append(
            {
                **base,
                "target_kind": "link",
                "target_id": f"{work.node_id}|{source}|derived-from",
                "op": "upsert_link",
                "params": {
                    "src_id": work.node_id,
                    "dst_id": source,
                    "kind": "derived-from",
                    "weight": weight,
                    "origin": SOURCE,
                },
                "reason": f"source of semantic node {work.node_id}",
                "evidence": evidence,
            }
        )
    return out


def _mark_intents(work: _NodeWork, run: _Run, base: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            **base,
            "target_id": memory_id,
            "op": "set_metadata",
            "params": {
                "values": {"semanticCompressed": {"node": work.node_id, "score": score, "at": run.when}}
            },
            "reason": f"cosine {score:.3f} to {work.state.tier} semantic node {work.node_id}",
            "evidence": {
                "rule": "semantic_compressed",
                "node": work.node_id,
                "score": score,
                "tier": work.state.tier,
            },
        }
        for memory_id, score in work.marks
    ]
