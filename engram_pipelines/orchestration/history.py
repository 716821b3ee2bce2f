"""Backfills: the policies replayed over a historical corpus, one output partition per past day."""

import datetime as dt

import dagster as dg
import pyarrow as pa

from engram_pipelines.core.progress import LogProgress
from engram_pipelines.core.records import LINK_SCHEMA, memory_schema
from engram_pipelines.night.backfill import backfill
from engram_pipelines.orchestration.partitions import as_of_partitions
from engram_pipelines.orchestration.resources import EngramConfigResource, StoreResource, WarehouseResource
from engram_pipelines.vectors.comparable import partition_vectors
from engram_pipelines.vectors.embeddings import load_embedder
from engram_pipelines.vectors.pairs import exact_content_pairs, merged_pairs, vector_pairs
from engram_pipelines.warehouse.tables import Warehouse


@dg.asset(
    partitions_def=as_of_partitions,
    backfill_policy=dg.BackfillPolicy.single_run(),
    group_name="analysis",
    kinds={"duckdb", "parquet"},
    owners=["team:data-platform"],
    description=(
        "Backfill over a historical corpus (issue 8): materialise a range of as-of dates (e.g. a year) and it runs "
        "as ONE run for the whole range (single-run backfill policy). The corpus is read from the store once; each "
        "day's state is rebuilt from the timestamps (a memory exists from its created_at on; later accesses are "
        "not known yet; lifecycle state starts raw, as if no pipeline had run); similar pairs are computed once and "
        "filtered per day. Per day it writes decay_scores, promotions and retention under "
        "<warehouse>/history/, and never writes the live store. Compare policies by backfilling the same range "
        "into two warehouses with two configurations (docs/guides/backfill.md). Each day's materialisation "
        "carries that day's counts: dagster/row_count (decay_scores rows, one per memory that existed then), "
        "promotions_rows, retention_rows, and how many rows became stale or would merge. Not part of the "
        "nightly job."
    ),
)
def history(
    context: dg.AssetExecutionContext,
    store: StoreResource,
    warehouse: WarehouseResource,
    engram_config: EngramConfigResource,
) -> dg.MaterializeResult:
    config = engram_config.for_run(warehouse.get())
    days = [dt.date.fromisoformat(key) for key in context.partition_keys]
    dim = config.snapshot.embedding_dim
    with store.open() as live:  # one read of the corpus for the whole range
        corpus = pa.Table.from_batches(
            list(live.iter_memory_batches(config.snapshot.batch_size, dim)), schema=memory_schema(dim)
        )
        links = pa.Table.from_batches(
            list(live.iter_link_batches(config.snapshot.batch_size)), schema=LINK_SCHEMA
        )
    root = warehouse.get().root
    vectors, _ = partition_vectors(corpus, load_embedder(config.embeddings.embedder), root)
    found, _ = vector_pairs(
        vectors, config.similarity.lowest_threshold, exact_cutoff=config.similarity.exact_cutoff
    )
    pairs = merged_pairs(found, exact_content_pairs(corpus))
    summary = backfill(
        corpus, links, pairs, days, config, Warehouse(root / "history"), progress=LogProgress(context.log)
    )
    context.log.info(f"backfilled {summary.days} days over {corpus.num_rows} memories")
    # One run materialises every day of the range, and Dagster records one event per day with the run's
    # metadata; partition-scoped metadata is what makes each day's event carry that day's own counts.
    for day, tables in summary.table_rows_per_day.items():
        transitions = summary.transitions_per_day[day]
        context.add_asset_metadata(
            {
                "dagster/row_count": tables["decay_scores"],
                "promotions_rows": tables["promotions"],
                "retention_rows": tables["retention"],
                "became_stale": transitions["became_stale"],
                "duplicates": transitions["duplicates"],
                "near_duplicates": transitions["near_duplicates"],
            },
            partition_key=day,
        )
    return dg.MaterializeResult(
        metadata={
            "days": summary.days,
            "corpus_rows": corpus.num_rows,
            "output": dg.MetadataValue.path(str(root / "history")),
        }
    )
