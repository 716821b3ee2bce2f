"""This repository's code location (`make ui`, workspace.yaml): the library's definitions with the defaults
(ENGRAM_STORE_URL, ENGRAM_WAREHOUSE, ENGRAM_CONFIG, else the embedded SQLite store and data/warehouse)."""

from engram_pipelines.orchestration import engram_definitions

defs = engram_definitions()
