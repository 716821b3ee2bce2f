"""Coherent clusters of similar memories (every member close to every other), shared by semantic extraction and
compression."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.core.duck import duck


@dataclass(frozen=True)
class CoherentCluster:
    """Members all pairwise at or above the threshold; `scores` holds every member pair (sorted ids)."""

    cluster_id: str
    namespace: str
    members: tuple[str, ...]  # sorted
    medoid: str
    scores: dict[tuple[str, str], float]

    def score(self, a: str, b: str) -> float:
        return 1.0 if a == b else self.scores[(a, b) if a < b else (b, a)]

    def medoid_of(self, ids: Sequence[str]) -> str:
        """The member of `ids` with the highest summed similarity to the others (ties: lowest id)."""
        return min(ids, key=lambda i: (-sum(self.score(i, j) for j in ids if j != i), i))


def coherent_clusters(
    pairs: pa.Table, eligible: pa.Table, threshold: float, *, prefix: str
) -> list[CoherentCluster]:
    """Complete-linkage clusters of >= 2 `eligible` rows (id, namespace) over the pairs at >= `threshold`.

    Centres are visited by degree, then summed similarity, then id (a static order, so the result depends only
    on the input); each takes its unassigned neighbours best-first (score, then id), a neighbour joining only
    if it is at or above the threshold to every member already taken. Pairs whose rows are not eligible or not
    of the pair's namespace are ignored.
    """
    edges = _eligible_edges(pairs, eligible, threshold)
    if edges.num_rows == 0:
        return []
    ids = pc.unique(pa.concat_arrays([edges["a"].combine_chunks(), edges["b"].combine_chunks()])).sort()
    n = len(ids)
    left = pc.index_in(edges["a"], value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
    right = pc.index_in(edges["b"], value_set=ids).to_numpy(zero_copy_only=False).astype(np.int64)
    score = edges["score"].to_numpy(zero_copy_only=False).astype(np.float64)
    src, dst, sim = (
        np.concatenate([left, right]),
        np.concatenate([right, left]),
        np.concatenate([score, score]),
    )
    degree = np.bincount(src, minlength=n)
    strength = np.bincount(src, weights=sim, minlength=n)
    # ids are sorted, so an index is also the id order: it breaks every tie below.
    order = np.lexsort((dst, -sim, src))
    src, dst, sim = src[order], dst[order], sim[order]
    starts = np.searchsorted(src, np.arange(n + 1))
    namespace_of = _namespaces_by_index(edges, ids)
    id_list = ids.to_pylist()
    assigned = np.zeros(n, dtype=bool)
    clusters = []
    for centre in np.lexsort((np.arange(n), -strength, -degree)).tolist():
        if assigned[centre]:
            continue
        members = _grow(centre, dst, starts, assigned)
        if len(members) < 2:
            continue
        assigned[members] = True
        clusters.append(_coherent(members, id_list, namespace_of[centre], dst, sim, starts, prefix))
    return sorted(clusters, key=lambda c: (c.namespace, c.cluster_id))


def _eligible_edges(pairs: pa.Table, eligible: pa.Table, threshold: float) -> pa.Table:
    with duck() as con:
        con.register("p", pairs.select(["namespace", "left_id", "right_id", "score"]))
        con.register("e", eligible.select(["id", "namespace"]))
        # One key for id + namespace: with two equalities per join the optimizer infers x.namespace = y.namespace
        # and joins the two scans of `e` on namespace first (quadratic in a namespace's size).
        return con.sql(
            f"""
            WITH k AS (SELECT id || chr(31) || namespace AS key FROM e)
            SELECT p.namespace, least(p.left_id, p.right_id) AS a, greatest(p.left_id, p.right_id) AS b,
                max(p.score) AS score
            FROM p SEMI JOIN k x ON x.key = p.left_id || chr(31) || p.namespace
                   SEMI JOIN k y ON y.key = p.right_id || chr(31) || p.namespace
            WHERE p.score >= {float(threshold)!r} AND p.left_id <> p.right_id
            GROUP BY ALL ORDER BY a, b
            """
        ).to_arrow_table()


def _namespaces_by_index(edges: pa.Table, ids: pa.Array) -> list[str]:
    both = pa.table(
        {
            "id": pa.concat_arrays([edges["a"].combine_chunks(), edges["b"].combine_chunks()]),
            "namespace": pa.concat_arrays([edges["namespace"].combine_chunks()] * 2),
        }
    )
    first = both.group_by("id").aggregate([("namespace", "min")])
    index = pc.index_in(ids, value_set=first["id"]).to_numpy(zero_copy_only=False)
    return first["namespace_min"].combine_chunks().take(pa.array(index)).to_pylist()


def _grow(centre: int, dst: np.ndarray, starts: np.ndarray, assigned: np.ndarray) -> list[int]:
    # Neighbour lists are short: python sets beat numpy's per-call overhead here.
    neighbours = dst[starts[centre] : starts[centre + 1]]  # best-first
    open_ = [int(n) for n in neighbours[~assigned[neighbours]]]
    members = [centre]
    while open_:
        candidate = open_.pop(0)
        members.append(candidate)
        # Complete linkage: later candidates must be adjacent to this member too.
        adjacent = set(dst[starts[candidate] : starts[candidate + 1]].tolist())
        open_ = [n for n in open_ if n in adjacent]
    return members


def _coherent(
    members: list[int],
    ids: list[str],
    namespace: str,
    dst: np.ndarray,
    sim: np.ndarray,
    starts: np.ndarray,
    prefix: str,
) -> CoherentCluster:
    inside = set(members)
    scores: dict[tuple[str, str], float] = {}
    for member in members:
        window = slice(starts[member], starts[member + 1])
        for other, s in zip(dst[window].tolist(), sim[window].tolist(), strict=True):
            if other in inside and other > member:
                scores[(ids[member], ids[other])] = float(s)
    names = tuple(sorted(ids[m] for m in members))
    digest = hashlib.sha256("|".join((namespace, *names)).encode()).hexdigest()[:10]
    cluster = CoherentCluster(f"{prefix}-{digest}", namespace, names, names[0], scores)
    return dataclasses.replace(cluster, medoid=cluster.medoid_of(names))
