"""The Dagster layer: thin assets over the `engram_pipelines` library (arrows point one way)."""
