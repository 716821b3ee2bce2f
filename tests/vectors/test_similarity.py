"""All-pairs similarity: exact edges, groups, many tiny groups, the cell join against exact, determinism."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from engram_pipelines.vectors import similarity
from engram_pipelines.vectors.comparable import vector_schema
from engram_pipelines.vectors.similarity import PairResult, pairs_per_row_loop, similar_pairs
from engram_pipelines.warehouse.vector_digests import VectorSource
from tests.support.memories import ProgressRecorder

DIM = 32


def unit_rows(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def basis(dim: int, *axes: int) -> np.ndarray:
    rows = np.zeros((len(axes), dim), dtype=np.float32)
    rows[np.arange(len(axes)), axes] = 1.0
    return rows


def brute_force(vectors: np.ndarray, groups: np.ndarray, threshold: float) -> set[tuple[int, int]]:
    """Every same-group pair at or above the threshold, one full score matrix per group."""
    pairs: set[tuple[int, int]] = set()
    for code in np.unique(groups):
        members = np.flatnonzero(groups == code)
        scores = vectors[members] @ vectors[members].T
        left, right = np.nonzero(np.triu(scores >= np.float32(threshold), k=1))
        pairs |= set(zip(members[left].tolist(), members[right].tolist(), strict=True))
    return pairs


def pair_set(result: PairResult) -> set[tuple[int, int]]:
    return set(zip(result.left.tolist(), result.right.tolist(), strict=True))


def clustered(n: int, topics: int, seed: int, dim: int = DIM) -> np.ndarray:
    """Topics with members spread around them: within-topic cosines from ~0.6 to ~0.95."""
    rng = np.random.default_rng(seed)
    centres = unit_rows(rng.standard_normal((topics, dim)))
    topic = rng.integers(0, topics, n)
    spread = rng.uniform(0.15, 0.5, n)[:, None]
    return unit_rows(centres[topic] + spread * unit_rows(rng.standard_normal((n, dim))))


def assert_well_formed(result: PairResult) -> None:
    assert result.left.dtype == np.int64 and result.right.dtype == np.int64
    assert result.score.dtype == np.float32
    assert np.all(result.left < result.right)
    keys = result.left * (int(result.right.max(initial=0)) + 1) + result.right
    assert np.all(np.diff(keys) > 0), "sorted by (left, right), no duplicates"


def test_a_pair_exactly_at_the_threshold_is_in_and_one_just_below_is_out() -> None:
    below = np.nextafter(np.float32(0.75), np.float32(0))
    vectors = np.zeros((3, 4), dtype=np.float32)
    vectors[0] = [1, 0, 0, 0]
    vectors[1] = [0.75, np.sqrt(1 - 0.75**2), 0, 0]  # cosine to row 0 is exactly 0.75
    vectors[2] = [below, 0, np.sqrt(1 - below**2), 0]  # one float32 step below 0.75

    result = similar_pairs(vectors, np.zeros(3, dtype=np.int64), 0.75)

    assert pair_set(result) == {(0, 1)}
    assert result.score.tolist() == [0.75]
    assert result.method_by_group == {0: "exact"}


def test_twins_in_different_groups_never_pair() -> None:
    twin = unit_rows(np.arange(1, DIM + 1)[None, :])
    vectors = np.repeat(twin, 4, axis=0)  # cosine 1.0 between all four
    groups = np.array([7, 9, 7, -3], dtype=np.int64)

    result = similar_pairs(vectors, groups, 0.8)

    assert pair_set(result) == {(0, 2)}
    assert result.method_by_group == {-3: "exact", 7: "exact", 9: "exact"}
    cells = similar_pairs(np.repeat(vectors, 50, axis=0), np.repeat(groups, 50), 0.8, exact_cutoff=10)
    assert all(int(np.repeat(groups, 50)[a]) == int(np.repeat(groups, 50)[b]) for a, b in pair_set(cells))


def test_many_tiny_groups_and_a_few_tiled_ones_match_brute_force() -> None:
    rng = np.random.default_rng(5)
    sizes = np.concatenate([rng.integers(1, 12, 2000), [40, 300, 700, 4500]])  # batched, one tile, several
    groups = np.repeat(rng.permutation(len(sizes)) * 3 - 1000, sizes)  # codes neither sorted nor dense
    order = rng.permutation(len(groups))
    groups = groups[order]
    vectors = clustered(len(groups), topics=60, seed=6)

    result = similar_pairs(vectors, groups, 0.8)

    assert_well_formed(result)
    assert pair_set(result) == brute_force(vectors, groups, 0.8)
    assert set(result.method_by_group.values()) == {"exact"}
    assert len(result.method_by_group) == len(sizes)
    np.testing.assert_allclose(
        result.score, np.sum(vectors[result.left] * vectors[result.right], 1), atol=2e-6
    )


@pytest.mark.parametrize("tile_rows", [4096, 96])  # small tiles: cells and groups split over several
def test_the_cell_join_probing_every_cell_finds_exactly_the_exact_pairs(
    tile_rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(similarity, "TILE_ROWS", tile_rows)
    vectors = clustered(3000, topics=25, seed=1)
    groups = np.zeros(3000, dtype=np.int64)
    exact = similar_pairs(vectors, groups, 0.8)

    everything = similar_pairs(vectors, groups, 0.8, exact_cutoff=500, cells=20, margin=2.0)

    assert everything.method_by_group == {0: "cells"} and everything.probes_by_group == {0: 20.0}
    assert_well_formed(everything)
    assert pair_set(everything) == pair_set(exact)
    np.testing.assert_allclose(everything.score, exact.score, atol=2e-6)


def test_the_calibrated_cell_join_keeps_recall_and_adds_nothing() -> None:
    vectors = clustered(6000, topics=40, seed=2)
    groups = np.repeat([1, 2], 3000)
    truth = brute_force(vectors, groups, 0.8)

    result = similar_pairs(vectors, groups, 0.8, exact_cutoff=1000)

    assert result.method_by_group == {1: "cells", 2: "cells"}
    assert_well_formed(result)
    found = pair_set(result)
    assert found <= truth
    assert len(found) / len(truth) >= 0.99


def test_rare_pairs_in_near_uniform_data_are_still_found() -> None:
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng.standard_normal((4000, DIM)))
    partners, sources = rng.choice(4000, 150, replace=False), rng.integers(0, 4000, 150)
    vectors[partners] = unit_rows(vectors[sources] + 0.35 * unit_rows(rng.standard_normal((150, DIM))))
    groups = np.zeros(4000, dtype=np.int64)
    truth = brute_force(vectors, groups, 0.8)

    result = similar_pairs(vectors, groups, 0.8, exact_cutoff=1000)

    found = pair_set(result)
    assert found <= truth
    assert len(found) / len(truth) >= 0.99


def test_the_same_input_gives_the_same_output() -> None:
    vectors = clustered(4000, topics=30, seed=4)
    groups = np.repeat([5, 6], 2000)

    first = similar_pairs(vectors, groups, 0.8, exact_cutoff=500, seed=11)
    second = similar_pairs(vectors, groups, 0.8, exact_cutoff=500, seed=11)

    assert first.method_by_group == second.method_by_group == {5: "cells", 6: "cells"}
    np.testing.assert_array_equal(first.left, second.left)
    np.testing.assert_array_equal(first.right, second.right)
    np.testing.assert_array_equal(first.score, second.score)
    assert first.margin_by_group == second.margin_by_group


@pytest.mark.parametrize("rows", [0, 1])
def test_empty_and_single_row_inputs_have_no_pairs(rows: int) -> None:
    vectors = basis(DIM, *range(rows))
    result = similar_pairs(vectors, np.zeros(rows, dtype=np.int64), 0.8)
    assert len(result) == 0
    assert result.left.dtype == np.int64 and result.score.dtype == np.float32
    assert result.method_by_group == ({0: "exact"} if rows else {})


def test_the_per_row_loop_agrees_with_the_engine() -> None:
    vectors = clustered(800, topics=10, seed=8)
    groups = np.arange(800) % 3
    looped, engine = pairs_per_row_loop(vectors, groups, 0.8), similar_pairs(vectors, groups, 0.8)
    assert pair_set(looped) == pair_set(engine) == brute_force(vectors, groups, 0.8)
    np.testing.assert_allclose(looped.score, engine.score, atol=2e-6)


def test_pairs_touching_changed_rows_are_the_whole_joins_pairs_they_take_part_in(monkeypatch) -> None:
    monkeypatch.setattr(similarity, "TILE_ROWS", 64)  # several tiles per group, changed rows in several
    vectors = clustered(700, 6, seed=5)
    groups = np.repeat(np.arange(3), [500, 150, 50])
    changed = np.random.default_rng(2).random(700) < 0.2
    whole = similar_pairs(vectors, groups, 0.8)
    touching = similarity.pairs_touching(vectors, groups, changed, 0.8)
    assert_well_formed(touching)
    mine = changed[whole.left] | changed[whole.right]
    assert pair_set(touching) == set(zip(whole.left[mine].tolist(), whole.right[mine].tolist(), strict=True))
    assert np.array_equal(touching.score, whole.score[mine]), "the same scores, bit for bit"
    assert len(touching) and len(touching) < len(whole)

    rows = groups != 1  # a caller's rows: group 1 takes no part
    among = rows[whole.left] & rows[whole.right]
    assert pair_set(similar_pairs(vectors, groups, 0.8, rows=rows)) == set(
        zip(whole.left[among].tolist(), whole.right[among].tolist(), strict=True)
    )
    assert pair_set(similarity.pairs_touching(vectors, groups, changed, 0.8, rows=rows)) == set(
        zip(whole.left[mine & among].tolist(), whole.right[mine & among].tolist(), strict=True)
    )


def test_progress_is_reported_per_tile_and_cell() -> None:
    recorder = ProgressRecorder()
    groups = np.repeat([0, 1], [300, 3000])
    similar_pairs(clustered(3300, topics=20, seed=9), groups, 0.8, exact_cutoff=1000, progress=recorder)

    assert [task for task, _, _ in recorder.tasks] == [
        "similar pairs: exact tiles",
        "similar pairs: group 1 cells",
    ]
    assert all(total == done and done > 0 for _, total, done in recorder.tasks)


@pytest.mark.parametrize(
    ("vectors", "groups", "threshold"),
    [
        (np.zeros((3, 4)), np.zeros(2), 0.8),  # a group code per row
        (np.zeros(4), np.zeros(4), 0.8),  # 2-d vectors
        (np.zeros((3, 4)), np.zeros(3), 0.0),  # every pair would be in
        (np.zeros((3, 4)), np.zeros(3), 1.5),
    ],
)
def test_bad_input_is_refused(vectors: np.ndarray, groups: np.ndarray, threshold: float) -> None:
    with pytest.raises(ValueError):
        similar_pairs(vectors, groups, threshold)


def _vector_table(groups: dict[str, np.ndarray]) -> pa.Table:
    dim = next(iter(groups.values())).shape[1]
    rows = [
        {"id": f"{ns}-{i}", "namespace": ns, "model": "m", "source": "stored", "vector": v.tolist()}
        for ns, block in groups.items()
        for i, v in enumerate(block)
    ]
    return pa.Table.from_pylist(rows, schema=vector_schema(dim))


def _source(groups: dict[str, np.ndarray], loads: list[list[str] | None] | None = None) -> VectorSource:
    """A source over the groups' vectors that records which namespaces were loaded."""
    whole = VectorSource.of(_vector_table(groups))

    def load(namespaces: list[str] | None, ids: pa.Array | None = None) -> pa.Table:
        if loads is not None:
            loads.append(namespaces)
        return whole.load(namespaces, ids)

    return VectorSource(whole.digests, load)


def _sorted(pairs: pa.Table) -> pa.Table:
    return pairs.sort_by([(k, "ascending") for k in ("namespace", "left_id", "right_id")])


def test_cached_pairs_recompute_only_the_namespaces_whose_vectors_changed(tmp_path, monkeypatch) -> None:
    from engram_pipelines.vectors import pair_cache
    from engram_pipelines.vectors.pairs import vector_pairs

    a, b, c = (clustered(60, 4, seed=s, dim=16) for s in (1, 2, 3))
    first = pair_cache.cached_vector_pairs(
        _source({"a": a, "b": b, "c": c}), 0.8, exact_cutoff=1000, directory=tmp_path
    )
    assert (first.reused_namespaces, first.compared_namespaces) == (0, 3)
    loads: list[list[str] | None] = []
    files = {path: path.stat().st_mtime_ns for path in tmp_path.glob("*.parquet")}
    quiet = pair_cache.cached_vector_pairs(
        _source({"a": a, "b": b, "c": c}, loads), 0.8, exact_cutoff=1000, directory=tmp_path
    )
    assert quiet.reused_namespaces == 3 and loads == [[]], "nothing moved: no namespace's vectors are read"
    assert quiet.pairs.equals(first.pairs)
    assert {path: path.stat().st_mtime_ns for path in tmp_path.glob("*.parquet")} == files, "nor rewritten"

    compared: list[set[str]] = []

    def spy(vectors, *args, rows=None, **kwargs):
        joined = vectors if rows is None else vectors.filter(pa.array(rows))
        compared.append(set(joined["namespace"].to_pylist()))
        return vector_pairs(vectors, *args, rows=rows, **kwargs)

    monkeypatch.setattr(pair_cache, "vector_pairs", spy)
    b_moved, c_moved = b.copy(), clustered(60, 4, seed=4, dim=16)
    b_moved[0] = b_moved[1]  # one row of b changed; every row of c
    groups = {"a": a, "b": b_moved, "c": c_moved}
    loads.clear()
    second = pair_cache.cached_vector_pairs(
        _source(groups, loads), 0.8, exact_cutoff=1000, directory=tmp_path
    )
    assert compared == [{"c"}], "b is updated (one row of 60 moved), c joined whole (all moved)"
    assert (second.reused_namespaces, second.updated_namespaces, second.compared_namespaces) == (1, 1, 1)
    assert second.changed_rows == 1 and second.methods["exact, moved rows"] == 1
    assert loads == [["b", "c"]], "only the moved namespaces' vectors are read"
    expected, _ = vector_pairs(_vector_table(groups), 0.8, exact_cutoff=1000)
    assert _sorted(second.pairs).equals(_sorted(expected)), "pair for pair and score for score"
    other_threshold = pair_cache.cached_vector_pairs(
        VectorSource.of(_vector_table(groups)), 0.9, exact_cutoff=1000, directory=tmp_path
    )
    assert other_threshold.reused_namespaces == 0, "pairs found under other settings are never reused"


def test_updated_namespaces_match_a_whole_join_over_nights_of_edits_deletes_and_restores(tmp_path) -> None:
    """Rows edited, deleted, added, moved to another model, and a deleted row restored: each night's cached
    pairs equal a whole join of that night's vectors, exactly; a namespace over the exact cutoff is joined
    whole."""
    from engram_pipelines.vectors import pair_cache
    from engram_pipelines.vectors.pairs import vector_pairs

    rng = np.random.default_rng(9)
    rows = {
        ns: {f"{ns}-{i}": ("m", v) for i, v in enumerate(clustered(size, 5, seed=k, dim=16))}
        for k, (ns, size) in enumerate([("a", 30), ("b", 90), ("large", 400)])
    }
    deleted: tuple[str, str, tuple[str, np.ndarray]] | None = None
    for night in range(5):
        if night:
            for ns, members in rows.items():
                ids = sorted(members)
                for i in rng.choice(len(ids), 3, replace=False):  # edited
                    members[ids[i]] = (members[ids[i]][0], clustered(1, 1, seed=100 * night + i, dim=16)[0])
                members[f"{ns}-new-{night}"] = ("m", members[ids[0]][1])  # an exact twin of a kept row
            moved_model = sorted(rows["b"])[night]
            rows["b"][moved_model] = ("other", rows["b"][moved_model][1])
            if deleted is not None:
                ns, row_id, value = deleted
                rows[ns][row_id] = value
            ns, row_id = "b", sorted(rows["b"])[10 + night]
            deleted = (ns, row_id, rows[ns].pop(row_id))
        table = pa.Table.from_pylist(
            [
                {"id": i, "namespace": ns, "model": m, "source": "stored", "vector": v.tolist()}
                for ns, members in rows.items()
                for i, (m, v) in members.items()
            ],
            schema=vector_schema(16),
        )
        found = pair_cache.cached_vector_pairs(
            VectorSource.of(table), 0.8, exact_cutoff=100, directory=tmp_path
        )
        expected, _ = vector_pairs(table, 0.8, exact_cutoff=100)
        assert _sorted(found.pairs).equals(_sorted(expected)), f"night {night}"
        if night:
            assert (found.updated_namespaces, found.compared_namespaces) == (2, 1), "large is joined whole"


def test_a_rows_file_of_other_pairs_is_not_used(tmp_path) -> None:
    from engram_pipelines.vectors import pair_cache

    a = clustered(60, 4, seed=1, dim=16)
    pair_cache.cached_vector_pairs(_source({"a": a}), 0.8, exact_cutoff=1000, directory=tmp_path)
    rows_file = next(tmp_path.glob("rows-*.parquet"))
    kept = rows_file.read_bytes()
    pair_cache.cached_vector_pairs(_source({"a": a[:50]}), 0.8, exact_cutoff=1000, directory=tmp_path)
    rows_file.write_bytes(kept)  # as if a run died between its two files, or two runs raced
    moved = a.copy()
    moved[0] = moved[1]
    again = pair_cache.cached_vector_pairs(_source({"a": moved}), 0.8, exact_cutoff=1000, directory=tmp_path)
    assert (again.updated_namespaces, again.compared_namespaces) == (0, 1)
