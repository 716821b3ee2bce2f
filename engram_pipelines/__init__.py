"""engram-pipelines: reviewed, reversible batch maintenance of AI-agent memory stores.

The Python API is `engram_pipelines.api`; its names (`__all__`, listed here once) are importable from here too:
`from engram_pipelines import open_store, run_night, approve, apply, revert, pin, promote`.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

# NumPy marks every large array for transparent huge pages (MADV_HUGEPAGE). Where the kernel's THP defrag setting
# is `madvise` (its default) and memory is fragmented, touching such an array first stalls in synchronous
# compaction (numpy/numpy#31590): filling a fresh 1M x 384 float array took 1.8-4.3 s here with the mark and
# 1.35-1.45 s without. Read by NumPy when it is first imported; an explicit setting is kept.
os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")

__all__ = [
    "ApplyResult",
    "ChangeSetRecord",
    "OperatorError",
    "OperatorResult",
    "RestoreError",
    "RevertResult",
    "Store",
    "apply",
    "approve",
    "change_sets",
    "explain",
    "open_store",
    "pin",
    "promote",
    "restore",
    "revert",
    "revert_night",
    "run_night",
    "unpin",
]


def __getattr__(name: str) -> Any:
    """The API's names, loaded on first use: `import engram_pipelines.config.model` (every submodule import runs this
    file) stays light. Only those names: `from engram_pipelines import jsontext` asks here too, before it
    imports the submodule."""
    if name in __all__:
        return getattr(importlib.import_module("engram_pipelines.api"), name)
    raise AttributeError(f"module 'engram_pipelines' has no attribute {name!r}")
