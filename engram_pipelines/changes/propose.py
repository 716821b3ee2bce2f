"""Turn one partition's proposals (every analysis's intents) into stored change sets."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.changes.compose import SNAPSHOT_COLUMNS, compose_ranges, namespace_ranges
from engram_pipelines.changes.guard import hold_for_review
from engram_pipelines.changes.intents import INTENT_SCHEMA
from engram_pipelines.changes.registry import store_change_set
from engram_pipelines.config.model import Config
from engram_pipelines.config.switches import switched_intents
from engram_pipelines.core.timestamps import end_of_day, utc_now
from engram_pipelines.store import ChangeSetRecord, Store
from engram_pipelines.warehouse.tables import Warehouse


def propose_change_sets(
    store: Store,
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    job: str,
    sources: list[str],
    config: Config,
) -> tuple[dict[str, tuple[ChangeSetRecord, pa.Table]], list[dict]]:
    """(review class -> (registered record, change table) for the proposals of `sources`, what the volume
    guard held for review: `guard.hold_for_review`; recorded on the gated set's counts as `held_for_review`)."""
    # One read of the snapshot serves the guard (namespaces, zones) and compose (the rows it folds).
    memories = warehouse.read_table("memories", as_of, columns=[*SNAPSHOT_COLUMNS, "namespace"])
    intents, held = guarded_intents(warehouse, as_of, sources, config, memories)
    if job == "consolidate":
        # The consolidate job proposes what waits for review; the auto class is the nightly's to apply (a
        # consolidate's auto set was left proposed forever).
        intents = intents.filter(pc.not_equal(intents["review_class"], "auto"))
    # Split, then let go: compose frees each range of the intents once it is composed.
    ranges = namespace_ranges(intents)
    del intents
    sets = compose_ranges(ranges, memories, as_of=as_of, at=end_of_day(as_of), job=job)
    now = utc_now()
    return {
        klass: (
            store_change_set(
                store,
                warehouse,
                table,
                created_at=now,
                config_fingerprint=config.fingerprint(),
                notes={"held_for_review": held} if klass == "held" and held else None,
            ),
            table,
        )
        for klass, table in sets.items()
    }, held


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
