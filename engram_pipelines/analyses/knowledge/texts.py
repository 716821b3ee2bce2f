"""What the semantic step reads of a memory's text, parsed once per distinct content.

Whether a text carries knowledge (`chitchat.carries_knowledge`) and what a repetition must share
(`containment.same_fact_features`) depend on nothing but the text and the parser: with a cache root (the
warehouse) they are kept across nights by content hash, so a quiet night parses only new or edited texts (at
100k memories the two parsers took 2.2 s of a quiet night's 3.7 s semantic step). The cache is keyed by the
parsers' own source files and word lists: a changed parser never answers from an older one's results.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.knowledge import chitchat
from engram_pipelines.analyses.merges import containment
from engram_pipelines.core.digests import files_digest
from engram_pipelines.warehouse.content_cache import ContentCache, computed_by_content

TEXT_SCHEMA = pa.schema([pa.field("knowledge", pa.bool_(), nullable=False), *containment.SAME_FACT_SCHEMA])


def text_facts(contents: Sequence[str]) -> pa.Table:
    """One TEXT_SCHEMA row per text."""
    knowledge = pa.array([chitchat.carries_knowledge(c) for c in contents], pa.bool_())
    return pa.Table.from_arrays(
        [knowledge, *containment.same_fact_features(contents).columns], schema=TEXT_SCHEMA
    )


@cache
def _parsers() -> str:
    return files_digest([chitchat.__file__, containment.__file__, str(containment.WORDS_PATH)])


def cached_text_facts(contents: Sequence[str | None] | pa.ChunkedArray, cache_root: Path | None) -> pa.Table:
    """`text_facts` of `contents`, row for row; with `cache_root`, each distinct content parsed once across
    nights (under <cache_root>/semantic_texts/)."""
    store = ContentCache(cache_root / "semantic_texts" / _parsers()) if cache_root is not None else None
    return computed_by_content(contents, text_facts, store).cast(TEXT_SCHEMA)
