"""Resources: where the live store and the warehouse are, and which configuration is in force."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from engram_pipelines.config.model import Config, frozen_config, load_config
from engram_pipelines.store import Store, open_store
from engram_pipelines.warehouse.tables import Warehouse


class StoreResource(dg.ConfigurableResource):
    """The live memory store (sqlite:///... or postgresql://...)."""

    url: str

    @contextmanager
    def open(self) -> Iterator[Store]:
        store = open_store(self.url)
        try:
            yield store
        finally:
            store.close()

    @property
    def kind(self) -> str:
        return "sqlite" if self.url.startswith("sqlite") else "postgres"


class WarehouseResource(dg.ConfigurableResource):
    """The Parquet warehouse root (DuckDB reads it in place), as the run's job writes it (`Warehouse.for_job`)."""

    path: str
    _job: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        run = context.run
        # The UI's materialisations run as the implicit asset job: they write what the nightly writes.
        self._job = None if run is None or run.job_name.startswith("__") else run.job_name

    def get(self) -> Warehouse:
        return Warehouse(Path(self.path)).for_job(self._job)


class EngramConfigResource(dg.ConfigurableResource):
    """The engram-pipelines configuration file (empty: defaults plus environment overrides)."""

    config_path: str = ""
    _run_id: str | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        self._run_id = context.run.run_id if context.run is not None else None

    def load(self) -> Config:
        """The file as it is now (for what is not a run's step: definitions, sensors)."""
        return load_config(self.config_path or None)

    def for_run(self, warehouse: Warehouse) -> Config:
        """The run's configuration: read once, by its first step, and frozen in the warehouse under the run's id
        (`runs/<run id>/config.yaml`); every later step reads that copy, so an edit mid-run never splits a
        night across two configurations. Its fingerprint is in each change set and in the steps' metadata."""
        if self._run_id is None:
            return self.load()
        return frozen_config(warehouse.root / "runs" / self._run_id / "config.yaml", self.config_path or None)
