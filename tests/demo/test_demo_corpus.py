"""The demo corpus: deterministic, schema-true, and its ground truth holds on the data itself."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engram_pipelines.core import records
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.demo import corpus as demo_corpus
from engram_pipelines.demo.corpus import DemoCorpus, generate, parse_note, write_jsonl

AS_OF = dt.date(2026, 11, 29)
# Relational and copular forms a structural contradiction join parses; background text must avoid them.
RELATIONAL = re.compile(r"\b(is|are|was|were|uses|prefers|lives in|works at)\b|[:=]")


@pytest.fixture(scope="module")
def small() -> DemoCorpus:
    return generate(1_000, seed=7)


@pytest.fixture(scope="module")
def large() -> DemoCorpus:
    return generate(50_000, seed=11)


@pytest.fixture(scope="module", params=["small", "large"])
def corpus(request: pytest.FixtureRequest) -> DemoCorpus:
    return request.getfixturevalue(request.param)


class View:
    """Numpy views of one corpus for the checks."""

    def __init__(self, corpus: DemoCorpus):
        self.m = corpus.memories
        self.truth = corpus.truth.to_pylist()
        self.ids = self.m.column("id").to_pylist()
        self.row = {x: i for i, x in enumerate(self.ids)}
        embedding = self.m.column("embedding").combine_chunks()
        self.has_vector = np.asarray(embedding.is_valid())
        self.vectors = embedding.values.to_numpy(zero_copy_only=False).reshape(len(self.ids), -1)
        self.namespace = np.asarray(self.m.column("namespace").to_pylist(), dtype=object)
        self.content = self.m.column("content").to_pylist()

    def cos(self, a: str, b: str) -> float:
        return float(self.vectors[self.row[a]] @ self.vectors[self.row[b]])

    def groups(self, kind: str) -> list[dict]:
        return [t for t in self.truth if t["kind"] == kind]

    def column(self, name: str, ids: list[str]) -> list:
        values = self.m.column(name)
        return [values[self.row[x]].as_py() for x in ids]


_views: dict[int, tuple[DemoCorpus, View]] = {}


def view(corpus: DemoCorpus) -> View:
    """The View of a corpus, built once per module-scoped corpus (the cache keeps the corpus alive)."""
    cached = _views.get(id(corpus))
    if cached is None or cached[0] is not corpus:
        cached = _views[id(corpus)] = (corpus, View(corpus))
    return cached[1]


def note_cosines(note: str) -> list[float]:
    return [float(v) for v in parse_note(note)["cos"].split(",")]


# -- determinism, schema, sizes ---------------------------------------------------------------------------


def test_same_seed_same_tables_and_other_seed_differs(small: DemoCorpus) -> None:
    again = generate(1_000, seed=7)
    assert again.memories.equals(small.memories)
    assert again.links.equals(small.links)
    assert again.truth.equals(small.truth)
    other = generate(1_000, seed=8)
    assert not other.memories.equals(small.memories)
    assert other.memories.column("id").to_pylist() != small.memories.column("id").to_pylist()


def test_schemas(corpus: DemoCorpus) -> None:
    assert corpus.memories.schema.equals(records.memory_schema(384))
    assert corpus.links.schema.equals(records.LINK_SCHEMA)
    assert corpus.truth.schema.equals(demo_corpus.TRUTH_SCHEMA)
    assert set(corpus.memories.column("embedding_model").drop_null().to_pylist()) == {"demo-synthetic-384"}
    assert set(corpus.memories.column("version").to_pylist()) <= {1, 2, 3}


@pytest.mark.parametrize("fixture, n", [("small", 1_000), ("large", 50_000)])
def test_sizes_namespaces_and_planted_share(fixture: str, n: int, request: pytest.FixtureRequest) -> None:
    corpus = request.getfixturevalue(fixture)
    v = view(corpus)
    assert corpus.memories.num_rows == n
    assert len(set(v.ids)) == n, "id collision"
    names = set(v.namespace)
    assert set(demo_corpus.CORE_NAMESPACES) <= names
    if n > 20_000:
        assert any(name.startswith("tenant:") for name in names)
    planted = {x for t in v.truth if t["kind"] in demo_corpus.ROW_KINDS for x in t["ids"]}
    share = len(planted) / n
    assert 0.15 <= share <= 0.30, share
    if n >= 50_000:
        assert abs(share - demo_corpus.PLANTED_FRACTION) < 0.02
    assert {t["kind"] for t in v.truth} >= set(demo_corpus.ROW_KINDS)
    documented = set(demo_corpus.TRUTH_KINDS)
    assert {t["kind"] for t in v.truth} <= documented
    assert documented == {*demo_corpus.ROW_KINDS, *demo_corpus.TRUTH_LINK_KINDS}


def test_namespace_count_argument() -> None:
    one = generate(600, namespaces=1)
    assert set(one.memories.column("namespace").to_pylist()) == {"agent:coder"}
    assert "cross_namespace_twin" not in set(one.truth.column("kind").to_pylist())
    six = generate(2_000, namespaces=6)
    assert set(six.memories.column("namespace").to_pylist()) == {
        *demo_corpus.CORE_NAMESPACES,
        "tenant:0001",
        "tenant:0002",
    }


def test_too_small_is_refused() -> None:
    with pytest.raises(ValueError, match="at least"):
        generate(100)


# -- vectors and planted cosines --------------------------------------------------------------------------


def test_vectors_unit_norm_and_only_planted_rows_lack_one(corpus: DemoCorpus) -> None:
    v = view(corpus)
    norms = np.linalg.norm(v.vectors[v.has_vector], axis=1)
    assert np.allclose(norms, 1.0, atol=1e-5)
    missing = {x for t in v.groups("missing_embedding") for x in t["ids"]}
    assert {v.ids[i] for i in np.flatnonzero(~v.has_vector)} == missing


def test_duplicates_and_twins(corpus: DemoCorpus) -> None:
    v = view(corpus)
    for t in v.groups("exact_duplicate"):
        head = t["ids"][0]
        assert len({v.content[v.row[x]] for x in t["ids"]}) == 1
        assert all(v.cos(head, x) > 0.9999 for x in t["ids"][1:])
    for kind in ("near_duplicate", "embedding_excluded"):
        for t in v.groups(kind):
            cosines = [v.cos(t["ids"][0], x) for x in t["ids"][1:]]
            assert all(c >= 0.97 for c in cosines), (kind, cosines)
            assert np.allclose(cosines, note_cosines(t["note"]), atol=1e-3)
    for t in v.groups("cross_namespace_twin"):
        a, b = t["ids"]
        assert v.namespace[v.row[a]] != v.namespace[v.row[b]]
        assert t["namespace"] == f"{v.namespace[v.row[a]]},{v.namespace[v.row[b]]}"
        assert v.cos(a, b) >= 0.97
        if parse_note(t["note"])["exact_content"] == "yes":
            assert v.content[v.row[a]] == v.content[v.row[b]]


def test_merge_clusters_are_in_band_to_their_head(corpus: DemoCorpus) -> None:
    v = view(corpus)
    for kind in ("merge_cluster", "pinned_cluster_member", "superseded"):
        for t in v.groups(kind):
            head = t["ids"][0]
            cosines = [v.cos(head, x) for x in t["ids"][1:]]
            assert all(0.85 <= c < 0.97 for c in cosines), (kind, cosines)
            assert np.allclose(cosines, note_cosines(t["note"]), atol=1e-3)
            importance = v.column("importance", t["ids"])
            assert importance[0] == max(importance), "the head is the canonical"
            assert len(t["ids"]) >= 2


def test_chains_have_ends_below_the_merge_threshold(corpus: DemoCorpus) -> None:
    v = view(corpus)
    chains = v.groups("chain")
    assert chains
    for t in chains:
        a, b, c = t["ids"]
        assert 0.85 <= v.cos(a, b) < 0.97 and 0.85 <= v.cos(b, c) < 0.97
        assert v.cos(a, c) < 0.85
        assert abs(v.cos(a, c) - float(parse_note(t["note"])["ends"])) < 1e-3


def test_contradictions_sit_in_their_stated_band(corpus: DemoCorpus) -> None:
    v = view(corpus)
    for kind in ("contradiction", "structural_contradiction", "contradiction_control"):
        groups = v.groups(kind)
        assert groups
        for t in groups:
            note = parse_note(t["note"])
            lo, hi = (float(x) for x in note["band"].strip("[)").split(","))
            older, newer = t["ids"]
            recorded = float(note["cos"])
            assert lo <= recorded < hi
            assert abs(v.cos(older, newer) - recorded) < 1e-3
            created = v.column("created_at", t["ids"])
            assert created[0] < created[1], "the newer statement comes later"
            old_text, new_text = v.content[v.row[older]], v.content[v.row[newer]]
            assert old_text != new_text
            subject = note["subject"]
            assert subject.lower() in old_text.lower()
            if note["rule"] != "pronoun_subject":
                assert subject.lower() in new_text.lower()
    structural = [float(parse_note(t["note"])["cos"]) for t in v.groups("structural_contradiction")]
    assert max(structural) < 0.80


def test_patterns_associations_and_compression(corpus: DemoCorpus) -> None:
    v = view(corpus)
    bands = {
        "semantic_pattern": (0.70, 0.85),
        "single_conversation_pattern": (0.70, 0.85),
        "compression_cluster": (0.75, 0.85),
    }
    for kind, (lo, hi) in bands.items():
        for t in v.groups(kind):
            ids = t["ids"]
            pairwise = [v.cos(a, b) for i, a in enumerate(ids) for b in ids[i + 1 :]]
            assert lo <= min(pairwise) and max(pairwise) < hi, (kind, pairwise)
            note = parse_note(t["note"])
            assert abs(min(pairwise) - float(note["pairwise_min"])) < 1e-3
            conversations = {json.loads(m).get("conversation_id") for m in v.column("metadata", ids)}
            assert len(ids) >= 3
            assert len(conversations) == (len(ids) if kind == "semantic_pattern" else 1)
    for t in v.groups("association"):
        assert 0.70 <= v.cos(*t["ids"]) < 0.85


def test_no_unplanted_similar_pairs(corpus: DemoCorpus) -> None:
    """Every pair at cosine >= 0.70 inside a namespace belongs to one truth group: the truth is complete.

    All namespaces of the small corpus; of the large one, those of at most 3,000 rows: all-pairs products of
    the big ones take seconds (the 1M corpus was checked once, blockwise, when the generator was written)."""
    v = view(corpus)
    groups_of = defaultdict(set)
    for g, t in enumerate(v.truth):
        if t["kind"] in demo_corpus.ROW_KINDS:
            for x in t["ids"]:
                groups_of[v.row[x]].add(g)
    same_topic = []
    sizes = Counter(v.namespace)
    limit = len(v.ids) if len(v.ids) <= 10_000 else 3_000
    checked = [name for name, size in sizes.items() if size <= limit] or [min(sizes, key=sizes.get)]
    for name in checked:
        rows = np.flatnonzero((v.namespace == name) & v.has_vector)
        sims = v.vectors[rows] @ v.vectors[rows].T
        np.fill_diagonal(sims, 0.0)
        for i, j in zip(*np.nonzero(np.triu(sims >= 0.70)), strict=True):
            assert groups_of[rows[i]] & groups_of[rows[j]], (v.content[rows[i]], v.content[rows[j]])
        same_topic.append(np.mean((sims > 0.25) & (sims < 0.6)))
    assert np.mean(same_topic) > 0.05, "a realistic histogram: a share of unrelated pairs share a topic"


# -- truth groups, content ---------------------------------------------------------------------------------


def test_truth_groups_live_in_one_namespace(corpus: DemoCorpus) -> None:
    v = view(corpus)
    for t in v.truth:
        spaces = {v.namespace[v.row[x]] for x in t["ids"] if x in v.row}
        if t["kind"] == "cross_namespace_twin":
            assert len(spaces) == 2
        else:
            assert spaces == {t["namespace"]}, t
        assert t["expected"]


def test_content_is_unique_except_planted_copies(corpus: DemoCorpus) -> None:
    v = view(corpus)
    copies = {x for t in v.groups("exact_duplicate") for x in t["ids"]}
    copies |= {
        x for t in v.groups("cross_namespace_twin") if "exact_content=yes" in t["note"] for x in t["ids"]
    }
    repeated = {text for text, count in Counter(v.content).items() if count > 1}
    assert {v.ids[i] for i, text in enumerate(v.content) if text in repeated} == copies


def test_background_reads_like_memories_and_plants_no_relations(small: DemoCorpus) -> None:
    v = view(small)
    planted = {x for t in v.truth if t["kind"] in demo_corpus.ROW_KINDS for x in t["ids"]}
    background = [text for x, text in zip(v.ids, v.content, strict=True) if x not in planted]
    assert len(background) > 600
    assert not [text for text in background if RELATIONAL.search(text)]
    assert all(
        len(text.split()) >= 4 and text[0].isupper() and text.endswith((".", ")")) for text in v.content
    )
    words = Counter(w.lower().strip(".,()") for text in v.content for w in text.split())
    assert {"decision", "incident", "release"} & set(words)


# -- lifecycle profiles ------------------------------------------------------------------------------------


def test_lifecycle_profiles(corpus: DemoCorpus) -> None:
    v = view(corpus)
    anchor = end_of_day(AS_OF)
    for t in v.groups("pinned"):
        (x,) = t["ids"]
        assert v.column("pinned", [x]) == [True] and v.column("access_count", [x]) == [0]
        assert (anchor - v.column("created_at", [x])[0]).days >= 90
    assert any("deprecated" in t["note"] for t in v.groups("pinned"))
    for t in v.groups("pinned_cluster_member"):
        assert v.column("pinned", t["ids"])[:2] == [False, True]
    assert set(v.column("kind", [t["ids"][0] for t in v.groups("block")])) == {"block"}
    for t in v.groups("stale"):
        (x,) = t["ids"]
        assert v.column("access_count", [x]) == [0] and v.column("last_accessed_at", [x]) == [None]
        assert (anchor - v.column("created_at", [x])[0]).days >= 90
    for t in v.groups("deprecated"):
        assert "deprecated" in json.loads(v.column("tags", t["ids"])[0])
    for zone in ("archived", "purge_queue"):
        for t in v.groups(zone):
            assert v.column("zone", t["ids"]) == [zone]
            since = v.column("zone_since", t["ids"])[0]
            due = parse_note(t["note"])["due"] == "yes"
            assert ((anchor - since).days >= 30) == due
    for t in v.groups("superseded"):
        head, loser = t["ids"]
        assert v.column("superseded_by", [head, loser]) == [None, head]


def test_promotion_candidates_and_non_candidates(corpus: DemoCorpus) -> None:
    v = view(corpus)
    m = corpus.memories
    tier = np.asarray(m.column("tier").to_pylist())
    kind = np.asarray(m.column("kind").to_pylist())
    access = m.column("access_count").to_numpy()
    importance = m.column("importance").to_numpy()
    promotable = {v.ids[i] for i in np.flatnonzero((tier == "stm") & (access >= 3) & (importance >= 0.5))}
    assert promotable == {t["ids"][0] for t in v.groups("promotable_stm")}
    hot = (kind == "episodic") & (access > 10) & (importance > 0.8)
    inbound = Counter(corpus.links.filter(pc.equal(corpus.links["kind"], "associated"))["dst_id"].to_pylist())
    tags = m.column("tags").to_pylist()
    candidates = {
        v.ids[i]
        for i in np.flatnonzero(hot)
        if inbound[v.ids[i]] >= 2 or {"critical", "permanent"} & set(json.loads(tags[i]))
    }
    assert candidates == {t["ids"][0] for t in v.groups("semantic_promotion")}


def test_timestamps_are_ordered_and_before_the_as_of_instant(corpus: DemoCorpus) -> None:
    m = corpus.memories
    anchor = end_of_day(AS_OF)
    earliest = anchor - dt.timedelta(days=demo_corpus.HISTORY_DAYS)

    def micros(name: str) -> np.ndarray:
        return m.column(name).cast(pa.int64()).to_numpy(zero_copy_only=False)

    created, updated = micros("created_at"), micros("updated_at")
    limit = int(anchor.timestamp() * 1_000_000)
    assert created.min() >= int(earliest.timestamp() * 1_000_000) and created.max() < limit
    assert np.all(created <= updated) and updated.max() < limit
    last = m.column("last_accessed_at")
    accessed = np.asarray(last.is_valid())
    assert np.array_equal(accessed, m.column("access_count").to_numpy() > 0)
    last_us = micros("last_accessed_at")
    assert np.all(created[accessed] <= last_us[accessed]) and last_us[accessed].max() < limit
    zoned = np.asarray(m.column("zone_since").is_valid())
    assert np.array_equal(zoned, np.asarray(m.column("zone").to_pylist()) != "active")
    since = micros("zone_since")
    assert np.all(created[zoned] <= since[zoned]) and np.all(since[zoned] < limit)
    assert np.all(np.diff(created) >= 0), "rows are listed in creation order"


# -- links -------------------------------------------------------------------------------------------------


def test_links_garbage_and_temporal_truth(corpus: DemoCorpus) -> None:
    v = view(corpus)
    links = corpus.links.to_pylist()
    assert {link["kind"] for link in links} >= {"temporal", "associated", "duplicate-of"}
    dangling = {
        (link["src_id"], link["dst_id"])
        for link in links
        if not (link["src_id"] in v.row and link["dst_id"] in v.row)
    }
    assert dangling == {tuple(t["ids"]) for t in v.groups("dangling_link")}
    keys = Counter((link["src_id"], link["dst_id"], link["kind"]) for link in links)
    assert {k[:2] for k, count in keys.items() if count > 1} == {
        tuple(t["ids"]) for t in v.groups("duplicate_link")
    }
    for link in links:
        assert link["created_at"] <= link["updated_at"] < end_of_day(AS_OF)
        assert link["traversed_at"] is None or link["traversed_at"] >= link["created_at"]
        ends = {v.namespace[v.row[x]] for x in (link["src_id"], link["dst_id"]) if x in v.row}
        assert ends == {link["namespace"]}, "no link crosses namespaces"
    by_pair = {(link["src_id"], link["dst_id"]): link for link in links if link["kind"] == "temporal"}
    for t in v.groups("temporal_prune"):
        assert by_pair[tuple(t["ids"])]["weight"] * 0.95 < 0.05
    for t in v.groups("temporal_boost"):
        link = by_pair[tuple(t["ids"])]
        assert link["traversed_at"] > link["updated_at"]
    linked = {x for pair in by_pair for x in pair}
    for t in v.groups("temporal_missing"):
        assert not linked & set(t["ids"])
        created = v.column("created_at", t["ids"])
        assert created == sorted(created)


# -- the import file ---------------------------------------------------------------------------------------


def test_write_jsonl_round_trips(small: DemoCorpus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_corpus, "JSONL_BATCH_ROWS", 300)  # several batches: sliced vectors line up
    path = tmp_path / "demo.jsonl"
    assert write_jsonl(small, path) == 1_000
    lines = path.read_text().splitlines()
    assert len(lines) == 1_000
    first = json.loads(lines[0])
    assert list(first)[:14] == [
        "id",
        "namespace",
        "tier",
        "kind",
        "content",
        "created_at",
        "last_accessed_at",
        "importance",
        "access_count",
        "tags",
        "pinned",
        "metadata",
        "embedding",
        "embedding_model",
    ]
    assert first["created_at"].endswith("Z")
    v = view(small)
    parsed = [json.loads(line) for line in lines]
    assert [r["id"] for r in parsed] == v.ids
    missing = {x for t in v.groups("missing_embedding") for x in t["ids"]}
    assert {r["id"] for r in parsed if r["embedding"] is None} == missing
    for i, record in enumerate(parsed):
        assert record.get("conversation_id") == record["metadata"].get("conversation_id")
        assert record["content"] == v.content[i]
        if i % 7 == 0 and record["embedding"] is not None:
            assert np.array_equal(np.asarray(record["embedding"], np.float32), v.vectors[i])
