"""The `engram-pipelines` command line.

Every command takes `--store URL` (else ENGRAM_STORE_URL, else sqlite:///data/engram.db), most take
`--warehouse PATH` and `--config FILE`, and those whose output a machine reads take `--json`.
"""

from engram_pipelines.cli import adapters, data, operator, review, runs  # noqa: F401  (each registers its commands)
from engram_pipelines.cli.common import main

__all__ = ["main"]
