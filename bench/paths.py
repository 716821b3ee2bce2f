"""Where the benchmarks find their data: `ENGRAM_QUALITY_DATA`, else `../shared/data` beside the repository."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ENGRAM_QUALITY_DATA") or REPO.parent / "shared" / "data")
