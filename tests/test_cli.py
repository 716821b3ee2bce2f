"""The command line as a user drives it: import, export, list/show/approve/apply/revert, explain, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from engram_pipelines.cli import main
from engram_pipelines.store import open_store
from tests.changes_helpers import intent, propose
from tests.conftest import memory

MIXED = Path(__file__).parent / "data" / "import_mixed.jsonl"


def run(*args: str) -> tuple[int, str]:
    """Exit code and what a user reads: stdout alone under --json (a machine parses it), else both streams."""
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout if "--json" in args else result.output


def test_import_keeps_every_good_line_and_reports_every_bad_one(store_url, tmp_path):
    rejects = tmp_path / "rejects.jsonl"
    code, out = run("import", str(MIXED), "--store", store_url, "--rejects", str(rejects), "--json")
    assert code == 0
    summary = json.loads(out)
    assert (summary["lines_read"], summary["imported"], summary["rejected_lines"]) == (25, 12, 13)
    lines = [json.loads(x) for x in rejects.read_text().splitlines()]
    assert {x["line"] for x in lines} == {r["line"] for r in summary["rejects"]}
    assert all(x["field"] and x["reason"] and x["raw"] for x in lines)
    code, out = run("import", str(MIXED), "--store", store_url, "--rejects", str(rejects), "--json")
    again = json.loads(out)
    assert (again["imported"], again["already_present"]) == (0, 12)


def test_export_round_trips_through_import(store_url, tmp_path, request):
    run("import", str(MIXED), "--store", store_url, "--rejects", str(tmp_path / "r.jsonl"))
    first = tmp_path / "first.jsonl"
    assert run("export", "--store", store_url, "--out", str(first))[0] == 0
    other = f"sqlite:///{tmp_path}/copy.db"
    code, out = run("import", str(first), "--store", other, "--json")
    assert json.loads(out)["imported"] == 12 and json.loads(out)["rejected_lines"] == 0
    second = tmp_path / "second.jsonl"
    run("export", "--store", other, "--out", str(second))
    assert first.read_text() == second.read_text()


def test_export_of_a_missing_store_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "missing.db"
    out = tmp_path / "backup.jsonl"
    code, text = run("export", "--store", f"sqlite:///{missing}", "--out", str(out))
    assert code == 1 and "no SQLite store" in text and "engram-pipelines init" in text
    assert not missing.parent.exists() and not out.exists()


def test_review_cycle_from_the_command_line(store_url, tmp_path):
    with open_store(store_url, migrate=True) as store:
        store.insert_memories([memory(1, tags=["a"]), memory(2, tags=["b"])])
        from engram_pipelines.warehouse import Warehouse

        cs = propose(
            store,
            Warehouse(tmp_path / "wh"),
            [
                {**intent("m2", "supersede", klass="gated", by="m1"), "cluster_id": "c1"},
                {**intent("m1", "union_tags", klass="gated", tags=["b"]), "cluster_id": "c1"},
            ],
            klass="gated",
        )
    code, out = run("changes", "list", "--store", store_url, "--json")
    assert [r["status"] for r in json.loads(out)] == ["proposed"]
    html = tmp_path / "review.html"
    code, out = run(
        "changes", "show", cs, "--store", store_url, "--html", str(html), "--markdown", str(tmp_path / "r.md")
    )
    page = html.read_text()
    assert code == 0 and "canonical" in page and "memory number 2" in page and f"approve {cs}" in page
    code, out = run("apply", cs, "--store", store_url)
    assert code == 1 and "review-gated" in out
    assert run("approve", cs, "--store", store_url)[0] == 0
    code, out = run("apply", cs, "--store", store_url, "--json")
    assert json.loads(out)["applied"] == 2
    code, out = run("explain", "m2", "--store", store_url, "--json")
    story = json.loads(out)
    assert story["state"]["superseded_by"] == "m1" and story["changes"][0]["cluster_id"] == "c1"
    code, out = run("revert", cs, "--store", store_url, "--json")
    assert json.loads(out)["reverted"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["changes", "list", "--store", "mysql://nope"], "unknown store URL"),
        (["apply", "missing-set"], "no change set"),
        (["run", "--as-of", "yesterday"], "not a date"),
        (["run", "--as-of", "2999-01-01"], "is in the future"),
    ],
)
def test_errors_say_what_to_do(args, message, tmp_path, monkeypatch):
    monkeypatch.setenv("ENGRAM_STORE_URL", f"sqlite:///{tmp_path}/e.db")
    run("init")
    code, out = run(*args)
    assert code != 0 and message in out


def test_a_missing_migration_and_an_inverted_threshold_are_named(tmp_path, monkeypatch):
    code, out = run("changes", "list", "--store", f"sqlite:///{tmp_path}/fresh.db")
    assert code == 1 and "engram-pipelines init" in out
    monkeypatch.setenv("MEMORY_CONSOLIDATION_MERGE_THRESHOLD", "0.99")
    code, out = run("init", "--store", f"sqlite:///{tmp_path}/fresh.db")
    assert (
        code == 1 and "similarity.merge_threshold (0.99) must be below similarity.duplicate_threshold" in out
    )
