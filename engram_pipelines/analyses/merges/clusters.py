"""Near-duplicate clusters in which every loser is in the band *to its canonical* and says nothing the canonical
does not say (seeds 000, 002; issue 18).

No single-link chaining: A~B and B~C never put A and C together unless A~C. Clusters are built greedily:
rows are visited most informative first (most content words, then the seeds' order: highest importance, most
recent, lowest id); an unassigned row becomes the canonical of its unassigned, eligible neighbours in the band
that it contains (`containment`), taken best-first, each only if it is in the band to every loser already
taken (complete linkage). Between two rows that contain each other the seeds' order decides which is kept. A
row may be canonical while pinned; it is never a loser while pinned, a block, superseded, outside the active
zone, or in a contradiction.

Pairs are dropped before clustering when the two rows are of different kinds, when their numbers differ
("standup at 9am" vs "at 10am" is a changed value, not a duplicate), when the contradiction analysis paired
them, or when neither contains the other (another subject, another name, another event).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.analyses.merges.containment import DEFAULT_MIN_COVERAGE, directed_pairs
from engram_pipelines.analyses.merges.texts import cached_merge_features
from engram_pipelines.core.duck import duck


@dataclass
class Cluster:
    cluster_id: str
    namespace: str
    canonical: str
    losers: list[tuple[str, float]]  # (id, score to the canonical), in the order they were taken
    tag_union: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster_id": self.cluster_id,
            "namespace": self.namespace,
            "canonical": self.canonical,
            "losers": [{"id": i, "score": round(s, 6)} for i, s in self.losers],
            "tag_union": self.tag_union,
        }


CLUSTER_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("canonical", pa.string(), nullable=False),
        pa.field("loser", pa.string(), nullable=False),
        pa.field("score", pa.float64(), nullable=False),
        pa.field("tag_union", pa.string(), nullable=False),  # JSON list
    ]
)


def band_pairs(
    pairs: pa.Table,
    memories: pa.Table,
    low: float,
    high: float | None,
    *,
    excluded_pairs: pa.Table | None = None,
    min_coverage: float = DEFAULT_MIN_COVERAGE,
    cache_root: Path | None = None,
) -> pa.Table:
    """The pairs in [low, high) whose rows are of one kind, with the same numbers, not paired as contradicting,
    one contained in the other (`left_in_right`, `right_in_left`: which side may be hidden). With `cache_root`
    (the warehouse), the rows' texts are parsed once across nights (`texts.cached_merge_features`)."""
    in_band = pc.greater_equal(pairs["score"], low)
    if high is not None:
        in_band = pc.and_(in_band, pc.less(pairs["score"], high))
    band = pairs.filter(in_band)
    # Only the rows in the band are parsed (parsing every row's content took 8 s at 1M memories).
    ids = pc.unique(pa.chunked_array([*band["left_id"].chunks, *band["right_id"].chunks], pa.string()))
    involved = memories.select(["id", "kind", "content"]).filter(pc.is_in(memories["id"], value_set=ids))
    features = cached_merge_features(involved["id"], involved["content"], cache_root)
    with duck(joins_as_written=True) as con:
        con.register("p", band)
        con.register("m", involved.select(["id", "kind"]).append_column("numbers", features["numbers"]))
        con.register(
            "x",
            excluded_pairs
            if excluded_pairs is not None
            else pa.table({"left_id": pa.array([], pa.string()), "right_id": pa.array([], pa.string())}),
        )
        # An excluded pair matches in either order: compared in one order (least, greatest), an equality join.
        # (Written as `x.left = p.left AND ... OR x.left = p.right AND ...` it was a nested loop: 68 s at 1M.)
        kept = con.sql(
            """
            WITH xo AS (SELECT DISTINCT least(left_id, right_id) AS lo, greatest(left_id, right_id) AS hi FROM x),
            po AS (SELECT *, least(left_id, right_id) AS lo, greatest(left_id, right_id) AS hi FROM p)
            SELECT po.* EXCLUDE (lo, hi) FROM po
            JOIN m a ON a.id = po.left_id JOIN m b ON b.id = po.right_id
            ANTI JOIN xo USING (lo, hi)
            WHERE a.kind = b.kind AND a.numbers = b.numbers
            ORDER BY po.left_id, po.right_id
            """
        ).to_arrow_table()
        return directed_pairs(kept, features, min_coverage)


# What clustering reads of a memory (the merge assets read only these columns of the snapshot).
MERGE_COLUMNS = [
    "id",
    "namespace",
    "kind",
    "content",
    "importance",
    "created_at",
    "pinned",
    "zone",
    "superseded_by",
    "tags",
    "metadata",
]


def _eligibility(memories: pa.Table, excluded_ids: set[str], word_counts: pa.Table) -> pa.Table:
    """Per row: its visiting order (`priority`: most content words first, then the longer text, then the seeds'
    order) and whether it may cluster and lose. `word_counts`: id, words (rows of the band)."""
    with duck() as con:
        con.register("w", word_counts)
        con.register("m", memories.select(MERGE_COLUMNS))
        table = con.sql(
            """
            SELECT id, namespace, tags,
                row_number() OVER (
                    ORDER BY coalesce(w.words, 0) DESC, length(content) DESC, importance DESC, created_at DESC, id
                ) - 1 AS priority,
                -- Semantic nodes dedupe themselves (a cluster reinforces the nearest node instead of creating one)
                -- and carry their sources' state; a merge would orphan it.
                (zone = 'active' AND superseded_by IS NULL AND kind <> 'semantic'
                 AND json_extract(metadata, '$.contradictionWith') IS NULL) AS can_cluster,
                (NOT pinned AND kind <> 'block') AS can_lose
            FROM m LEFT JOIN w USING (id)
            """
        ).to_arrow_table()
        if excluded_ids:
            excluded = pa.array(sorted(excluded_ids), pa.string())
            mask = pc.is_in(table["id"], value_set=excluded).to_numpy(zero_copy_only=False)
            can = table["can_cluster"].to_numpy(zero_copy_only=False) & ~mask
            table = table.set_column(
                table.schema.get_field_index("can_cluster"), "can_cluster", pa.array(can)
            )
        return table


@dataclass
class _Graph:
    """The band's pairs in priority ranks (0 = the best canonical), built once for all passes."""

    ids: list[str]  # by row
    namespaces: list[str]
    tags: list[str]  # JSON arrays; a canonical's entry becomes its tag union after each pass
    row_of_rank: np.ndarray
    can_cluster: np.ndarray  # by rank; rows that lost in a pass drop out
    can_lose: np.ndarray  # by rank
    src: np.ndarray  # both directions, sorted by (src, dst) rank
    dst: np.ndarray
    sim: np.ndarray
    absorbs: (
        np.ndarray
    )  # may dst lose to src? (src contains dst; the seeds' order between two that contain each other)
    starts: np.ndarray  # src rank r's neighbours are dst[starts[r]:starts[r + 1]]


def star_clusters(
    pairs: pa.Table, memories: pa.Table, *, prefix: str, excluded_ids: Set[str] = frozenset()
) -> list[Cluster]:
    """Clusters over `pairs` (already limited to one band), settled so that a second pass finds nothing.

    One greedy pass can leave two surviving canonicals in the band to each other (complete linkage kept one
    out of the other's cluster because of a loser). Once the losers are superseded, the next nightly run would
    merge them, so the passes are repeated here on the survivors until none is left to merge: the same
    outcome as successive runs, reached in one, which keeps the pipeline idempotent.
    """
    if pairs.num_rows == 0:
        return []
    counts = pa.table(
        {
            "id": pa.concat_arrays([pairs["left_id"].combine_chunks(), pairs["right_id"].combine_chunks()]),
            "words": pa.concat_arrays(
                [pairs["left_words"].combine_chunks(), pairs["right_words"].combine_chunks()]
            ),
        }
    )
    counts = counts.group_by("id").aggregate([("words", "max")]).rename_columns(["id", "words"])
    # Only the band's rows take part: ranked among themselves they keep their order, and the graph is built
    # over tens of thousands of rows, not the whole snapshot (3.6-4.2 s of each merge step at 1M memories).
    members = memories.filter(pc.is_in(memories["id"], value_set=counts["id"]))
    graph = _graph(pairs, _eligibility(members, set(excluded_ids), counts))
    out: list[Cluster] = []
    while True:
        found = _one_pass(graph, prefix)
        if not found:
            return out
        out.extend(cluster for cluster, _ in found)
        for cluster, canonical_row in found:
            graph.tags[canonical_row] = json.dumps(cluster.tag_union)


def _graph(pairs: pa.Table, rows: pa.Table) -> _Graph:
    priority = rows["priority"].to_numpy(zero_copy_only=False)
    row_of_rank = np.argsort(priority)
    left = pc.index_in(pairs["left_id"], value_set=rows["id"]).to_numpy(zero_copy_only=False)
    right = pc.index_in(pairs["right_id"], value_set=rows["id"]).to_numpy(zero_copy_only=False)
    score = pairs["score"].to_numpy(zero_copy_only=False)
    left_in_right = pairs["left_in_right"].to_numpy(zero_copy_only=False).astype(bool)
    right_in_left = pairs["right_in_left"].to_numpy(zero_copy_only=False).astype(bool)
    can_cluster = rows["can_cluster"].to_numpy(zero_copy_only=False)
    keep = can_cluster[left] & can_cluster[right]
    left, right, score = left[keep], right[keep], score[keep]
    left_in_right, right_in_left = left_in_right[keep], right_in_left[keep]
    src = np.concatenate([priority[left], priority[right]])
    dst = np.concatenate([priority[right], priority[left]])
    sim = np.concatenate([score, score])
    # Two rows that contain each other (each covers enough of the other's words): the more informative one
    # (more content words, then the longer text) keeps, and only the seeds' order parts two that say as much.
    # On LoCoMo facts, the seeds' order alone hid the longer of two equal-word paraphrases twice in 14 merges.
    mutual = left_in_right & right_in_left
    absorbs = np.concatenate(
        [
            right_in_left & (~mutual | (priority[right] > priority[left])),
            left_in_right & (~mutual | (priority[left] > priority[right])),
        ]
    )
    order = np.lexsort((dst, src))
    return _Graph(
        ids=rows["id"].to_pylist(),
        namespaces=rows["namespace"].to_pylist(),
        tags=rows["tags"].to_pylist(),
        row_of_rank=row_of_rank,
        can_cluster=can_cluster[row_of_rank].copy(),
        can_lose=rows["can_lose"].to_numpy(zero_copy_only=False)[row_of_rank],
        src=src[order],
        dst=dst[order],
        sim=sim[order],
        absorbs=absorbs[order],
        starts=np.searchsorted(src[order], np.arange(len(priority) + 1)),
    )


def _one_pass(g: _Graph, prefix: str) -> list[tuple[Cluster, int]]:
    """One greedy pass, canonicals best-first; marks its losers out of later passes. (cluster, canonical row)."""
    assigned = ~g.can_cluster  # by rank; rows out of play count as taken
    clusters: list[tuple[Cluster, int]] = []

    def adjacent(rank: int) -> set[int]:
        return set(g.dst[g.starts[rank] : g.starts[rank + 1]].tolist())

    live = g.src[g.can_cluster[g.src] & g.can_cluster[g.dst]]
    for rank in np.unique(live):
        if assigned[rank]:
            continue
        neighbours = g.dst[g.starts[rank] : g.starts[rank + 1]]
        scores = g.sim[g.starts[rank] : g.starts[rank + 1]]
        absorbs = g.absorbs[g.starts[rank] : g.starts[rank + 1]]
        taken: list[int] = []
        # Only rows this one contains may lose to it: the canonical says everything its losers say.
        for position in np.flatnonzero(~assigned[neighbours] & g.can_lose[neighbours] & absorbs):
            candidate = int(neighbours[position])
            # Complete linkage: a loser joins only if it is in the band to every loser already taken.
            if all(candidate in adjacent(other) for other in (int(neighbours[t]) for t in taken)):
                taken.append(int(position))
        if not taken:
            continue
        members = neighbours[taken]
        assigned[rank] = True
        assigned[members] = True
        g.can_cluster[members] = False
        canonical_row = int(g.row_of_rank[rank])
        cluster = _cluster(
            prefix, g.ids, g.namespaces, g.tags, canonical_row, g.row_of_rank[members], scores[taken]
        )
        clusters.append((cluster, canonical_row))
    return clusters


def _cluster(
    prefix: str,
    ids: list[str],
    namespaces: list[str],
    tags: list[str],
    canonical: int,
    losers: np.ndarray,
    scores: np.ndarray,
) -> Cluster:
    union: list[str] = []
    for member in [canonical, *losers.tolist()]:  # first-seen order: the canonical's tags, then each loser's
        for tag in json.loads(tags[member]):
            if tag not in union:
                union.append(tag)
    members = "|".join([ids[canonical], *sorted(ids[i] for i in losers)])
    cluster_id = f"{prefix}-{hashlib.sha256(members.encode()).hexdigest()[:10]}"
    return Cluster(
        cluster_id=cluster_id,
        namespace=namespaces[canonical],
        canonical=ids[canonical],
        losers=[(ids[i], float(s)) for i, s in zip(losers, scores, strict=True)],
        tag_union=union,
    )


def clusters_table(clusters: list[Cluster]) -> pa.Table:
    rows = [
        {
            "cluster_id": c.cluster_id,
            "namespace": c.namespace,
            "canonical": c.canonical,
            "loser": loser,
            "score": s,
            "tag_union": json.dumps(c.tag_union),
        }
        for c in clusters
        for loser, s in c.losers
    ]
    return pa.Table.from_pylist(rows, schema=CLUSTER_SCHEMA)
