"""Review in the orchestrator: the nightly's change set links a review page and says how to decide; the `review`
job (launched from the launchpad with run config) approves and applies, or reverts, a set."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.definitions import build_definitions
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from tests.support.memories import AS_OF


def _decide(store_url: str, warehouse: str, change_set_id: str, action: str) -> dg.ExecuteInProcessResult:
    job = build_definitions(store=store_url, warehouse=warehouse).resolve_job_def("review")
    config = {"change_set_id": change_set_id, "action": action, "actor": "alice"}
    return job.execute_in_process(
        run_config={"ops": {"review_change_set": {"config": config}}}, instance=dg.DagsterInstance.ephemeral()
    )


@pytest.mark.slow
def test_a_set_is_read_then_approved_and_applied_from_the_orchestrator_and_reverted(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=600, seed=3, as_of=AS_OF)
    warehouse = str(tmp_path / "wh")
    night = execute_job("nightly", AS_OF, store=url, warehouse=warehouse, config_path=None)
    gated = night["steps"]["change_set"]["gated_change_set"]

    with open_store(url) as store:
        materialised = store.get_change_set(gated)
    assert materialised is not None and materialised.status == "proposed" and materialised.total > 0
    page = Path(warehouse) / "reports" / f"as_of={AS_OF.isoformat()}" / f"review-{gated}.html"
    assert page.exists() and gated in page.read_text()

    decided = _decide(url, warehouse, gated, "approve_and_apply")
    assert decided.success
    outcome = decided.output_for_node("review_change_set")
    assert outcome["status"] == "applied" and outcome["apply"]["accounted"]
    with open_store(url) as store:
        record = store.get_change_set(gated)
        assert (record.status, record.approved_by) == ("applied", "alice")
        assert {a["actor"] for a in store.audit_rows(change_set_id=gated)} == {"alice"}

    reverted = _decide(url, warehouse, gated, "revert")
    assert reverted.success and reverted.output_for_node("review_change_set")["status"] == "reverted"


def test_a_decision_on_an_unknown_set_fails_the_run_naming_it(tmp_path: Path):
    url = f"sqlite:///{tmp_path}/engram.db"
    with open_store(url, migrate=True):
        pass
    with pytest.raises(Exception, match="no change set 'nope'"):
        _decide(url, str(tmp_path / "wh"), "nope", "approve_and_apply")
