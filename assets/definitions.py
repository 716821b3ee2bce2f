"""The code location: `dagster dev -w workspace.yaml` and `engram-pipelines run` load `defs` from here."""

from __future__ import annotations

import dagster as dg

from assets import changes, contradictions, history, ingest, knowledge, lifecycle, reports, similarity
from assets.executors import executor_for
from assets.jobs import backfill_job, consolidate_job, nightly_job, preview_job, schedules
from assets.partitions import daily_from, first_as_of_day, with_partitions
from assets.resources import EngramConfigResource, StoreResource, WarehouseResource
from engram_pipelines.config import ANALYSES, Config, load_config, store_url, warehouse_path
from engram_pipelines.switches import describe


def build_definitions(
    store: str | None = None, warehouse: str | None = None, config_path: str | None = None
) -> dg.Definitions:
    config = load_config(config_path)
    modules = [ingest, lifecycle, similarity, contradictions, knowledge, changes, reports, history]
    partitions_def = daily_from(first_as_of_day(config, store_url(store)))
    return dg.Definitions(
        assets=_with_switches(
            with_partitions(
                [
                    *dg.load_assets_from_modules(modules),
                    *similarity.sharded_assets(config.execution.shard_count),
                ],
                partitions_def,
            ),
            config,
        ),
        asset_checks=[*dg.load_asset_checks_from_modules(modules), *changes.asset_checks(partitions_def)],
        jobs=[nightly_job, consolidate_job, preview_job, backfill_job],
        executor=executor_for(config.execution),
        schedules=schedules(config),
        resources={
            "store": StoreResource(url=store_url(store)),
            "warehouse": WarehouseResource(path=str(warehouse_path(warehouse))),
            "engram_config": EngramConfigResource(config_path=config_path or ""),
        },
    )


def _with_switches(assets: list[dg.AssetsDefinition], config: Config) -> list[dg.AssetsDefinition]:
    """Each analysis asset's metadata says its switch (config `analyses`), as the UI shows it."""

    def annotate(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        if name not in ANALYSES:
            return spec
        return spec.replace_attributes(metadata={**spec.metadata, "switch": describe(config, name)})

    return [a.map_asset_specs(annotate) for a in assets]


def job_for(job: str, store: str | None, warehouse: str | None, config_path: str | None) -> dg.JobDefinition:
    """Rebuilds a job in a step's process (multiprocess and Dask runs reconstruct it by this name)."""
    return build_definitions(store, warehouse, config_path).resolve_job_def(job)


defs = build_definitions()
