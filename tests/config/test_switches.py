"""Analysis switches: an analysis off or behind review, globally or per namespace."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest

from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.changes.registry import load_change_set
from engram_pipelines.config.model import ConfigError, load_config
from engram_pipelines.config.switches import applied_tonight, switched_intents
from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from tests.support.memories import AS_OF

SWITCHES = """
analyses:
  semantic: {enabled: false}
  retention: {review_class: gated}
namespaces:
  "user:*":
    analyses:
      semantic: {enabled: true}
      retention: {review_class: auto}
"""


def config_file(tmp_path: Path, text: str = SWITCHES) -> str:
    path = tmp_path / "engram.yaml"
    path.write_text(text)
    return str(path)


def intents(source: str, namespaces: list[str], klass: str = "auto") -> pa.Table:
    return pa.Table.from_pylist(
        [
            {
                "namespace": ns,
                "target_kind": "memory",
                "target_id": f"{ns}-1",
                "op": "move_zone",
                "params": "{}",
                "reason": "r",
                "evidence": "{}",
                "source": source,
                "review_class": klass,
                "cluster_id": None,
            }
            for ns in namespaces
        ],
        schema=INTENT_SCHEMA,
    )


def test_switches_per_analysis_and_namespace(tmp_path: Path):
    config = load_config(config_file(tmp_path))
    names = ["agent:coder", "user:alice"]
    semantic = switched_intents(config, "semantic", intents("semantic", names))
    assert semantic["namespace"].to_pylist() == ["user:alice"]  # off globally, on for user:*
    retention = switched_intents(config, "retention", intents("retention", names))
    assert dict(
        zip(retention["namespace"].to_pylist(), retention["review_class"].to_pylist(), strict=True)
    ) == {
        "agent:coder": "gated",
        "user:alice": "auto",
    }
    moves = pa.table({"id": ["a", "b"], "namespace": names})
    assert applied_tonight(config, "retention", moves)["id"].to_pylist() == ["b"]
    untouched = switched_intents(config, "temporal", intents("temporal", names, "auto"))
    assert untouched.equals(intents("temporal", names, "auto"))


def test_an_unknown_analysis_or_class_is_refused_naming_it(tmp_path: Path):
    with pytest.raises(ConfigError, match="unknown analysis retension"):
        load_config(config_file(tmp_path, "analyses:\n  retension: {enabled: false}\n"))
    with pytest.raises(ConfigError, match="analyses.retention.review_class"):
        load_config(config_file(tmp_path, "analyses:\n  retention: {review_class: later}\n"))


def test_a_nightly_with_semantic_off_and_retention_behind_review(store_url: str, tmp_path: Path):
    with open_store(store_url, migrate=True) as store:
        load_demo(store, size=1_000, seed=5, as_of=AS_OF)
    path = config_file(
        tmp_path, "analyses:\n  semantic: {enabled: false}\n  retention: {review_class: gated}\n"
    )
    result = execute_job("nightly", AS_OF, store=store_url, warehouse=str(tmp_path / "wh"), config_path=path)
    assert result["success"], result.get("error")
    steps = result["steps"]["change_set"]
    with open_store(store_url) as store:
        sets = {k: load_change_set(store, steps[f"{k}_change_set"])[1] for k in ("auto", "gated", "held")}
        assert (
            store.query("SELECT count(*) FROM memories WHERE id LIKE ?", ["sem-%"])[0][0] == 0
        )  # no node made
    sources = {k: {json.loads(i)[0]["source"] for i in t["intents"].to_pylist()} for k, t in sets.items()}
    assert "semantic" not in sources["auto"] | sources["gated"] | sources["held"]
    assert "retention" in sources["gated"] and "retention" not in sources["auto"] | sources["held"]
    from engram_pipelines.orchestration.definitions import build_definitions

    defs = build_definitions(store=store_url, warehouse=str(tmp_path / "wh"), config_path=path)
    graph = defs.resolve_asset_graph()
    assert graph.get(dg.AssetKey("semantic")).metadata["switch"] == "disabled, its own review classes"
    assert graph.get(dg.AssetKey("retention")).metadata["switch"] == "enabled, review class gated"
