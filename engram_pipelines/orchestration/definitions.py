"""The definitions factory: every asset, check, job, schedule and resource of engram-pipelines in one call.

A team adds them to its own Dagster deployment (`engram_definitions`, re-exported by the package); this
repository's code location (`assets/definitions.py`) and `engram-pipelines run` build theirs with it too.
Store URL and warehouse may be `dg.EnvVar`s: the resources read them when a run starts, and the launchpad
shows them as resource config."""

from __future__ import annotations

import re
from typing import Any, cast

import dagster as dg

from engram_pipelines.config.model import ANALYSES, Config, load_config, store_url, warehouse_path
from engram_pipelines.config.switches import describe
from engram_pipelines.orchestration import (
    changes,
    contradictions,
    history,
    ingest,
    knowledge,
    lifecycle,
    reports,
    similarity,
)
from engram_pipelines.orchestration.executors import executor_for
from engram_pipelines.orchestration.jobs import (
    backfill_job,
    consolidate_job,
    nightly_job,
    preview_job,
    schedules,
)
from engram_pipelines.orchestration.partitions import daily_from, first_as_of_day, with_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource
from engram_pipelines.orchestration.review import review_job

Setting = str | dg.EnvVar | None


def build_definitions(
    store: Setting = None, warehouse: Setting = None, config_path: str | None = None
) -> dg.Definitions:
    """Definitions over the store at `store` (default: ENGRAM_STORE_URL, else the embedded SQLite store) and the
    warehouse at `warehouse` (default: ENGRAM_WAREHOUSE, else data/warehouse), with the configuration file at
    `config_path`. The configuration shapes the graph (partitions start, shards, executor, schedules), so it is
    read here, once."""
    config = load_config(config_path)
    modules = [ingest, lifecycle, similarity, contradictions, knowledge, changes, reports, history]
    # `partitions.start: auto` asks the store for its earliest memory: an EnvVar is read now for that.
    partitions_def = daily_from(first_as_of_day(config, store_url(_value(store))))
    return dg.Definitions(
        assets=_with_switches(
            with_partitions(
                [
                    # The modules define @asset functions only (no source assets or specs).
                    *cast(list[dg.AssetsDefinition], dg.load_assets_from_modules(modules)),
                    *similarity.sharded_assets(config.execution.shard_count),
                ],
                partitions_def,
            ),
            config,
        ),
        asset_checks=[*dg.load_asset_checks_from_modules(modules), *changes.asset_checks(partitions_def)],
        jobs=[nightly_job, consolidate_job, preview_job, backfill_job, review_job],
        executor=executor_for(config.execution),
        schedules=schedules(config),
        resources={
            "store": StoreResource(url=store if isinstance(store, dg.EnvVar) else store_url(store)),
            "warehouse": WarehouseResource(
                path=warehouse if isinstance(warehouse, dg.EnvVar) else str(warehouse_path(warehouse))
            ),
            "engram_config": EngramConfigResource(config_path=config_path or ""),
        },
    )


def _value(setting: Setting) -> str | None:
    return setting.get_value() if isinstance(setting, dg.EnvVar) else setting


_SETTING = re.compile(r"\{config\.([a-z_.]+)\}")


def with_settings(description: str, config: Config) -> str:
    """A description's `{config.section.field}` placeholders filled with the run's values, so the UI states the
    thresholds in force rather than the defaults (a misspelt setting fails here, when the graph is built)."""

    def value(match: re.Match[str]) -> str:
        found: Any = config
        for part in match.group(1).split("."):
            found = getattr(found, part)
        return str(found)

    return _SETTING.sub(value, description)


def _with_switches(assets: list[dg.AssetsDefinition], config: Config) -> list[dg.AssetsDefinition]:
    """Each asset's description with the configured thresholds, and each analysis asset's metadata saying its
    switch (config `analyses`), as the UI shows them."""

    def annotate(spec: dg.AssetSpec) -> dg.AssetSpec:
        name = spec.key.to_user_string()
        described = with_settings(spec.description, config) if spec.description else spec.description
        if name not in ANALYSES:
            return spec.replace_attributes(description=described)
        return spec.replace_attributes(
            description=described, metadata={**spec.metadata, "switch": describe(config, name)}
        )

    return [a.map_asset_specs(annotate) for a in assets]


def job_for(job: str, store: str | None, warehouse: str | None, config_path: str | None) -> dg.JobDefinition:
    """Rebuilds a job in a step's process (multiprocess and Dask runs reconstruct it by this name)."""
    return build_definitions(store, warehouse, config_path).resolve_job_def(job)
