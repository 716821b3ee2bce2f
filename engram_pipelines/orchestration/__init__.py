"""The Dagster layer: thin assets over the `engram_pipelines` library (arrows point one way).

In a team's own code location, one call gives every asset, check, job, schedule and resource:

    import dagster as dg
    from engram_pipelines.orchestration import engram_definitions

    defs = engram_definitions(store=dg.EnvVar("ENGRAM_STORE_URL"), warehouse=dg.EnvVar("ENGRAM_WAREHOUSE"))

(merge it with the team's other definitions with `dg.Definitions.merge`).
"""

import warnings

import dagster as dg

# Two features we rely on are marked preview/beta in this Dagster release: partitioned asset checks (a check
# per as-of date) and concurrency pools (one apply at a time). We use them deliberately; silence only those.
warnings.filterwarnings(
    "ignore", message=".*partitions_def on an AssetCheckSpec.*", category=dg.PreviewWarning
)
warnings.filterwarnings("ignore", message=".*pool.*", category=dg.BetaWarning)
# The history asset's backfill policy (one run per range) is beta too.
warnings.filterwarnings("ignore", message=".*backfill_policy.*", category=dg.BetaWarning)

from engram_pipelines.orchestration.definitions import build_definitions as engram_definitions  # noqa: E402

__all__ = ["engram_definitions"]
