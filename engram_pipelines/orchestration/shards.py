"""Steps per namespace hash shard (config `execution.shards`), then one step that combines them.

Namespaces never share a pair or a cluster, so an analysis over all of them is the union of its runs over the
shards. The shard steps are independent, so the executor runs them at once: local processes (`multiprocess`)
or Dask workers (`dask`). Each writes its part under <warehouse>/shards/; the combine step reads the parts back,
writes the asset's table and reports its metadata. The shards are a static set (engram_pipelines/warehouse/shards.py).
"""

import datetime as dt
from collections.abc import Callable
from typing import Any

import dagster as dg

from engram_pipelines.config.model import Config
from engram_pipelines.orchestration.partitions import as_of_date
from engram_pipelines.warehouse.tables import Warehouse

# (context, warehouse, config, as_of, shard, shards): compute one shard and write its part.
ShardStep = Callable[[dg.OpExecutionContext, Warehouse, Config, dt.date, int, int], None]
# (context, warehouse, config, as_of, shards): combine the parts; returns the asset's metadata.
CombineStep = Callable[[dg.OpExecutionContext, Warehouse, Config, dt.date, int], dict[str, Any]]

_RESOURCES = {"warehouse", "engram_config"}


def shard_ops(asset: str, shards: int, step: ShardStep, upstream: tuple[str, ...]) -> list[dg.OpDefinition]:
    """One op per shard; each waits for the `upstream` assets (passed as inputs of those names)."""

    def build(shard: int) -> dg.OpDefinition:
        @dg.op(
            name=f"{asset}_shard_{shard}",
            ins={name: dg.In(dg.Nothing) for name in upstream},
            out=dg.Out(dg.Nothing),
            required_resource_keys=_RESOURCES,
            description=f"{asset} for the namespaces of hash shard {shard} of {shards}.",
        )
        def shard_op(context: dg.OpExecutionContext) -> None:
            wh, config = (
                context.resources.warehouse.get(),
                context.resources.engram_config.for_run(context.resources.warehouse.get()),
            )
            step(context, wh, config, as_of_date(context), shard, shards)

        return shard_op

    return [build(shard) for shard in range(shards)]


def combine_op(asset: str, shards: int, step: CombineStep) -> dg.OpDefinition:
    @dg.op(
        name=f"{asset}_combine",
        ins={"parts": dg.In(dg.Nothing)},
        out=dg.Out(dg.Nothing),
        required_resource_keys=_RESOURCES,
        description=f"Combines the {shards} shards of {asset} into its table.",
    )
    def combine(context: dg.OpExecutionContext) -> None:
        wh, config = (
            context.resources.warehouse.get(),
            context.resources.engram_config.for_run(context.resources.warehouse.get()),
        )
        context.add_output_metadata(step(context, wh, config, as_of_date(context), shards))

    return combine
