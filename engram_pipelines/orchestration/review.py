"""Review in the orchestrator: approve, apply or revert a change set from the Dagster UI.

The `review` job has one op configured in the launchpad (`ops: review_change_set: config: {change_set_id,
action, actor}`); it does what `engram-pipelines approve` / `apply` / `revert` do, through the same functions,
with the run's log showing the apply's progress and its outcome in the op's metadata. The change set's
materialisation links the review page to read first.
"""

from typing import Literal

import dagster as dg
from pydantic import Field

from engram_pipelines.changes.apply import apply_change_set
from engram_pipelines.changes.revert import approve_change_set, revert_change_set
from engram_pipelines.core.progress import LogProgress
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource

Action = Literal["approve_and_apply", "approve", "apply", "revert"]


class ReviewDecision(dg.Config):
    change_set_id: str = Field(description="The set to act on, e.g. 2026-11-29-nightly-gated-d43d3af0e7.")
    action: Action = Field(
        default="approve_and_apply",
        description="approve_and_apply (the usual decision), approve, apply (an approved set), or revert.",
    )
    actor: str = Field(description="Who decides: written to the change set and to every audit row.")


@dg.op(
    description=(
        "Approve, apply or revert one change set (the review decision, as `engram-pipelines approve` / `apply` / "
        "`revert` take it): CAS-guarded and audited; applying again resumes from the ledger."
    ),
)
def review_change_set(
    context: dg.OpExecutionContext,
    config: ReviewDecision,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dict:
    wh_root = warehouse.get().root
    outcome: dict = {"change_set_id": config.change_set_id, "action": config.action, "actor": config.actor}
    with store.open() as live:
        if config.action == "revert":
            outcome["revert"] = revert_change_set(live, config.change_set_id, actor=config.actor).as_dict()
        if config.action in ("approve", "approve_and_apply"):
            approve_change_set(live, config.change_set_id, actor=config.actor, warehouse_root=wh_root)
            outcome["approved"] = True
        if config.action in ("apply", "approve_and_apply"):
            result = apply_change_set(
                live,
                config.change_set_id,
                actor=config.actor,
                batch_size=engram_config.for_run(warehouse.get()).apply.batch_size,
                progress=LogProgress(context.log),
                warehouse_root=wh_root,
            )
            outcome["apply"] = result.as_dict()
        record = live.get_change_set(config.change_set_id)
        outcome["status"] = record.status if record else "unknown"
    context.log.info(f"{config.action} {config.change_set_id} by {config.actor}: {outcome}")
    context.add_output_metadata({"status": outcome["status"], "outcome": dg.MetadataValue.json(outcome)})
    return outcome


@dg.job(
    name="review",
    description=(
        "A person's decision on a change set, from the launchpad: config `ops: review_change_set: config: "
        "{change_set_id: ..., action: approve_and_apply | approve | apply | revert, actor: ...}`. Read the "
        "review page linked from the `change_set` materialisation first."
    ),
)
def review_job() -> None:
    review_change_set()
