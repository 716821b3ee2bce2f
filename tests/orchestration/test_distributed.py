"""Namespace hash shards, and the nightly job on local processes and on a real Dask cluster."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from engram_pipelines.config.model import ExecutionConfig
from engram_pipelines.demo.loader import load_demo
from engram_pipelines.orchestration.runner import execute_job
from engram_pipelines.store import open_store
from engram_pipelines.warehouse.shards import namespaces_in_shard, shard_of
from engram_pipelines.warehouse.tables import Warehouse
from tests.support.memories import AS_OF


def test_every_namespace_falls_in_exactly_one_static_shard():
    names = [f"ns-{i}" for i in range(200)]
    parts = [namespaces_in_shard(names, shard, 4) for shard in range(4)]
    assert sorted(n for part in parts for n in part) == sorted(names)
    assert all(len(part) > 20 for part in parts), "crc32 spreads namespaces over the shards"
    assert shard_of("ns-7", 4) == shard_of("ns-7", 4) == [i for i, p in enumerate(parts) if "ns-7" in p][0]


def test_shards_default_to_one_in_process_and_four_on_parallel_executors():
    assert ExecutionConfig().shard_count == 1
    assert ExecutionConfig(executor="multiprocess").shard_count == 4
    assert ExecutionConfig(executor="dask", shards=3).shard_count == 3
    assert ExecutionConfig(shards=2).shard_count == 2


def test_reading_a_shard_loads_only_its_namespaces(tmp_path: Path):
    wh = Warehouse(tmp_path)
    table = pa.table({"namespace": [f"ns-{i % 7}" for i in range(70)], "id": [str(i) for i in range(70)]})
    wh.write_table("memories", AS_OF, table)
    shards = [wh.read_shard("memories", AS_OF, shard, 3) for shard in range(3)]
    assert sum(s.num_rows for s in shards) == 70
    for shard, part in enumerate(shards):
        assert all(shard_of(ns, 3) == shard for ns in part["namespace"].to_pylist())
    assert sorted(pa.concat_tables(shards)["id"].to_pylist()) == sorted(table["id"].to_pylist())


def test_a_warehouse_root_may_be_a_str(tmp_path: Path):
    assert Warehouse(str(tmp_path)).table_path("memories", AS_OF) == Warehouse(tmp_path).table_path(
        "memories", AS_OF
    )


def test_combining_shards_fails_when_a_shard_is_missing(tmp_path: Path):
    wh = Warehouse(tmp_path)
    wh.write_shard("embeddings", AS_OF, 0, 2, pa.table({"namespace": ["a"]}))
    with pytest.raises(FileNotFoundError, match="shard-1-of-2"):
        wh.read_shards("embeddings", AS_OF, 2)


def test_combining_shards_keeps_shard_order_and_one_part_is_linked_not_rewritten(tmp_path: Path):
    wh = Warehouse(tmp_path)
    for shard, names in enumerate((["b"], ["a", "c"])):
        wh.write_shard("embeddings", AS_OF, shard, 2, pa.table({"namespace": names}))
    two = wh.combine_shards("embeddings", AS_OF, 2)
    assert pq.read_table(two)["namespace"].to_pylist() == ["b", "a", "c"]
    part = wh.write_shard("embeddings", AS_OF, 0, 1, pa.table({"namespace": ["z"]}))
    one = wh.combine_shards("embeddings", AS_OF, 1)
    assert wh.read_table("embeddings", AS_OF)["namespace"].to_pylist() == ["z"]
    assert one.stat().st_ino == part.stat().st_ino and part.exists()  # linked; the step can run again
    assert wh.combine_shards("embeddings", AS_OF, 1).stat().st_ino == part.stat().st_ino


def _demo(path: Path) -> str:
    url = f"sqlite:///{path}"
    with open_store(url, migrate=True) as store:
        load_demo(store, size=1_000, seed=11, as_of=AS_OF)
    return url


def _config(path: Path, execution: dict[str, object]) -> str:
    path.write_text(yaml.safe_dump({"execution": execution}))
    return str(path)


def _run(tmp_path: Path, name: str, execution: dict[str, object]) -> dict[str, object]:
    store = _demo(tmp_path / f"{name}.db")
    config = _config(tmp_path / f"{name}.yaml", execution)
    result = execute_job("nightly", AS_OF, store=store, warehouse=str(tmp_path / name), config_path=config)
    assert result["success"], result.get("error")
    return result


def test_the_nightly_on_a_dask_cluster_gets_the_same_change_set_as_one_process(tmp_path: Path):
    """Three shards on a local Dask cluster of three worker processes against one unsharded process: the same
    change sets. The Dask run is `engram-pipelines run` in its own process, as a user starts it: the executor
    starts the cluster (execution.dask_scheduler empty) and stops it after the run."""
    reference = _run(tmp_path, "in_process", {"executor": "in_process", "shards": 1})
    assert reference["processes"] == 1
    store = _demo(tmp_path / "dask.db")
    config = _config(tmp_path / "dask.yaml", {"executor": "dask", "max_concurrent": 3, "shards": 3})
    done = subprocess.run(
        [sys.executable, "-m", "engram_pipelines.cli", "run", "--as-of", AS_OF.isoformat(), "--store", store]
        + ["--warehouse", str(tmp_path / "dask"), "--config", config, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    on_dask = json.loads(done.stdout)
    for step in ("change_set", "applied_changes", "similarity_pairs", "duplicates", "consolidation"):
        assert reference["steps"][step] == on_dask["steps"][step], step
    assert on_dask["steps"]["change_set"]["auto_changes"] > 0
    assert on_dask["processes"] > 1, "steps ran in the Dask worker processes"
    assert {f"similarity_pairs.similarity_pairs_shard_{i}" for i in range(3)} <= set(on_dask["step_seconds"])
