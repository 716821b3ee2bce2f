"""Change sets: composition, determinism, the review gate, CAS apply with retry, revert, restore, explain."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engram_pipelines.changes import compose as compose_module
from engram_pipelines.changes.apply import ReviewRequired, apply_change_set
from engram_pipelines.changes.compose import compose
from engram_pipelines.changes.fold_sql import sql_fold_targets
from engram_pipelines.changes.intents import intents_from_sql, intents_table
from engram_pipelines.changes.invariants import (
    crosses_namespace,
    destructive_on_pinned,
    several_writes_per_row,
)
from engram_pipelines.changes.registry import counts_of, load_change_set, ops_by
from engram_pipelines.changes.revert import (
    RestoreError,
    approve_change_set,
    restore_memory,
    revert_change_set,
)
from engram_pipelines.core.timestamps import end_of_day
from engram_pipelines.ingest.snapshot import take_snapshot
from engram_pipelines.reports.explain import explain_memory
from engram_pipelines.store import MemoryWrite, open_store
from tests.support.changes import intent, propose, three_namespaces
from tests.support.memories import AS_OF, memory


def test_ops_on_one_row_compose_into_one_write(store, warehouse):
    store.insert_memories([memory(1), memory(2)])
    cs = propose(
        store,
        warehouse,
        [
            intent("m1", "mark_stale", score=0.2),
            intent("m1", "move_zone", **{"from": "active", "to": "archived"}),
            intent("m1", "supersede", by="m2"),
            intent("m1", "union_tags", tags=["x"]),
        ],
    )
    _, table = load_change_set(store, cs)
    assert table.num_rows == 1
    change = table.to_pylist()[0]
    assert change["ops"] == ["mark_stale", "move_zone", "supersede", "union_tags"]
    assert change["destructive"] and change["expected_version"] == 1
    result = apply_change_set(store, cs)
    assert (result.applied, result.total) == (1, 1)
    row = store.get("m1")
    assert (row["zone"], row["superseded_by"], row["stale"], row["tags"], row["version"]) == (
        "archived",
        "m2",
        True,
        ["x"],
        2,
    )
    assert row["metadata"]["supersededReason"] == "supersede by test"


def test_precedence_purge_wins_and_the_most_advanced_zone_wins(store, warehouse):
    store.insert_memories([memory(1, zone="purge_queue"), memory(2)])
    intents = [
        intent("m1", "purge"),
        intent("m1", "union_tags", tags=["x"]),
        intent("m2", "move_zone", **{"from": "active", "to": "archived"}),
        intent("m2", "move_zone", source="other", **{"from": "active", "to": "purge_queue"}),
    ]
    _, table = load_change_set(store, propose(store, warehouse, intents))
    by_target = {c["target_id"]: c for c in table.to_pylist()}
    assert by_target["m1"]["op"] == "delete" and by_target["m1"]["ops"] == ["purge"]
    assert "union_tags" in by_target["m1"]["dropped"]
    assert '"zone":"purge_queue"' in by_target["m2"]["patch"]


def test_decay_never_clears_a_supersede_marker(store, warehouse):
    store.insert_memories([memory(1), memory(2, superseded_by="m1")])
    cs = propose(
        store, warehouse, [intent("m2", "mark_stale", score=0.1), intent("m2", "clear_stale", score=0.5)]
    )
    apply_change_set(store, cs)
    assert store.get("m2")["superseded_by"] == "m1"


def test_only_transitions_are_emitted(store, warehouse):
    store.insert_memories([memory(1, tags=["a"])])
    cs = propose(store, warehouse, [intent("m1", "union_tags", tags=["a"])])
    assert load_change_set(store, cs)[1].num_rows == 0


def test_same_snapshot_and_config_give_byte_identical_change_sets(store, warehouse, tmp_path):
    store.insert_memories([memory(i) for i in range(5)])
    take_snapshot(store, warehouse, AS_OF)
    intents = intents_table([intent(f"m{i}", "mark_stale", score=0.1 * i) for i in range(5)])
    memories = warehouse.read_table("memories", AS_OF)
    one = compose(intents, memories, as_of=AS_OF, at=end_of_day(AS_OF), job="nightly")["auto"]
    two = compose(intents.take([4, 3, 2, 1, 0]), memories, as_of=AS_OF, at=end_of_day(AS_OF), job="nightly")[
        "auto"
    ]
    pq.write_table(one, tmp_path / "a.parquet")
    pq.write_table(two, tmp_path / "b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_gated_sets_need_an_approval(store, warehouse):
    store.insert_memories([memory(1), memory(2)])
    cs = propose(store, warehouse, [intent("m2", "supersede", klass="gated", by="m1")], klass="gated")
    with pytest.raises(ReviewRequired, match="approve"):
        apply_change_set(store, cs)
    assert store.get("m2")["superseded_by"] is None
    approve_change_set(store, cs, actor="reviewer")
    assert apply_change_set(store, cs).applied == 1
    assert store.get_change_set(cs).approved_by == "reviewer"


def test_reapplying_is_a_no_op_and_every_write_is_audited(store, warehouse):
    store.insert_memories([memory(i) for i in range(4)])
    cs = propose(store, warehouse, [intent(f"m{i}", "mark_stale", score=0.1) for i in range(4)])
    first = apply_change_set(store, cs)
    audit = store.audit_rows(change_set_id=cs)
    second = apply_change_set(store, cs)
    assert first.applied == 4 and second.applied == 4 and second.resumed_from == 4
    assert len(store.audit_rows(change_set_id=cs)) == len(audit) == 4
    assert audit[0]["before"]["stale"] in (0, False) and audit[0]["after"]["stale"] is True
    assert [store.get(f"m{i}")["version"] for i in range(4)] == [2, 2, 2, 2]


def test_an_agent_edit_is_retried_on_the_fresh_row(store, warehouse):
    store.insert_memories([memory(1, tags=["a"])])
    cs = propose(store, warehouse, [intent("m1", "promote_tier", **{"from": "stm", "to": "ltm"})])
    store.update_memory("m1", 1, tags=["a", "agent"])  # a concurrent agent edit: version 2
    result = apply_change_set(store, cs)
    assert (result.applied, result.retried) == (1, 1)
    row = store.get("m1")
    assert row["tier"] == "ltm" and row["tags"] == ["a", "agent"] and row["version"] == 3


def test_a_row_accessed_since_the_snapshot_is_not_archived(store, warehouse):
    store.insert_memories([memory(1)])
    cs = propose(store, warehouse, [intent("m1", "move_zone", **{"from": "active", "to": "archived"})])
    store.record_access("m1")
    result = apply_change_set(store, cs)
    assert (result.applied, result.ineligible) == (0, 1)
    assert "accessed since" in next(iter(result.ineligible_reasons))
    assert store.get("m1")["zone"] == "active"


def test_a_row_pinned_since_the_snapshot_is_not_hidden(store, warehouse):
    store.insert_memories([memory(1), memory(2)])
    cs = propose(store, warehouse, [intent("m1", "supersede", by="m2")])
    store.set_pinned("m1", 1)
    result = apply_change_set(store, cs)
    assert result.ineligible == 1 and store.get("m1")["superseded_by"] is None


def test_content_edited_since_the_evidence_is_not_merged(store, warehouse):
    store.insert_memories([memory(1), memory(2)])
    cs = propose(store, warehouse, [intent("m1", "supersede", by="m2")])
    store.update_memory("m1", 1, content="a different fact now")
    assert apply_change_set(store, cs).ineligible == 1


def test_revert_restores_pre_images_and_skips_rows_edited_since(store, warehouse):
    store.insert_memories([memory(1), memory(2), memory(3)])
    cs = propose(
        store, warehouse, [intent("m1", "supersede", by="m3"), intent("m2", "union_tags", tags=["t"])]
    )
    apply_change_set(store, cs)
    store.update_memory("m2", 2, content="edited after the apply")
    result = revert_change_set(store, cs)
    assert result.reverted == 1 and result.skipped_edited_since == ["m2"]
    assert store.get("m1")["superseded_by"] is None and store.get("m1")["metadata"] == {}
    assert store.get("m2")["tags"] == ["t"]
    assert store.get_change_set(cs).status == "reverted"


def test_purge_then_restore_under_the_original_id_once(store, warehouse):
    store.insert_memories([memory(1, zone="purge_queue", tags=["keep"], metadata={"a": 1})])
    original = store.get("m1")
    cs = propose(store, warehouse, [intent("m1", "purge")])
    assert apply_change_set(store, cs).applied == 1
    assert store.get("m1") is None
    restore_memory(store, "m1")
    back = store.get("m1")
    assert {k: back[k] for k in ("content", "tags", "created_at")} == {
        k: original[k] for k in ("content", "tags", "created_at")
    }
    # Back in recall with its zone clock restarted, or the next night would purge it again.
    assert (
        back["zone"] == "active"
        and back["zone_since"] is not None
        and back["zone_since"] != original["zone_since"]
    )
    assert back["metadata"]["a"] == 1 and back["metadata"]["restored"]["fromZone"] == "purge_queue"
    assert (back["embedding"] == original["embedding"]).all()
    with pytest.raises(RestoreError, match="exists"):
        restore_memory(store, "m1")


def test_inserts_and_links_are_applied_once_and_reverted(store, warehouse):
    store.insert_memories([memory(1)])
    row = {
        "id": "s1",
        "namespace": "ns1",
        "kind": "semantic",
        "content": "a fact",
        "created_at": dt.datetime(2026, 11, 29, tzinfo=dt.UTC),
    }
    link = {"namespace": "ns1", "src_id": "s1", "dst_id": "m1", "kind": "derived-from", "weight": 1.0}
    cs = propose(
        store,
        warehouse,
        [
            intent("s1", "insert_memory", row=row),
            {**intent("s1|m1|derived-from", "upsert_link", **link), "target_kind": "link"},
        ],
    )
    result = apply_change_set(store, cs)
    assert result.applied == 2 and store.get("s1")["kind"] == "semantic"
    assert store.query("SELECT count(*) FROM memory_links")[0][0] == 1
    revert_change_set(store, cs)
    assert store.get("s1") is None and store.query("SELECT count(*) FROM memory_links")[0][0] == 0


def test_a_large_set_is_reverted_in_batches_back_to_every_pre_image(store, warehouse):
    """More changes than one revert batch, links and row updates interleaved, one row edited since."""
    n = 1_500
    store.insert_memories([memory(i) for i in range(n)])
    before = store.query("SELECT id, stale, score, version FROM memories ORDER BY id")
    intents = []
    for i in range(n):
        intents.append(intent(f"m{i}", "mark_stale", score=0.1))
        link = {
            "namespace": "ns1",
            "src_id": f"m{i}",
            "dst_id": f"m{(i + 1) % n}",
            "kind": "related",
            "weight": 0.5,
        }
        intents.append(
            {**intent(f"m{i}|m{(i + 1) % n}|related", "upsert_link", **link), "target_kind": "link"}
        )
    cs = propose(store, warehouse, intents)
    assert apply_change_set(store, cs).applied == 2 * n
    store.cas_write_memories(
        [MemoryWrite("agent", "m7", store.get("m7")["version"], "agent-edit", {"importance": 0.9})],
        actor="agent",
        change_set_id="agent",
    )
    result = revert_change_set(store, cs)
    assert result.reverted == 2 * n - 1 and result.skipped_edited_since == ["m7"]
    after = store.query("SELECT id, stale, score FROM memories WHERE id <> 'm7' ORDER BY id")
    assert after == [(i, s, sc) for i, s, sc, _ in before if i != "m7"]
    assert store.query("SELECT count(*) FROM memory_links")[0][0] == 0


def test_invariant_checks_catch_violations(store, warehouse):
    store.insert_memories([memory(1, pinned=True), memory(2, namespace="ns2")])
    take_snapshot(store, warehouse, AS_OF)
    memories = warehouse.read_table("memories", AS_OF)
    sets = compose(
        intents_table([intent("m1", "supersede", by="m2")]),
        memories,
        as_of=AS_OF,
        at=end_of_day(AS_OF),
        job="t",
    )
    table = sets["auto"]
    assert [v["target_id"] for v in destructive_on_pinned(table, memories)] == ["m1"]
    assert [v["memory"] for v in crosses_namespace(table, memories)] == ["m2"]
    assert several_writes_per_row(table) == []
    import pyarrow as pa

    assert len(several_writes_per_row(pa.concat_tables([table, table]))) == 1


def test_explain_tells_the_lifecycle(store, warehouse):
    store.insert_memories([memory(1), memory(2)])
    cs = propose(store, warehouse, [intent("m1", "supersede", by="m2")])
    apply_change_set(store, cs)
    story = explain_memory(store, "m1")
    assert story["state"]["superseded_by"] == "m2"
    assert story["changes"][0]["outcome"] == "applied" and story["changes"][0]["snapshot_partition"].endswith(
        AS_OF.isoformat()
    )
    assert [a["op"] for a in story["audit"]] == ["supersede"]
    assert explain_memory(store, "m2")["changes"][0]["role"] == "referenced"


def test_explain_finds_an_id_with_a_quote_under_a_path_with_an_apostrophe(store, tmp_path):
    from engram_pipelines.changes.registry import find_change_set
    from engram_pipelines.warehouse.tables import Warehouse

    store.insert_memories([memory('say "hi"'), memory(2)])
    warehouse = Warehouse(tmp_path / "O'Brien's warehouse")
    cs = propose(store, warehouse, [intent('say "hi"', "supersede", by="m2")])
    damaged = propose(store, warehouse, [intent("m2", "mark_stale", score=0.1)])
    Path(find_change_set(store, damaged).path).write_bytes(b"not parquet")  # left out, no crash
    story = explain_memory(store, 'say "hi"')
    assert [c["change_set_id"] for c in story["changes"]] == [cs]
    assert explain_memory(store, "m2")["changes"][0]["role"] == "referenced"


HIDING_INTENTS = [
    ("mark_stale", {"score": 0.1}, {}),
    ("move_zone", {"from": "active", "to": "archived"}, {}),
    ("move_zone", {"from": "archived", "to": "purge_queue"}, {"zone": "archived"}),
    ("purge", {}, {"zone": "purge_queue"}),
    ("supersede", {"by": "m2"}, {}),
]


@pytest.mark.parametrize(
    ("op", "params", "row"), HIDING_INTENTS, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(HIDING_INTENTS)]
)
@pytest.mark.parametrize("protection", ["pinned", "block"])
def test_every_op_that_hides_or_deletes_spares_pinned_rows_and_blocks(
    store, warehouse, op, params, row, protection
):
    protect = {"pinned": True} if protection == "pinned" else {"kind": "block"}
    store.insert_memories([memory(1, **row, **protect), memory(2)])
    before = store.get("m1")
    cs = propose(store, warehouse, [intent("m1", op, **params)])
    _, table = load_change_set(store, cs)
    memories = warehouse.read_table("memories", AS_OF)
    if table.column("destructive").to_pylist()[0]:
        assert destructive_on_pinned(table, memories), "the blocking check must flag it"
    result = apply_change_set(store, cs)
    assert (result.applied, result.ineligible) == (0, 1)
    assert "pinned or a block" in next(iter(result.ineligible_reasons))
    after = store.get("m1")
    assert (after.pop("embedding") == before.pop("embedding")).all() and after == before


def test_one_apply_at_a_time_per_store(store, warehouse):
    import threading
    import time

    from engram_pipelines.store import open_store

    store.insert_memories([memory(1)])
    cs = propose(store, warehouse, [intent("m1", "mark_stale", score=0.1)])
    finished = []

    def second_apply() -> None:
        with open_store(store.url) as own:  # a connection per thread, as each agent or worker has
            finished.append(apply_change_set(own, cs))

    with open_store(store.url) as other, other.exclusive_apply():
        thread = threading.Thread(target=second_apply)
        thread.start()
        time.sleep(0.5)
        assert not finished, "the second apply waits for the first"
    thread.join(timeout=30)
    assert finished and finished[0].applied == 1


def _changes_by_target(table) -> dict[tuple[str, str], dict]:
    """Changes keyed by target, their JSON documents parsed (the SQL fold spells them differently)."""
    out = {}
    for change in table.to_pylist():
        for column in ("intents", "dropped", "patch", "evidence"):
            change[column] = json.loads(change[column])
        out[(change["target_kind"], change["target_id"])] = {
            k: v for k, v in change.items() if k not in ("change_id", "change_set_id")
        }
    return out


def test_the_sql_fold_writes_what_the_python_fold_writes(tmp_path, warehouse):
    stamp = "2026-11-01T00:00:00.000000Z"
    with open_store(f"sqlite:///{tmp_path}/s.db", migrate=True) as store:
        store.insert_memories(
            [
                memory(
                    1,
                    stale=True,
                    score=0.1,
                    metadata={"keep": 1, "stale": {"at": stamp, "reason": "old", "score": 0.1}},
                ),
                memory(2),
                memory(3, tier="stm"),
                memory(4, zone="archived", zone_since=dt.datetime(2026, 10, 2, tzinfo=dt.UTC)),
                memory(5, score=0.5),
                memory(6, score=0.5),
                memory(7),
                memory(8),
                memory(9, kind="episodic", stale=True, score=0.2),
                memory(10, metadata={"flag": {"a": 1, "b": [1, 2]}}),
                memory(11),
                memory(12),
                memory(13, stale=True),
                memory(14),
            ]
        )
        take_snapshot(store, warehouse, AS_OF)
    zone = {"from": "active", "to": "archived"}
    intents = [
        intent("m1", "clear_stale", score=0.5),
        intent("m2", "mark_stale", source="decay_scores", score=0.2),
        intent("m2", "move_zone", source="retention", **zone),
        intent(
            "m3",
            "set_metadata",
            source="temporal",
            values={"temporalEdges": {"builtAt": stamp, "neighbors": 3}},
        ),
        intent("m3", "promote_tier", source="promotions", **{"from": "stm", "to": "ltm"}),
        intent("m4", "move_zone", **{"from": "archived", "to": "purge_queue"}),
        intent("m5", "set_score", score=0.5),  # already so: no change, on both paths
        intent("m6", "clear_stale", score=0.5),  # not stale, no mark, same score: no change
        intent("m7", "set_metadata", values={"gone": None}),  # a null: the Python fold's
        intent("m8", "mark_stale", source="a", score=0.2),  # one op twice: the Python fold's
        intent("m8", "mark_stale", source="b", score=0.25),
        {
            **intent("m9", "promote_kind", source="semantic", **{"from": "episodic", "to": "semantic"}),
            "cluster_id": "c9",
        },
        {**intent("m9", "clear_stale", source="decay_scores", score=0.9), "reason": ""},
        intent(
            "m9",
            "set_metadata",
            source="semantic",
            values={"semanticCompressed": {"node": "n1", "score": 0.9}},
        ),
        intent("m10", "set_metadata", values={"flag": {"a": 1, "b": [1, 2]}}),  # the value it has: no change
        intent("m11", "union_tags", tags=["x"]),  # not a lifecycle op: the Python fold's
        intent("m12", "move_zone", klass="gated", **zone),
        intent("m13", "clear_stale", score=0.6),  # two ops on one metadata key: the later in fold order wins
        intent("m13", "mark_stale", score=0.2),
        intent("m14", "move_zone", **zone),
        intent("m14", "set_metadata", values={"zone": "kept by hand"}),
    ]
    table = intents_table(intents)
    memories = warehouse.read_table("memories", AS_OF)
    at = end_of_day(AS_OF)
    in_sql = compose(table, memories, as_of=AS_OF, at=at, job="test")
    in_python = compose(table, memories, as_of=AS_OF, at=at, job="test", sql_fold=False)
    for klass in in_python:
        assert _changes_by_target(in_sql[klass]) == _changes_by_target(in_python[klass]), klass
    composed = {target for _, target in _changes_by_target(in_sql["auto"])}
    assert composed == {"m1", "m2", "m3", "m4", "m7", "m8", "m9", "m11", "m13", "m14"}
    con = duckdb.connect()
    con.register("intents", table)
    con.register("memories", memories.drop_columns(["embedding"]))
    in_sql_fold = {"m1", "m2", "m3", "m4", "m5", "m6", "m9", "m10", "m12", "m13", "m14"}
    assert set(sql_fold_targets(con)["target_id"].to_pylist()) == in_sql_fold


def test_composing_namespace_ranges_gives_the_one_piece_table(tmp_path, warehouse, monkeypatch):
    intents, memories = three_namespaces(tmp_path, warehouse)
    whole = compose(intents, memories, as_of=AS_OF, at=end_of_day(AS_OF), job="test")
    monkeypatch.setattr(compose_module, "RANGE_INTENTS", 4)  # a range per namespace
    assert len(compose_module._namespace_ranges(intents["namespace"], 4)) == 3
    ranged = compose(intents, memories, as_of=AS_OF, at=end_of_day(AS_OF), job="test")
    for klass in whole:
        assert ranged[klass].equals(whole[klass], check_metadata=True), klass
    assert whole["auto"].num_rows == 9 + 6


def test_change_set_counts_count_each_op_of_a_composed_change():
    table = pa.table(
        {
            "namespace": ["b", "a", "b", "a"],
            "ops": [["mark_stale", "move_zone"], ["mark_stale"], ["move_zone"], ["purge", "mark_stale"]],
            "destructive": [True, False, False, True],
        }
    )
    assert counts_of(table) == {
        "total": 4,
        "by_op": {"mark_stale": 3, "move_zone": 2, "purge": 1},
        "by_namespace": {"a": 2, "b": 2},
        "destructive": 2,
    }
    assert ops_by(table, "namespace") == {
        "a": {"mark_stale": 2, "purge": 1},
        "b": {"mark_stale": 1, "move_zone": 2},
    }
    assert counts_of(table.slice(0, 0)) == {"total": 0, "by_op": {}, "by_namespace": {}, "destructive": 0}


def test_intents_from_sql_give_what_intents_table_gives_and_refuse_an_unknown_op():
    query = """
        SELECT 'ns' AS namespace, 'memory' AS target_kind, 'm1' AS target_id, 'mark_stale' AS op,
            to_json({'score': 0.25}) AS params, 'below 0.3' AS reason,
            to_json({'decay_score': 0.25, 'rule': 'decay'}) AS evidence,
            'decay_scores' AS source, 'auto' AS review_class, NULL AS cluster_id
    """
    built = intents_table(
        [
            {
                "namespace": "ns",
                "target_id": "m1",
                "op": "mark_stale",
                "params": {"score": 0.25},
                "reason": "below 0.3",
                "evidence": {"rule": "decay", "decay_score": 0.25},
                "source": "decay_scores",
                "review_class": "auto",
            }
        ]
    )
    assert intents_from_sql(duckdb.connect(), query).equals(built)
    with pytest.raises(ValueError, match="unknown op 'mark_fresh'"):
        intents_from_sql(duckdb.connect(), query.replace("'mark_stale' AS op", "'mark_fresh' AS op"))


def test_a_row_edited_since_the_snapshot_is_never_archived_or_purged(store, warehouse):
    """An agent's version-checked edit between the snapshot and the apply is evidence the row is alive: an
    archive or purge decided by neglect is skipped, not re-derived on the fresh row; a row the pipeline itself
    wrote in between (tonight's auto set) is still archived; content-justified ops keep the retry."""
    store.insert_memories(
        [memory(0), memory(1), memory(2, zone="purge_queue"), memory(3), memory(4, zone="purge_queue")]
    )
    archive = {"from": "active", "to": "archived"}
    stale = propose(store, warehouse, [intent("m3", "mark_stale", score=0.1)])
    held = propose(
        store,
        warehouse,
        [
            intent("m0", "move_zone", **archive),
            intent("m1", "move_zone", **archive),
            intent("m2", "purge"),
            intent("m3", "move_zone", **archive),
            intent("m4", "purge"),
        ],
    )
    for memory_id in ("m0", "m2"):  # an agent adds a tag
        row = store.get(memory_id)
        store.update_memory(memory_id, row["version"], tags=[*row["tags"], "still-needed"])
    assert apply_change_set(store, stale).applied == 1  # the pipeline's own write to m3
    result = apply_change_set(store, held)
    assert (result.applied, result.skipped_concurrent_edit) == (3, 2)
    assert store.get("m0")["zone"] == "active" and "still-needed" in store.get("m0")["tags"]
    assert store.get("m2") is not None and "still-needed" in store.get("m2")["tags"]
    assert store.get("m1")["zone"] == "archived" and store.get("m3")["zone"] == "archived"
    assert store.get("m4") is None
    reasons = {t: o[1] for t, o in store.ledger(held).items() if o[0] == "skipped_concurrent_edit"}
    assert sorted(reasons.values()) == ["edited since the snapshot: an edit is evidence the row is alive"] * 2


def test_the_namespace_chart_shows_the_top_namespaces_and_the_rest_in_one_bar():
    from engram_pipelines.reports.plots import top_keys

    counts = {f"ns{i}": {"a": i, "b": 1} for i in range(30)}
    top = top_keys(counts, 5)
    assert list(top)[:5] == ["ns29", "ns28", "ns27", "ns26", "ns25"]
    assert top["25 others"] == {"a": sum(range(25)), "b": 25}
    assert top_keys({"x": {"a": 1}}, 5) == {"x": {"a": 1}}


def test_reports_show_injected_content_and_namespaces_as_text():
    """Content once rendered as raw <script> tags, headings and javascript: links, and a namespace holding a
    pipe or a newline broke the report tables."""
    from engram_pipelines.core import mdtext
    from engram_pipelines.reports.health import HealthReport

    hostile = "<script>alert(1)</script>\n# heading [click](javascript:alert(1)) | cell"
    shown = mdtext.inline(hostile)
    assert "<script>" not in shown and "\n" not in shown
    assert "[click](javascript" not in shown and "\\[click\\]" in shown and "\\|" in shown
    counts = {"total": 1.0, "active": 1.0, "avg_importance": 0.5}
    report = HealthReport(as_of=AS_OF, before={"a|b\nc": counts}, after={"a|b\nc": counts})
    lines = report.markdown().splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| namespace |"))
    row = lines[header + 2]
    assert row.startswith("| a\\|b c |")  # one row, its pipe escaped, its newline a space
    assert row.replace("\\|", "").count("|") == lines[header].count("|")


def test_an_altered_change_set_is_neither_approved_nor_applied(store, warehouse):
    """Rewriting a row of a stored set (another target, a patch hiding a pinned row, no intents) applied it
    before; a truncated file was approved."""
    import pyarrow.compute as pc

    from engram_pipelines.changes.registry import ChangeSetAltered, find_change_set
    from engram_pipelines.changes.revert import approve_change_set

    store.insert_memories([memory(1), memory(2), memory(3, pinned=True)])
    cs = propose(
        store, warehouse, [intent("m1", "move_zone", to="archived", **{"from": "active"})], klass="auto"
    )
    path = Path(find_change_set(store, cs).path)
    original = path.read_bytes()
    table = pq.read_table(path)
    forged = table.set_column(
        table.schema.get_field_index("target_id"),
        "target_id",
        pc.replace_substring(table["target_id"], "m1", "m3"),
    ).set_column(table.schema.get_field_index("intents"), "intents", pa.array(["[]"] * table.num_rows))
    pq.write_table(forged.replace_schema_metadata(table.schema.metadata), path)
    with pytest.raises(ChangeSetAltered, match="altered after it was proposed"):
        apply_change_set(store, cs)
    assert store.get("m3")["zone"] == "active" and store.get("m1")["zone"] == "active"
    path.write_bytes(original[: len(original) // 2])
    with pytest.raises(ChangeSetAltered, match="cannot be read"):
        apply_change_set(store, cs)
    path.write_bytes(original)
    assert apply_change_set(store, cs).applied == 1  # the plan as proposed applies
    gated = propose(store, warehouse, [intent("m2", "supersede", klass="gated", by="m1")], klass="gated")
    gated_path = Path(find_change_set(store, gated).path)
    gated_path.write_bytes(gated_path.read_bytes()[:100])
    with pytest.raises(ChangeSetAltered):
        approve_change_set(store, gated, actor="test")


def test_a_change_set_made_with_a_relative_warehouse_is_found_from_another_folder(
    store, tmp_path, monkeypatch
):
    from engram_pipelines.changes.registry import find_change_set
    from engram_pipelines.warehouse.tables import Warehouse

    store.insert_memories([memory(1)])
    (tmp_path / "run").mkdir()
    monkeypatch.chdir(tmp_path / "run")
    cs = propose(store, Warehouse("wh"), [intent("m1", "mark_stale", score=0.1)])
    monkeypatch.chdir(tmp_path)
    assert Path(find_change_set(store, cs).path).is_absolute()
    assert apply_change_set(store, cs).applied == 1


def test_a_night_reverted_as_one_puts_back_each_row_as_it_was_before_the_first_set():
    """Two sets of one night on the same rows: the net pre-image is the first set's, the guard the last set's;
    a row updated then purged comes back whole (the purge's full pre-image, the first set's columns); a row
    created and purged the same night has nothing to undo."""
    from engram_pipelines.changes.revert import _net_entries

    rows = [
        {
            "audit_id": audit_id,
            "target_kind": "memory",
            "target_id": target,
            "op": op,
            "before": b,
            "after": a,
        }
        for audit_id, target, op, b, a in [
            (1, "a", "mark_stale", {"version": 1, "stale": False}, {"version": 2, "stale": True}),
            (2, "b", "set_metadata", {"version": 4, "tags": []}, {"version": 5, "tags": ["x"]}),
            (3, "c", "insert", None, {"version": 1}),
            (
                4,
                "a",
                "supersede",
                {"version": 2, "superseded_by": None},
                {"version": 3, "superseded_by": "z"},
            ),
            (5, "b", "purge", {"version": 5, "tags": ["x"], "content": "kept text"}, None),
            (6, "c", "purge", {"version": 1, "content": "node"}, None),
        ]
    ]
    net = {e["target_id"]: e for e in _net_entries(rows)}
    assert set(net) == {"a", "b"}
    assert net["a"]["before"] == {"version": 1, "stale": False} and net["a"]["after"]["version"] == 3
    assert net["b"]["after"] is None
    assert net["b"]["before"] == {"version": 4, "tags": [], "content": "kept text"}


def test_a_sets_digest_is_of_its_ids_joined_read_from_their_buffers() -> None:
    import hashlib

    from engram_pipelines.changes.compose import joined_sha256

    ids = [f"id-{i}-é" for i in range(50)]
    whole = hashlib.sha256("".join(ids).encode()).hexdigest()
    # Chunked, sliced (a non-zero offset), large and view strings, an empty chunk: the same bytes.
    chunked = pa.chunked_array([pa.array(ids[:7]), pa.array([], pa.string()), pa.array(ids[7:])])
    sliced = pa.chunked_array([pa.array(["x", *ids[:20]]).slice(1), pa.array([*ids[20:], "y"]).slice(0, 30)])
    assert joined_sha256(chunked) == joined_sha256(sliced) == whole
    assert joined_sha256(pa.array(["x", *ids], pa.large_string()).slice(1)) == whole
    assert joined_sha256(pa.array(ids, pa.string_view())) == whole
    assert joined_sha256(pa.array([], pa.string())) == hashlib.sha256(b"").hexdigest()
    with pytest.raises(ValueError, match="null"):
        joined_sha256(pa.array(["a", None]))
