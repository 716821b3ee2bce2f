"""The Dagster layer: thin assets over the `engram_pipelines` library (arrows point one way)."""

import warnings

import dagster as dg

# Two features we rely on are marked preview/beta in this Dagster release: partitioned asset checks (a check
# per as-of date) and concurrency pools (one apply at a time). We use them deliberately; silence only those.
warnings.filterwarnings(
    "ignore", message=".*partitions_def on an AssetCheckSpec.*", category=dg.PreviewWarning
)
warnings.filterwarnings("ignore", message=".*pool.*", category=dg.BetaWarning)
