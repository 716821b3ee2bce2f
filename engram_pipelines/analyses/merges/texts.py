"""What the merge steps read of a memory's text, parsed once per distinct content.

The numbers two rows must share and the words, names and subject containment compares (`containment`) depend on
nothing but the text and the parser: with a cache root (the warehouse) they are kept across nights by content
hash, so a quiet night parses only new or edited texts (at 1M memories, parsing the rows of the duplicate and
consolidation bands took 2.3 and 6.8 s a night). The cache is keyed by the parser's source and word lists: a
changed parser never answers from an older one's results.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.merges import containment
from engram_pipelines.core.digests import files_digest
from engram_pipelines.warehouse.content_cache import ContentCache, computed_by_content, string_array

# `numbers`: the text's numbers as a JSON list (compared as text: equal lists, equal strings).
MERGE_TEXT_SCHEMA = pa.schema(
    [*containment.TEXT_CONTAINMENT_SCHEMA, pa.field("numbers", pa.string(), nullable=False)]
)


def merge_text_features(contents: Sequence[str]) -> pa.Table:
    """One MERGE_TEXT_SCHEMA row per text."""
    numbers = pa.array([json.dumps(n) for n in containment.numbers_of(contents)], pa.string())
    return containment.text_containment(contents).append_column(MERGE_TEXT_SCHEMA.field("numbers"), numbers)


@cache
def _parser() -> str:
    return files_digest([containment.__file__, str(containment.WORDS_PATH)])


def cached_merge_features(
    ids: Sequence[str] | pa.ChunkedArray,
    contents: Sequence[str | None] | pa.ChunkedArray,
    cache_root: Path | None,
) -> pa.Table:
    """`id` and `merge_text_features` of each memory, row for row; with `cache_root`, each distinct content parsed
    once across nights (under <cache_root>/merge_texts/)."""
    store = ContentCache(cache_root / "merge_texts" / _parser()) if cache_root is not None else None
    features = computed_by_content(contents, merge_text_features, store).cast(MERGE_TEXT_SCHEMA)
    return features.add_column(0, containment.CONTAINMENT_SCHEMA.field("id"), string_array(ids))
