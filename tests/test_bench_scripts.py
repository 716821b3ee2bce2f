"""The benchmarks import what the package still provides: a renamed or moved name fails here, not on the
night someone runs a benchmark (bench/apply.py imported `intents_table` from its old module until 2026-12-03)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_a_benchmark_imports_only_names_the_package_has(script: Path) -> None:
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("engram_pipelines"):
            module = importlib.import_module(node.module)
            missing += [f"{node.module}.{a.name}" for a in node.names if not _has(module, a.name)]
    assert not missing, f"{script.name} imports names the package no longer has: {missing}"


def _has(module: object, name: str) -> bool:
    if hasattr(module, name):
        return True
    try:
        importlib.import_module(f"{module.__name__}.{name}")  # type: ignore[attr-defined]
    except ModuleNotFoundError:
        return False
    return True
