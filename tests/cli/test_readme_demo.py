"""The README's account of the demo's first night is what a run does (the demo as of 2026-12-01)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from tests.support.paths import REPO

README = REPO / "README.md"


def figure(text: str, pattern: str) -> int:
    match = re.search(pattern, text, re.DOTALL)
    assert match, f"README lost the figure {pattern!r}"
    return int(match.group(1).replace(",", ""))


def test_the_readme_first_night_figures_are_a_runs(tmp_path: Path):
    readme = README.read_text()
    section = readme[readme.index("**What the first night does**") : readme.index("What you can do next")]
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=3_000, seed=7, as_of=dt.date(2026, 12, 1))  # `make demo`'s corpus and seed
    summary = execute_job(
        "nightly", dt.date(2026, 12, 1), store=url, warehouse=str(tmp_path / "wh"), config_path=None
    )
    assert summary["success"], summary.get("error")
    steps = summary["steps"]["change_set"]
    assert figure(section, r"the `auto` set, ([\d,]+) changes") == steps["auto_changes"]
    assert figure(section, r"the `held` set, ([\d,]+) changes") == steps["held_changes"]
    assert figure(section, r"the `gated` set, ([\d,]+) changes") == steps["gated_changes"]
    assert figure(section, r"(\d+)\s+contradicting pairs") == summary["steps"]["contradictions"]["row_count"]
    assert figure(section, r"([\d,]+) promotions") == summary["steps"]["promotions"]["transitions"]
    quoted = re.search(r'"(night would hide\s.*?: held for review)"', section, re.DOTALL)
    assert quoted and " ".join(quoted.group(1).split()) in {h["message"] for h in steps["held_for_review"]}
