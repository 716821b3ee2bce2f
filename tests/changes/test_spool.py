"""Change sets spooled to their files range by range hold what composing them whole gives."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engram_pipelines.changes import compose as compose_module
from engram_pipelines.changes import spool as spool_module
from engram_pipelines.changes.compose import compose, composed_parts, namespace_ranges
from engram_pipelines.changes.registry import counts_of, ops_by, verify_change_set
from engram_pipelines.changes.spool import spool_change_sets
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.store import ChangeSetRecord
from engram_pipelines.warehouse.parquet import write_parquet
from tests.support.changes import three_namespaces
from tests.support.memories import AS_OF, T0


def _spooled(intents: pa.Table, memories: pa.Table, warehouse):
    parts = composed_parts(namespace_ranges(intents), memories, at=end_of_day(AS_OF))
    return spool_change_sets(parts, warehouse, as_of=AS_OF, job="test")


@pytest.mark.parametrize("range_intents, group_rows", [(4, 2), (4, 5), (1_000, 3), (1_000, 1_000)])
def test_a_spooled_set_is_the_composed_set(tmp_path, warehouse, monkeypatch, range_intents, group_rows):
    intents, memories = three_namespaces(tmp_path, warehouse)
    whole = compose(intents, memories, as_of=AS_OF, at=end_of_day(AS_OF), job="test")
    monkeypatch.setattr(compose_module, "RANGE_INTENTS", range_intents)
    monkeypatch.setattr(spool_module, "ROW_GROUP_ROWS", group_rows)
    spooled = _spooled(intents, memories, warehouse)
    assert set(spooled) == set(whole) == {"auto", "gated", "held"}
    for klass, written in spooled.items():
        # As the set composed whole is written (`registry.store_change_set`), and read back the same.
        one_piece = write_parquet(whole[klass], tmp_path / f"{klass}.parquet", write_statistics=True)
        table = pq.read_table(written.path)
        assert table.equals(pq.read_table(one_piece), check_metadata=True), klass
        if 0 < table.num_rows <= group_rows:
            assert written.path.read_bytes() == one_piece.read_bytes(), klass
        assert written.meta["change_set_id"] == compose_module.change_set_id_of(whole[klass])
        assert written.counts == counts_of(whole[klass])
        assert written.by_namespace_op == ops_by(whole[klass], "namespace")
        groups = pq.ParquetFile(written.path).metadata.num_row_groups
        assert groups == -(-table.num_rows // group_rows), klass
        record = ChangeSetRecord(
            change_set_id=written.meta["change_set_id"],
            created_at=T0,
            as_of=written.meta["as_of"],
            job="test",
            review_class=klass,
            status="proposed",
            path=str(written.path),
            config_fingerprint="test",
            total=written.counts["total"],
            counts=written.counts,
        )
        verify_change_set(record)  # every change hashes to its id, the ids to the set's
    assert spooled["gated"].counts["total"] == 3 and spooled["held"].counts["total"] == 0
    assert not list(warehouse.change_set_path("x").parent.glob(".spool-*"))


def test_a_set_already_written_is_not_written_again(tmp_path, warehouse):
    intents, memories = three_namespaces(tmp_path, warehouse)
    first = _spooled(intents, memories, warehouse)["auto"]
    stamp = first.path.stat().st_mtime_ns
    again = _spooled(intents, memories, warehouse)["auto"]
    assert again == first and again.path.stat().st_mtime_ns == stamp


def test_a_compose_that_fails_leaves_no_set_and_no_spool(tmp_path, warehouse):
    intents, memories = three_namespaces(tmp_path, warehouse)
    parts = composed_parts(namespace_ranges(intents), memories, at=end_of_day(AS_OF))

    def failing():
        yield next(parts)
        raise RuntimeError("a range failed")

    with pytest.raises(RuntimeError, match="a range failed"):
        spool_change_sets(failing(), warehouse, as_of=AS_OF, job="test")
    assert not list(warehouse.change_set_path("x").parent.iterdir())
