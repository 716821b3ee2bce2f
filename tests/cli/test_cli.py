"""The command line as a user drives it: import, export, list/show/approve/apply/revert, explain, errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.core import records
from engram_pipelines.store import open_store
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.changes import intent, propose
from tests.support.cli import run
from tests.support.memories import AS_OF, T0, memory
from tests.support.paths import DATA

MIXED = DATA / "import_mixed.jsonl"


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


def _lifecycle_store(store_url: str, tmp_path: Path) -> None:
    """An agent's import plus rows the pipeline archived, purge-queued, marked stale, scored, superseded."""
    run("import", str(MIXED), "--store", store_url, "--rejects", str(tmp_path / "r.jsonl"))
    with open_store(store_url) as store:
        store.insert_memories([memory(i) for i in range(1, 9)])
        moved = {"from": "active"}
        cs = propose(
            store,
            Warehouse(tmp_path / "wh"),
            [
                intent("m1", "move_zone", **moved, to="archived"),
                intent("m2", "move_zone", **moved, to="purge_queue"),
                intent("m3", "mark_stale", score=0.125),
                intent("m4", "set_score", score=0.73),
                intent("m5", "supersede", by="m6"),
                intent("m7", "mark_stale", score=0.05),
                intent("m7", "move_zone", **moved, to="archived"),
                intent("m7", "supersede", by="m6"),
            ],
        )
        assert apply_change_set(store, cs).applied == 6
        store.insert_memories(
            [
                memory(9, embedded_content_sha="0123456789abcdef"),  # the hash the vector was made from
                memory(10, embedding=None, embedding_model="test-384"),  # a model named without a vector
                memory(11, pinned=True, zone_since=T0, score=0.9),
            ]
        )


def test_export_round_trips_through_import(store_url, other_store_url, tmp_path):
    _lifecycle_store(store_url, tmp_path)
    first = tmp_path / "first.jsonl"
    assert run("export", "--store", store_url, "--out", str(first))[0] == 0
    code, out = run("import", str(first), "--store", other_store_url, "--json")
    assert code == 0 and json.loads(out)["imported"] == 23 and json.loads(out)["rejected_lines"] == 0

    with open_store(store_url) as before_store, open_store(other_store_url) as after_store:
        ids = [row[0] for row in before_store.query("SELECT id FROM memories")]
        before, after = before_store.read_memories(ids), after_store.read_memories(ids)
        namespaces = sorted({row["namespace"] for row in before.values()})
        recalled = [(before_store.recall(ns), after_store.recall(ns)) for ns in namespaces]
    assert len(after) == len(before) == 23
    assert {row["zone"] for row in before.values()} == {"active", "archived", "purge_queue"}
    assert sum(row["superseded_by"] is not None for row in before.values()) == 2
    assert sum(row["stale"] for row in before.values()) == 2
    for memory_id, row in before.items():
        copy = after[memory_id]
        for column in records.MEMORY_COLUMNS:
            if column != "version":
                assert copy[column] == row[column], (memory_id, column)
        assert (copy["embedding"] is None) == (row["embedding"] is None), memory_id
        if row["embedding"] is not None:
            np.testing.assert_array_equal(copy["embedding"], row["embedding"])
        # The CAS counter is the store's own: the copy's history starts anew (see exporting._EXPORTED).
        assert copy["version"] == 1
    assert before["m1"]["version"] == 2
    assert all(original == copy for original, copy in recalled)  # agents see the same rows, no more

    second = tmp_path / "second.jsonl"
    assert run("export", "--store", other_store_url, "--out", str(second))[0] == 0
    assert first.read_bytes() == second.read_bytes()


def test_a_tampered_backup_imports_its_good_lines_and_rejects_the_bad_ones(tmp_path):
    url = f"sqlite:///{tmp_path}/source.db"
    _lifecycle_store(url, tmp_path)
    backup = tmp_path / "backup.jsonl"
    run("export", "--store", url, "--out", str(backup))
    lines = [json.loads(line) for line in backup.read_text().splitlines()]
    lines[0]["zone"], lines[2]["score"], lines[3]["zone_since"] = "deleted", 7, "yesterday"
    backup.write_text("".join(json.dumps(line) + "\n" for line in lines))

    rejects = tmp_path / "rejects.jsonl"
    code, out = run(
        "import", str(backup), "--store", f"sqlite:///{tmp_path}/copy.db", "--rejects", str(rejects), "--json"
    )

    summary = json.loads(out)
    assert (code, summary["imported"], summary["rejected_lines"]) == (0, 20, 3)
    written = [(r["line"], r["field"]) for r in map(json.loads, rejects.read_text().splitlines())]
    assert written == [(1, "zone"), (3, "score"), (4, "zone_since")]


def test_export_of_a_missing_store_creates_nothing(tmp_path):
    missing = tmp_path / "nowhere" / "missing.db"
    out = tmp_path / "backup.jsonl"
    code, text = run("export", "--store", f"sqlite:///{missing}", "--out", str(out))
    assert code == 1 and "no SQLite store" in text and "engram-pipelines init" in text
    assert not missing.parent.exists() and not out.exists()


def test_review_cycle_from_the_command_line(store_url, tmp_path):
    with open_store(store_url, migrate=True) as store:
        store.insert_memories([memory(1, tags=["a"]), memory(2, tags=["b"])])
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
    assert page.count("written 2026-") >= 2  # each side of the merge with its date
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
    code, out = run("explain", "never-was", "--store", store_url)
    assert code == 1 and "no memory never-was" in out and "restore" not in out


def test_a_copied_store_and_warehouse_read_their_own_change_sets(tmp_path, monkeypatch):
    """The registered path is where the set was written: a copy read the original's files (and failed when
    they were gone or altered). With --warehouse, the copy's own file is read."""
    import shutil

    original = tmp_path / "original"
    with open_store(f"sqlite:///{original}/engram.db", migrate=True) as store:
        store.insert_memories([memory(1), memory(2)])
        cs = propose(
            store,
            Warehouse(original / "wh"),
            [intent("m2", "supersede", klass="gated", by="m1")],
            klass="gated",
        )
    copy = tmp_path / "copy"
    shutil.copytree(original, copy)
    (original / "wh" / "change_sets" / f"{cs}.parquet").write_bytes(b"damaged")  # the original's file
    monkeypatch.chdir(tmp_path)  # another folder than either
    url, wh = f"sqlite:///{copy}/engram.db", str(copy / "wh")
    assert run("changes", "show", cs, "--store", url, "--warehouse", wh)[0] == 0
    assert run("approve", cs, "--store", url, "--warehouse", wh)[0] == 0
    code, out = run("apply", cs, "--store", url, "--warehouse", wh, "--json")
    assert code == 0 and json.loads(out)["applied"] == 1
    code, out = run("explain", "m2", "--store", url, "--warehouse", wh, "--json")
    assert [c["change_set_id"] for c in json.loads(out)["changes"]] == [cs]
    code, out = run(
        "approve", cs, "--store", f"sqlite:///{original}/engram.db", "--warehouse", str(original / "wh")
    )
    assert code != 0 and "cannot be read" in out  # the original's own file is the damaged one


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


def test_preview_shows_what_tonight_would_do_and_writes_nothing(tmp_path):
    from engram_pipelines.demo.loader import load_demo
    from tests.support.memories import AS_OF

    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=600, seed=3, as_of=AS_OF)
        before = store.query("SELECT id, version, zone FROM memories ORDER BY id")
    warehouse = tmp_path / "wh"
    code, out = run(
        "preview", "--as-of", AS_OF.isoformat(), "--store", url, "--warehouse", str(warehouse), "--json"
    )
    assert code == 0
    preview = json.loads(out)
    assert preview["as_of"] == AS_OF.isoformat()
    assert {"decay_scores", "retention", "consolidation"} <= set(preview["by_analysis"])
    assert preview["by_analysis"]["consolidation"].get("auto", 0) == 0  # merges wait for review
    assert all(
        row["changes"] > 0 and row["review_class"] in ("auto", "gated", "held") for row in preview["rows"]
    )
    # The demo's first night would archive most of each namespace: the preview says the guard holds it.
    assert preview["by_analysis"]["retention"].get("held", 0) > 0
    assert preview["held"] and all("held for review" in h["message"] for h in preview["held"])
    with open_store(url) as store:
        assert store.query("SELECT id, version, zone FROM memories ORDER BY id") == before
        assert store.list_change_sets() == []
    assert not warehouse.exists()  # the run's own warehouse is left alone: the preview used a scratch one
    code, out = run("preview", "--as-of", AS_OF.isoformat(), "--store", url, "--warehouse", str(warehouse))
    assert code == 0 and "would propose" in out and "retention" in out


def test_the_review_flow_after_a_nightly(tmp_path):
    """consolidate after a nightly names what waits, proposes no auto set of its own and leaves the nightly's
    tables for the day as they were; `changes list` shows what waits first; each run keeps its report."""
    from engram_pipelines.demo.loader import load_demo
    from tests.support.memories import AS_OF

    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=600, seed=3, as_of=AS_OF)
    wh = tmp_path / "wh"
    day = AS_OF.isoformat()
    code, out = run("run", "--as-of", day, "--store", url, "--warehouse", str(wh), "--json")
    nightly = json.loads(out)
    assert code == 0 and nightly["steps"]["change_set"]["gated_changes"] > 0
    retention = Warehouse(wh).table_path("retention", AS_OF)
    written = retention.read_bytes()
    code, out = run("consolidate", "--as-of", day, "--store", url, "--warehouse", str(wh), "--json")
    consolidate = json.loads(out)
    assert code == 0
    assert consolidate["steps"]["change_set"]["auto_changes"] == 0  # the nightly applies the auto class
    waiting = {w["change_set_id"] for w in consolidate["waiting_for_review"]}
    assert nightly["steps"]["change_set"]["gated_change_set"] in waiting
    assert retention.read_bytes() == written  # its own tables live under jobs/consolidate/
    assert Warehouse(wh).for_job("consolidate").table_path("retention", AS_OF).exists()
    assert Path(consolidate["review_report"]).name.startswith("review-")
    code, out = run("changes", "list", "--store", url, "--json")
    listed = json.loads(out)
    first = [r for r in listed[: len(waiting)]]
    assert all(r["status"] == "proposed" and r["review_class"] in ("gated", "held") for r in first)
    assert all(r["total"] > 0 for r in listed)  # empty sets only with --all
    code, out = run("changes", "list", "--all", "--store", url, "--json")
    assert any(r["total"] == 0 for r in json.loads(out))
    code, out = run("run", "--as-of", day, "--store", url, "--warehouse", str(wh), "--json")
    again = json.loads(out)
    assert again["report_path"] != nightly["report_path"]
    assert Path(nightly["report_path"]).exists() and Path(again["report_path"]).exists()


def test_import_never_deletes_the_input_and_fails_when_every_line_is_bad(store_url, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"bad": 1}\n{"also": "bad"}\n')
    original = bad.read_bytes()
    code, out = run("import", str(bad), "--rejects", str(bad), "--store", store_url)
    assert code != 0 and "is the input file" in out and bad.read_bytes() == original
    code, out = run("import", str(bad), "--store", store_url, "--json")
    assert code == 1 and json.loads(out)["rejected_lines"] == 2  # nothing imported: not a success
    assert (tmp_path / "bad.rejects.jsonl").exists() and bad.read_bytes() == original


def test_init_then_run_on_an_empty_store(tmp_path):
    url = f"sqlite:///{tmp_path}/engram.db"
    assert run("init", "--store", url)[0] == 0
    code, out = run("run", "--store", url, "--warehouse", str(tmp_path / "wh"), "--json")
    assert code == 0 and json.loads(out)["success"]


@pytest.mark.parametrize(
    ("text", "env", "named"),
    [
        ("apply:\n  batch_size: 0\n", {}, "apply.batch_size"),
        ("apply:\n  batch_size: -1\n", {}, "apply.batch_size"),
        ("snapshot:\n  embedding_dim: 0\n", {}, "snapshot.embedding_dim"),
        ("snapshot:\n  max_invalid_fraction: 5\n", {}, "snapshot.max_invalid_fraction"),
        ("", {"MEMORY_CONTRADICTION_POLICY": "bogus"}, "contradiction.policy"),
        ("apply: [\n", {}, "is not valid YAML at line 2"),
    ],
)
def test_bad_settings_are_refused_at_start_in_one_line(tmp_path, monkeypatch, text, env, named):
    config = tmp_path / "engram.yaml"
    config.write_text(text)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    url = f"sqlite:///{tmp_path}/engram.db"
    open_store(url, migrate=True).close()
    code, out = run("run", "--config", str(config), "--store", url, "--warehouse", str(tmp_path / "wh"))
    assert code != 0 and named in out and "Traceback" not in out
    code, out = run("run", "--config", str(config), "--store", url, "--json")
    assert code != 0 and named in json.loads(out)["error"]  # under --json the error is JSON too


def test_a_second_run_on_a_busy_warehouse_stops_at_once_naming_the_first(tmp_path):
    """Two runs started together wrote the same partitions and both failed."""
    from engram_pipelines.warehouse.tables import run_lock
    from tests.support.memories import AS_OF

    url = f"sqlite:///{tmp_path}/engram.db"
    run("init", "--store", url)
    warehouse = tmp_path / "wh"
    with run_lock(warehouse, "nightly", AS_OF):
        code, out = run("run", "--as-of", AS_OF.isoformat(), "--store", url, "--warehouse", str(warehouse))
    assert code != 0 and f"nightly for {AS_OF}" in out and "is using the warehouse" in out
    code, out = run("run", "--store", url, "--warehouse", str(warehouse), "--json")
    assert code == 0 and json.loads(out)["success"]  # released: the next run proceeds


def test_the_review_page_shows_a_contradiction_supersede_beside_the_merges_with_dates(store_url, tmp_path):
    with open_store(store_url, migrate=True) as store:
        store.insert_memories([memory(1), memory(2)])
        cs = propose(
            store,
            Warehouse(tmp_path / "wh"),
            [intent("m1", "supersede", klass="gated", source="contradictions", by="m2")],
            klass="gated",
        )
    html = tmp_path / "review.html"
    assert run("changes", "show", cs, "--store", store_url, "--html", str(html))[0] == 0
    page = html.read_text()
    section = page[page.index("<h2>Contradictions (1)</h2>") :]
    assert "supersede:" in section and "memory number 1" in section and "memory number 2" in section
    assert section.count("written 2026-") == 2


def test_a_mem0_export_imports_from_the_command_line(store_url, tmp_path):
    export = tmp_path / "mem0.jsonl"
    export.write_text(
        json.dumps(
            {"memory": "My name is liguoyu", "user_id": "liguoyu", "created_at": "2026-03-01T10:00:00Z"}
        )
        + "\n"
        + json.dumps(
            {"memory": "My name is liguosong", "user_id": "liguoyu", "created_at": "2026-03-02T10:00:00Z"}
        )
        + "\n"
    )
    code, out = run("import", str(export), "--format", "mem0", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["imported"] == 2
    with open_store(store_url) as store:
        assert len(store.recall("user:liguoyu")) == 2


def test_mem0_memories_go_back_to_mem0_s_shape_without_what_the_night_hid(store_url, tmp_path):
    export = tmp_path / "mem0.jsonl"
    lines = [
        {
            "id": "a",
            "memory": "My name is liguoyu",
            "user_id": "liguoyu",
            "hash": "h1",
            "metadata": {"source": "chat"},
            "created_at": "2026-03-01T10:00:00Z",
        },
        {
            "id": "b",
            "memory": "My name is liguoyu",
            "user_id": "liguoyu",
            "created_at": "2026-03-01T11:00:00Z",
            "superseded_by": "a",
        },
    ]
    export.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, out = run("import", str(export), "--format", "mem0", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["imported"] == 2
    back = tmp_path / "back.jsonl"
    code, _ = run("export", "--format", "mem0", "--out", str(back), "--store", store_url)
    items = [json.loads(line) for line in back.read_text().splitlines()]
    assert code == 0 and [i["id"] for i in items] == ["a"]  # b is superseded: mem0 would show it again
    assert items[0] | {"hash": "-", "updated_at": "-"} == {
        "id": "a",
        "memory": "My name is liguoyu",
        "hash": "-",
        "metadata": {"source": "chat"},
        "created_at": "2026-03-01T10:00:00.000000Z",
        "updated_at": "-",
        "user_id": "liguoyu",
    }


def test_demo_text_loads_the_texts_without_vectors_and_the_night_embeds_them(tmp_path):
    url = f"sqlite:///{tmp_path}/engram.db"
    args = ["demo", "--size", "1000", "--as-of", AS_OF.isoformat(), "--text", "--store", url]
    code, out = run(*args, "--warehouse", str(tmp_path / "wh"), "--json")
    assert code == 0, out
    summary = json.loads(out)
    with open_store(url) as store:
        stored = store.query("SELECT count(*) FROM memories WHERE embedding IS NOT NULL")[0][0]
        total = store.count("memories")
    assert stored == 0 and total >= 1000
    embedded = summary["steps"]["embeddings"]["embedded"]
    assert 0.9 * total <= embedded <= total  # every text but those the corpus marks as never embedded
