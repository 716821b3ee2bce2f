"""Where a run's steps execute: in process, in local processes, or on a Dask cluster (config `execution`).

The Dask executor is dagster-dask's, with one change: Dagster's run and plan state travel to the workers
sealed in an opaque box. dask walks every tuple among a task's arguments to find futures (2024.10 to 2026.8
were tried), and Dagster's `@record` types (a DagsterRun carries them for partitioned runs and pools) refuse
iteration, so dagster-dask 0.29's executor fails on any partitioned job. The box is pickled like any object; the workers run
dagster-dask's own `query_on_dask_worker`.
"""

from collections.abc import Sequence
from typing import Any, cast

import dagster as dg
import dask.distributed
from dagster._core.errors import raise_execution_interrupts
from dagster._core.events import DagsterEvent
from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.execution.plan.plan import ExecutionPlan
from dagster._utils import iterate_with_context
from dagster_dask.executor import DaskExecutor, get_dask_resource_requirements, query_on_dask_worker

from engram_pipelines.config.model import ExecutionConfig


class _Sealed:
    """Holds a value where dask's argument parser does not look."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _run_step_on_worker(dependencies: Any, sealed: _Sealed) -> Sequence[DagsterEvent]:
    return query_on_dask_worker(dependencies, *sealed.value)


class SealedDaskExecutor(DaskExecutor):
    def execute(self, plan_context: PlanOrchestrationContext, execution_plan: ExecutionPlan):
        if not plan_context.instance.is_persistent:
            raise dg.DagsterInvariantViolationError(
                "Dask execution needs a persistent DagsterInstance (set DAGSTER_HOME)"
            )
        if self.cluster_type == "existing":
            cluster: Any = self.cluster_configuration["address"]
        else:
            cluster = dask.distributed.LocalCluster(**self.build_dict(plan_context.job_name))
        with dask.distributed.Client(cluster) as client:
            futures: dict[str, Any] = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    # Passing the upstream futures makes Dask run a step after its inputs exist.
                    dependencies = [
                        futures[key] for step_input in step.step_inputs for key in step_input.dependency_keys
                    ]
                    futures[step.key] = client.submit(
                        _run_step_on_worker,
                        dependencies,
                        _Sealed(
                            (
                                plan_context.reconstructable_job,
                                plan_context.dagster_run,
                                plan_context.run_config,
                                [step.key],
                                plan_context.instance.get_ref(),
                                execution_plan.known_state,
                            )
                        ),
                        key=f"{plan_context.job_name}.{step.key}.{plan_context.run_id}",
                        resources=get_dask_resource_requirements(step.tags),
                    )
            finished = dask.distributed.as_completed(list(futures.values()), with_results=True)
            for _future, events in iterate_with_context(raise_execution_interrupts, finished):
                yield from events


@dg.executor(
    name="dask",
    requirements=dg.multiple_process_executor_requirements(),
    config_schema={
        "cluster": dg.Field(
            dg.Selector(
                {
                    "existing": dg.Field(
                        {"address": dg.StringSource}, description="A running scheduler's address."
                    ),
                    "local": dg.Field(
                        dg.Permissive(), is_required=False, description="LocalCluster arguments."
                    ),
                }
            )
        )
    },
)
def dask_executor(init_context: dg.InitExecutorContext) -> SealedDaskExecutor:
    cluster = cast(dict[str, Any], init_context.executor_config["cluster"])  # a Selector: exactly one key
    ((cluster_type, cluster_configuration),) = cluster.items()
    return SealedDaskExecutor(cluster_type, cluster_configuration)


def executor_for(execution: ExecutionConfig) -> dg.ExecutorDefinition:
    """The executor the configuration names; `in_process` suits small stores and tests."""
    if execution.executor == "in_process":
        return dg.in_process_executor
    if execution.executor == "multiprocess":
        return dg.multiprocess_executor.configured({"max_concurrent": execution.max_concurrent})
    if execution.dask_scheduler:
        return dask_executor.configured({"cluster": {"existing": {"address": execution.dask_scheduler}}})
    local = {"n_workers": execution.max_concurrent, "threads_per_worker": 1, "processes": True}
    return dask_executor.configured({"cluster": {"local": local}})
