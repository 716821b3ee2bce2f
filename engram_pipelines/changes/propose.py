"""Turn one partition's proposals (every analysis's intents) into stored change sets."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.changes.compose import SNAPSHOT_COLUMNS, composed_parts, namespace_ranges
from engram_pipelines.changes.guard import hold_for_review
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.changes.registry import register_change_set
from engram_pipelines.changes.spool import spool_change_sets
from engram_pipelines.changes.waiting import waiting_sets, without_waiting
from engram_pipelines.config.model import Config
from engram_pipelines.config.switches import switched_intents
from engram_pipelines.core.timestamps import end_of_day, utc_now
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.warehouse import shared_reads
from engram_pipelines.warehouse.tables import Warehouse


def propose_change_sets(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    job: str,
    sources: list[str],
    config: Config,
) -> tuple[dict[str, ProposedSet], list[dict]]:
    """(review class -> the set of the proposals of `sources`, written and registered; what the volume guard
    held for review: `guard.hold_for_review`). The held set's counts record them as `held_for_review`, beside
    `waiting_in`: per earlier set, the held changes that wait there (`waiting.without_waiting`)."""
    # The analyses' shared reads (the links, the decay scores) are not read again tonight.
    shared_reads.forget()
    # One read of the snapshot serves the guard (namespaces, zones) and compose (the rows it folds).
    memories = warehouse.read_table("memories", as_of, columns=[*SNAPSHOT_COLUMNS, "namespace"])
    intents, held = guarded_intents(warehouse, as_of, sources, config, memories)
    earlier = waiting_sets(store, warehouse.root, as_of, job=job, config=config)
    intents, waiting = without_waiting(intents, memories, earlier)
    held = [_with_waiting(entry, waiting) for entry in held]
    if job == "consolidate":
        # The consolidate job proposes what waits for review; the auto class is the nightly's to apply (a
        # consolidate's auto set was left proposed forever).
        intents = intents.filter(pc.not_equal(intents["review_class"], "auto"))
    # Each range of the intents is cut as it is composed, and its changes let go once they are spooled to the
    # sets' files (`spool`); the intents and the snapshot are held until the last range is composed.
    parts = composed_parts(namespace_ranges(intents), memories, at=end_of_day(as_of))
    del intents, memories
    spooled = spool_change_sets(parts, warehouse, as_of=as_of, job=job)
    now = utc_now()
    notes = {"held": _held_notes(held, waiting) or {}}
    return {
        klass: ProposedSet(
            # Where this night wrote it (a re-run's record may name another warehouse's copy).
            dataclasses.replace(
                register_change_set(
                    store,
                    written.path,
                    written.meta,
                    {**written.counts, **notes.get(klass, {})},
                    created_at=now,
                    config_fingerprint=config.fingerprint(),
                ),
                path=str(written.path.resolve()),
            ),
            written.by_namespace_op,
        )
        for klass, written in spooled.items()
    }, held


@dataclasses.dataclass(frozen=True)
class ProposedSet:
    """A registered set and its changes per namespace and op (`registry.ops_by`), counted as it was written."""

    record: ChangeSetRecord
    by_namespace_op: dict[str, dict[str, int]]


def _held_notes(held: list[dict], waiting: list[dict]) -> dict | None:
    """What the held set's counts add: the guard's entries and how many held changes wait in each earlier set
    (`waiting.without_waiting`) rather than in this one."""
    if not held:
        return None
    return {"held_for_review": held, **({"waiting_in": _per_set(waiting)} if waiting else {})}


def _with_waiting(entry: dict, waiting: list[dict]) -> dict:
    """A guard entry, its message naming the earlier sets where its namespace's held changes (for "*", the
    night's) wait."""
    per_set = _per_set([w for w in waiting if entry["namespace"] in ("*", w["namespace"])])
    if not per_set:
        return entry
    said = ", ".join(f"{n:,} in {change_set_id}" for change_set_id, n in per_set.items())
    return {**entry, "message": f"{entry['message']}; waiting already, not proposed again: {said}"}


def _per_set(waiting: list[dict]) -> dict[str, int]:
    per_set: dict[str, int] = {}
    for entry in waiting:
        per_set[entry["change_set_id"]] = per_set.get(entry["change_set_id"], 0) + entry["changes"]
    return dict(sorted(per_set.items()))


def guarded_intents(
    warehouse: Warehouse,
    as_of: dt.date,
    sources: list[str],
    config: Config,
    memories: pa.Table | None = None,
) -> tuple[pa.Table, list[dict]]:
    """The night's intents through the switches and the volume guard (`guard.hold_for_review`), and what it
    held. `memories`: the snapshot with at least id, namespace, zone and superseded_by (read if not given)."""
    if memories is None:
        memories = warehouse.read_table(
            "memories", as_of, columns=["id", "namespace", "zone", "superseded_by"]
        )
    return hold_for_review(proposed_intents(warehouse, as_of, sources, config), memories, config.review)


def proposed_intents(
    warehouse: Warehouse,
    as_of: dt.date,
    sources: list[str],
    config: Config,
    columns: list[str] | None = None,
) -> pa.Table:
    """Every analysis's proposals (all or `columns` of INTENT_SCHEMA), each through its switch
    (`switches.switched_intents`), read one source at a time (all read first, then switched, a first night at
    1M held its 1.6 GB of intents twice)."""
    schema = INTENT_SCHEMA if columns is None else pa.schema([INTENT_SCHEMA.field(c) for c in columns])
    tables = [
        switched_intents(config, source, table.cast(schema))
        for source in sources
        if (table := warehouse.read_proposal(as_of, source, columns)) is not None
    ]
    return pa.concat_tables(tables) if tables else schema.empty_table()
