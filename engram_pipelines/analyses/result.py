"""What every analysis returns: one shape for the assets, the backfill and the tests to read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass(kw_only=True)
class AnalysisResult:
    """`table`: the analysis's own table (the warehouse table of its name, core/registry.py); `intents`: what it
    proposes (INTENT_SCHEMA, the change set's input); `figures`: counts for the run's metadata."""

    table: pa.Table
    intents: pa.Table
    figures: dict[str, Any] = field(default_factory=dict)
