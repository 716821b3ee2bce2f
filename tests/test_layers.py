"""The layers, checked on the source: the library (every module but the Dagster layer and the two entry points)
imports neither Dagster nor the Dagster layer, at the top of a module or inside a function. Arrows point one
way: orchestration -> library, cli/api -> both."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "engram_pipelines"
# The Dagster layer, and the entry points that may start a job.
ABOVE_THE_LIBRARY = ("orchestration/", "cli.py", "api.py")
FORBIDDEN = ("dagster", "dagster_dask", "dagster_webserver", "engram_pipelines.orchestration")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def test_the_library_imports_no_dagster_and_not_the_dagster_layer():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(ABOVE_THE_LIBRARY):
            continue
        bad = {m for m in _imports(path) if any(m == f or m.startswith(f + ".") for f in FORBIDDEN)}
        if bad:
            offenders[relative] = sorted(bad)
    assert not offenders, f"library modules importing the Dagster layer: {offenders}"


def test_the_check_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "def f():\n    import dagster as dg\n    from engram_pipelines.orchestration import runner\n"
    )
    assert _imports(module) == {"dagster", "engram_pipelines.orchestration"}
