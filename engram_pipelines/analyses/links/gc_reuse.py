"""Link garbage collection judged only where last night's verdicts can have changed.

Every rule of `gc.py` judges a link by the link itself, its twin (the same key the other way round, for the
`duplicate` rule), its two endpoints' rows (present or quarantined, namespace, zone) and the as-of instant (an
`orphan` must be older than it). So a link none of whose parts was written since the last computation keeps
its verdict, and a night judges only

- the links the snapshot read again (written since: new, changed or deleted) and the twins of those,
- the links of a memory it read again (written, deleted or quarantined since),
- the links created at or after the last computation's instant (the `orphan` rule's clock), and
- the links last night found (a finding that did not land, or whose twin went, is judged again),

and the others are not findings, as they were not last night. What was written comes from the snapshot
(`warehouse/written.py`); the findings and the snapshot they were computed on are kept under
<warehouse>/gc_findings/. Everything is judged when that is not last night's snapshot (a night skipped, a snapshot
taken again, a full read), when nothing is kept or it is of another version, or when the kept instant is later
than tonight's (a replay of an earlier day). At 1M memories and 2.86M links a quiet night judged 0.68 s of
links whole (2026-12-07); the tests hold the findings equal to a judgement of every link over nights of
writes, deletes, restores and quarantines.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.links.gc import LINK_COLUMNS, garbage_links
from engram_pipelines.analyses.result import AnalysisResult
from engram_pipelines.core.duck import duck
from engram_pipelines.core.records import LINK_KEY
from engram_pipelines.core.timestamps import format_timestamp
from engram_pipelines.warehouse.kept import read_kept, write_kept
from engram_pipelines.warehouse.written import Written

# Bump when a rule or what it reads changes: findings kept by another version are never carried over.
KEPT_VERSION = "1"
_NIGHT_SCHEMA = pa.schema([pa.field("at_s", pa.float64(), nullable=False), pa.field("marks", pa.string())])


@dataclass(frozen=True)
class GcResult:
    result: AnalysisResult
    judged: int  # links judged tonight (all of them when nothing was carried over)


def gc_reusing(
    memories: pa.Table,
    links: pa.Table,
    at: dt.datetime,
    *,
    quarantined: pa.Table,
    written: Written | None,
    cache_root: Path,
) -> GcResult:
    """Tonight's findings, judging only the links whose verdict can have changed (see the module); the
    findings are kept for the next night."""
    directory = cache_root / "gc_findings"
    kept = read_kept(directory, ["findings", "night"], KEPT_VERSION)
    judged = None
    if kept is not None and written is not None and written.incremental:
        findings, night = kept
        carried = (
            night.num_rows == 1
            and night["marks"][0].as_py() == written.since
            and night["at_s"][0].as_py() <= at.timestamp()
        )
        if carried:
            earlier = dt.datetime.fromtimestamp(night["at_s"][0].as_py(), dt.UTC)
            judged = _to_judge(links, written, findings, earlier)
    result = garbage_links(memories, links, at, quarantined=quarantined, judged=judged)
    night = pa.table(
        {"at_s": [at.timestamp()], "marks": [written.marks if written is not None else None]},
        schema=_NIGHT_SCHEMA,
    )
    write_kept(directory, {"findings": result.table, "night": night}, KEPT_VERSION)
    return GcResult(result, links.num_rows if judged is None else judged.num_rows)


def _to_judge(links: pa.Table, written: Written, findings: pa.Table, earlier: dt.datetime) -> pa.Table:
    """The links whose verdict can differ from last night's (see the module)."""
    key = list(LINK_KEY)
    with duck() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("l", links.select(LINK_COLUMNS))
        con.register("ids", pa.table({"id": written.ids}))
        keys = [written.link_keys.select(key), findings.select(key)]
        con.register("keys", pa.concat_tables(keys, promote_options="permissive"))
        return con.sql(
            f"""
            WITH touched AS (
                SELECT src_id, dst_id, kind FROM keys UNION SELECT dst_id, src_id, kind FROM keys
            )
            SELECT l.* FROM l
            WHERE l.created_at >= TIMESTAMPTZ '{format_timestamp(earlier)}'
               OR l.src_id IN (SELECT id FROM ids) OR l.dst_id IN (SELECT id FROM ids)
               OR EXISTS (SELECT 1 FROM touched t
                          WHERE t.src_id = l.src_id AND t.dst_id = l.dst_id AND t.kind = l.kind)
            ORDER BY l.namespace, l.src_id, l.dst_id, l.kind
            """
        ).to_arrow_table()
