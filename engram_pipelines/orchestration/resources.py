"""Resources: where the live store and the warehouse are, and which configuration is in force."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import PrivateAttr

from engram_pipelines.config.model import Config, load_config
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

    def load(self) -> Config:
        return load_config(self.config_path or None)
