"""Digests of texts: the keys of everything computed once per distinct content."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def content_sha(content: str) -> str:
    return hashlib.sha256(content.encode()).hexdigest()[:16]


def content_sha_sql(text: str) -> str:
    """`content_sha` of the SQL expression `text`, computed by DuckDB (its sha256 hashes the UTF-8 bytes)."""
    return f"left(sha256({text}), 16)"


def files_digest(paths: Iterable[str]) -> str:
    """One digest of files' bytes: a cache of what code computes is keyed by that code's source, so a change
    to the parser can never be answered from an older parser's cache."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            digest.update(handle.read())
    return digest.hexdigest()[:16]
