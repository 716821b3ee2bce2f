"""Precision and recall of merges at the default thresholds, on real labelled sentence pairs (STS-B test).

    .venv/bin/python bench/merge_quality.py [--stsb PATH]   (default: ../shared/data/stsb_test.csv, or $ENGRAM_QUALITY_DATA)

Each STS-B pair becomes two memories in a namespace of their own (so only the labelled pair can meet), embedded
by the default embedder (vectors cached in a scratch warehouse), and goes through the real analyses: similar
pairs, duplicate collapse (>= 0.97), contradiction detection (its pairs are never merged) and consolidation
([0.85, 0.97)). A pair counts as merged when either step superseded one side. Gold: score >= 4 ("mostly
equivalent") should merge; <= 2 should not; in between is reported apart.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.paths import SHARED_DATA  # noqa: E402
from engram_pipelines.analyses.merges.collapse import collapse_duplicates, consolidate  # noqa: E402
from engram_pipelines.config.model import Config  # noqa: E402
from engram_pipelines.core import records  # noqa: E402
from engram_pipelines.vectors.comparable import partition_vectors  # noqa: E402
from engram_pipelines.vectors.embeddings import load_embedder  # noqa: E402
from engram_pipelines.vectors.pairs import exact_content_pairs, merged_pairs, vector_pairs  # noqa: E402

AS_OF = dt.datetime(2026, 11, 30, tzinfo=dt.UTC)


def memories_of(stsb: pd.DataFrame) -> pa.Table:
    rows = []
    for i, pair in enumerate(stsb.itertuples()):
        for side, text in (("a", pair.sentence1), ("b", pair.sentence2)):
            rows.append(
                {
                    "id": f"p{i:05d}{side}",
                    "namespace": f"pair{i:05d}",
                    "tier": "ltm",
                    "kind": "episodic",
                    "content": str(text),
                    "embedding": None,
                    "embedding_model": None,
                    "embedded_content_sha": None,
                    "importance": 0.5,
                    "score": None,
                    "access_count": 0,
                    "last_accessed_at": None,
                    "created_at": AS_OF - dt.timedelta(days=2 if side == "a" else 1),
                    "updated_at": AS_OF,
                    "version": 1,
                    "pinned": False,
                    "zone": "active",
                    "zone_since": None,
                    "superseded_by": None,
                    "stale": False,
                    "tags": "[]",
                    "metadata": "{}",
                }
            )
    return pa.Table.from_pylist(rows, schema=records.memory_schema(384))


def contradiction_pairs(memories: pa.Table, pairs: pa.Table) -> pa.Table | None:
    try:
        from engram_pipelines.analyses.contradictions.detect import detect
        from engram_pipelines.analyses.contradictions.features import memory_features
        from engram_pipelines.analyses.contradictions.rules import load_rules
    except ImportError:
        return None
    rules = load_rules()
    features = memory_features(memories["id"].to_pylist(), memories["content"].to_pylist(), rules)
    created = dict(zip(memories["id"].to_pylist(), memories["created_at"].to_pylist(), strict=True))
    table = pa.table(
        {
            "left_id": pairs["left_id"],
            "right_id": pairs["right_id"],
            "left_created_at": pa.array(
                [created[i] for i in pairs["left_id"].to_pylist()], records.TIMESTAMP
            ),
            "right_created_at": pa.array(
                [created[i] for i in pairs["right_id"].to_pylist()], records.TIMESTAMP
            ),
        }
    )
    return detect(table, features, rules).select(["left_id", "right_id"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stsb", type=Path, default=SHARED_DATA / "stsb_test.csv")
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/engram-merge-quality"))
    args = parser.parse_args()
    config = Config()
    stsb = pd.read_csv(args.stsb)
    memories = memories_of(stsb)
    vectors, stats = partition_vectors(memories, load_embedder(), args.scratch)
    found, _ = vector_pairs(
        vectors, config.similarity.merge_threshold, exact_cutoff=config.similarity.exact_cutoff
    )
    pairs = merged_pairs(found, exact_content_pairs(memories))
    excluded = contradiction_pairs(memories, pairs)
    dup = collapse_duplicates(
        pairs, memories, threshold=config.similarity.duplicate_threshold, at=AS_OF, excluded_pairs=excluded
    )
    taken = frozenset(loser for c in dup.clusters for loser, _ in c.losers)
    merge = consolidate(
        pairs,
        memories,
        low=config.similarity.merge_threshold,
        high=config.similarity.duplicate_threshold,
        at=AS_OF,
        excluded_pairs=excluded,
        excluded_ids=taken,
    )
    merged_namespaces = {c.namespace for c in dup.clusters + merge.clusters}
    cosine = {r["namespace"]: r["score"] for r in pairs.to_pylist()}
    stsb["namespace"] = [f"pair{i:05d}" for i in range(len(stsb))]
    stsb["merged"] = stsb["namespace"].isin(merged_namespaces)
    stsb["cosine_in_band"] = stsb["namespace"].map(
        lambda n: cosine.get(n, 0.0) >= config.similarity.merge_threshold
    )
    stsb["gold"] = pd.cut(
        stsb["score"], [-1, 2.0, 3.999, 5.1], labels=["different (<=2)", "related (2-4)", "equivalent (>=4)"]
    )
    positives = stsb["score"] >= 4
    tp = int((stsb["merged"] & positives).sum())
    fp = int((stsb["merged"] & ~positives).sum())
    fn = int((~stsb["merged"] & positives).sum())
    blocked = int((stsb["cosine_in_band"] & ~stsb["merged"]).sum())
    print(
        f"# merge quality on STS-B test ({len(stsb)} pairs), embedder {load_embedder().name}, "
        f"thresholds merge {config.similarity.merge_threshold} / duplicate {config.similarity.duplicate_threshold}"
    )
    print(
        f"vectors: {stats.as_dict()}; contradiction exclusion: {'on' if excluded is not None else 'off'} "
        f"({0 if excluded is None else excluded.num_rows} pairs)"
    )
    print("| | pairs | merged | merge rate |")
    print("|---|---|---|---|")
    for label, group in stsb.groupby("gold", observed=True):
        print(f"| {label} | {len(group)} | {int(group['merged'].sum())} | {group['merged'].mean():.3f} |")
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    print(
        f"\nprecision {precision:.3f}, recall {recall:.3f} (positive = gold >= 4); duplicates step merged "
        f"{sum(len(c.losers) for c in dup.clusters)}, consolidation {merge.merged}; "
        f"{blocked} pairs in the band were kept apart by the guards (numbers differ or contradiction)"
    )
    wrong = stsb[stsb["merged"] & (stsb["score"] <= 2)]
    print("\nmerged although gold <= 2:")
    for row in wrong.itertuples():
        print(f"- {row.score}: {row.sentence1!r} / {row.sentence2!r}")


if __name__ == "__main__":
    main()
