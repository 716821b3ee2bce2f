"""Embedding throughput of the default embedder (all-MiniLM-L6-v2 int8, ONNX) on real sentences, and of the
faster packaged option (`minilm-l3`: paraphrase-MiniLM-L3-v2) the same way.

Each method embeds the same texts (LoCoMo dialogue turns and facts, read from ../shared/data or
ENGRAM_QUALITY_DATA) and prints sentences/s, beside the simple method (the texts in the order given, batches of
32), and how far its vectors are from the simple method's (max |difference| and the lowest cosine: "identical"
is what the aim asks; the L3 model's vectors are another space, not compared).

    .venv/bin/python bench/embed_speed.py [--rows 3000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import SHARED_DATA  # noqa: E402
from bench.timing import repeated  # noqa: E402
from engram_pipelines.core.progress import SilentProgress  # noqa: E402
from engram_pipelines.vectors.embeddings import MINILM_L3, MiniLMEmbedder, embed_in_batches  # noqa: E402


def sentences(rows: int) -> list[str]:
    root = SHARED_DATA / "locomo_dev"
    texts = [json.loads(line)["fact"] for line in (root / "observations.jsonl").read_text().splitlines()]
    for conversation in json.loads((root / "conversations.json").read_text()):
        for key, turns in sorted(conversation["conversation"].items()):
            if key.startswith("session_") and isinstance(turns, list):
                texts += [f"{t['speaker']}: {t['text']}" for t in turns]
    return texts[:rows]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    texts = sentences(args.rows)
    embedder = MiniLMEmbedder()
    fast = MiniLMEmbedder(MINILM_L3)
    for loaded in (embedder, fast):
        loaded.embed(texts[:8])  # load the model and warm the session

    def batches(order: np.ndarray, size: int) -> np.ndarray:
        """The earlier paths: each batch of `size` texts in `order` tokenised and run as one, padded to its
        longest text."""
        out = np.empty((len(texts), embedder.dim), dtype=np.float32)
        for start in range(0, len(texts), size):
            positions = order[start : start + size]
            encodings = embedder._tokenizer.encode_batch([texts[i] for i in positions])
            out[positions] = embedder._embed_encoded([e.ids for e in encodings])
        return out

    given = np.arange(len(texts))
    by_chars = np.argsort([len(t) for t in texts], kind="stable")
    methods = {
        "given order, batches of 32 (the simple method)": lambda: batches(given, 32),
        "sorted by characters, batches of 64 (the nightly until 2026-12-02)": lambda: batches(by_chars, 64),
        "sorted by tokens, batches of 32 (embed_in_batches now)": lambda: embed_in_batches(
            embedder, texts, progress=SilentProgress()
        ),
        "paraphrase-MiniLM-L3-v2 (`minilm-l3`), sorted by tokens, batches of 32": lambda: embed_in_batches(
            fast, texts, progress=SilentProgress()
        ),
    }
    base = None
    print(f"{len(texts):,} sentences, mean {np.mean([len(t) for t in texts]):.0f} characters\n")
    print("| method | seconds | sentences/s | x simple | max abs diff | min cosine |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, fn in methods.items():
        runs, vectors = repeated(fn, args.repeat)
        seconds = min(runs)
        if base is None:
            base = (seconds, vectors)
        same_space = not name.startswith(MINILM_L3.name)
        diff = f"{float(np.abs(vectors - base[1]).max()):.2e}" if same_space else "another model"
        cosine = f"{float(np.min(np.sum(vectors * base[1], axis=1))):.6f}" if same_space else "-"
        print(
            f"| {name} | {seconds:.2f} | {len(texts) / seconds:,.0f} | {base[0] / seconds:.2f} | "
            f"{diff} | {cosine} |"
        )


if __name__ == "__main__":
    main()
