"""engram-pipelines: reviewed, reversible batch maintenance of AI-agent memory stores.

The Python API is `engram_pipelines.api`; its names (`__all__`, listed here once) are importable from here too:
`from engram_pipelines import open_store, run_night, approve, apply, revert, pin, promote`.
"""

from __future__ import annotations

import importlib
from typing import Any

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
