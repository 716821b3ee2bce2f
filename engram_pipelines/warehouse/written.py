"""What an incremental snapshot found written since the snapshot before it: the `written` partition.

The snapshot reads again only the memories and links the store's journals name (`ingest/snapshot.py`); it keeps
their ids and keys here, so that an analysis whose verdicts are local (a link's depends on the link, its twin and
its two endpoints) can judge only what those writes can have changed and carry last night's verdicts over for
the rest (`analyses/links/gc_reuse.py`).

Each partition names the snapshot it was taken as (`marks`: the journals' marks it read up to) and the one its
rows are relative to (`since`: that snapshot's marks; empty when the memories or the links were read whole, so
nothing can be carried over). A result computed on snapshot S may be carried to tonight's only when tonight's
`since` is S's `marks`: a snapshot taken again for the same day has new marks.

The ids and keys are a superset of what changed: a row the journal names was written, but maybe to the value it
had (an access, a no-op edit), and a row written while the snapshot read is named again the next night.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from engram_pipelines.core.records import LINK_KEY
from engram_pipelines.warehouse.tables import Warehouse

TABLE = "written"
SCHEMA = pa.schema(
    [
        pa.field("id", pa.string()),  # a memory's (null on a link's row)
        pa.field("src_id", pa.string()),  # a link's key (null on a memory's row)
        pa.field("dst_id", pa.string()),
        pa.field("kind", pa.string()),
    ]
)


@dataclass(frozen=True)
class Written:
    """The memory ids and link keys (src_id, dst_id, kind) written since the snapshot `since` names."""

    ids: pa.Array
    link_keys: pa.Table
    marks: str
    since: str  # "" when nothing can be carried over

    @property
    def incremental(self) -> bool:
        return bool(self.since)


def marks_text(memories_mark: int, links_mark: int) -> str:
    return json.dumps({"links": links_mark, "memories": memories_mark}, sort_keys=True)


def write_written(
    warehouse: Warehouse,
    as_of: dt.date,
    *,
    ids: pa.Array | None,
    link_keys: pa.Table | None,
    marks: str,
    since: str | None,
) -> None:
    """`ids`, `link_keys`: None where that table was read whole (then `since` is ignored: nothing carries)."""
    whole = ids is None or link_keys is None or not since
    memory_rows = 0 if ids is None else len(ids)
    none = pa.nulls(memory_rows, pa.string())
    parts = [pa.table([ids if ids is not None else none, none, none, none], schema=SCHEMA)]
    if link_keys is not None and link_keys.num_rows:
        keys = link_keys.select(list(LINK_KEY))
        parts.append(
            pa.table(
                [
                    pa.nulls(keys.num_rows, pa.string()),
                    *(keys[c].cast(pa.string()) for c in keys.column_names),
                ],
                schema=SCHEMA,
            )
        )
    table = pa.concat_tables(parts).replace_schema_metadata({"marks": marks, "since": "" if whole else since})
    warehouse.write_table(TABLE, as_of, table)


def read_written(warehouse: Warehouse, as_of: dt.date) -> Written | None:
    """The partition's record, or None where there is none (a warehouse of an earlier release)."""
    if not warehouse.has_table(TABLE, as_of):
        return None
    path = warehouse.table_path(TABLE, as_of)
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    memory = pc.is_valid(table["id"])
    return Written(
        ids=table["id"].filter(memory).combine_chunks(),
        link_keys=table.filter(pc.invert(memory)).select(list(LINK_KEY)),
        marks=meta.get(b"marks", b"").decode(),
        since=meta.get(b"since", b"").decode(),
    )
