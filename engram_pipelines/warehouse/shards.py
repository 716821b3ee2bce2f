"""Namespace hash shards: namespaces never share a pair or a cluster, so per-namespace work splits cleanly.

A namespace's shard is crc32(name) mod the shard count: static (the same on every machine and every night), so
a namespace's work lands in the same shard each run. The hash is taken once per distinct namespace, not per row.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable


def shard_of(namespace: str, shards: int) -> int:
    return zlib.crc32(namespace.encode()) % shards


def namespaces_in_shard(namespaces: Iterable[str], shard: int, shards: int) -> list[str]:
    return sorted(ns for ns in set(namespaces) if shard_of(ns, shards) == shard)
