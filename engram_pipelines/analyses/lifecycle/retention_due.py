"""Retention judged only where a move can happen tonight: each row's next due date, kept across nights.

Retention's legs are monotone in time while a row's inputs stay: an age or a time in a zone only grows, and a
decay score only falls (DECAY_SCHEMA's `decline_rate` bounds how fast). So a row's due date, the earliest instant
any leg can fire, is computed once from the night that judged it (`retention.judge_retention`) and holds until its
inputs change. A night judges only the rows that are due, new, or whose inputs differ from those they were dated
with, and carries every other row's date forward; those cannot move, so the moves are the ones a judgement of
every row gives (the tests hold the two equal over nights with writes, deletes, restores and merges).

A row's inputs are hashed into one 64-bit key: every column retention reads (`RULE_COLUMNS`), every column its
decay score is computed from (the content among them), and whether rows are merged into it (that comes from the
other rows' `superseded_by`). A changed row keeping its key needs a 64-bit collision (odds 2^-64 per change).
Everything is judged again when there is nothing kept, the kept dates are of another version or settings
(`Config.fingerprint`, which holds every decay and retention policy), or they were dated after tonight (a replay
of an earlier day: a date is a bound from the instant it was computed on, not before it).
Kept under <warehouse>/retention_due/ (`warehouse/kept.py`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from engram_pipelines.analyses.lifecycle.retention import MERGED_INTO, RULE_COLUMNS, judge_retention
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck
from engram_pipelines.warehouse.kept import read_kept, write_kept

# Bump when a leg, a due date, the key or a decay policy's formula changes: dates kept by another version are
# never read.
DUE_VERSION = 1
# What the keys hash: retention's columns and the one decay score input retention does not read itself (kind,
# importance, access, times, pinned and tags it does).
KEY_COLUMNS = [*RULE_COLUMNS, "content"]

KEYED_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("key", pa.uint64()),
        pa.field("due_s", pa.float64()),
    ]
)
_NIGHT_SCHEMA = pa.schema([pa.field("as_of_s", pa.float64(), nullable=False)])


@dataclass(frozen=True)
class DueRetention:
    """Tonight's moves and how many rows were judged to find them (all of them when nothing could be reused)."""

    moves: pa.Table
    judged: int


def row_keys(memories: pa.Table) -> pa.Table:
    """(id, key) of every row: the hash of its retention and decay inputs and of whether rows merge into it."""
    inputs = ", ".join(f"m.{c}" for c in KEY_COLUMNS if c != "id")
    with duck() as con:
        con.register("memories", memories.select(KEY_COLUMNS))
        return con.sql(
            f"""
            SELECT m.id, hash({inputs}, h.id IS NOT NULL)::UBIGINT AS key
            FROM memories m LEFT JOIN {MERGED_INTO} h USING (id)
            """
        ).to_arrow_table()


def retention_reusing(
    memories: pa.Table,
    scores: pa.Table,
    config: Config,
    as_of: dt.datetime,
    promoted: pa.Array | None,
    *,
    cache_root: Path,
) -> DueRetention:
    """Tonight's retention moves, judging only the rows that can move (see the module), and the due dates kept
    for the next night."""
    directory = cache_root / "retention_due"
    version = f"{DUE_VERSION}|{config.fingerprint()}"
    now = float(as_of.timestamp())
    kept = read_kept(directory, ["due", "night"], version)
    usable = kept is not None and kept[1].num_rows == 1 and kept[1]["as_of_s"][0].as_py() <= now
    with duck() as con:
        con.register("keys", row_keys(memories))
        con.register("kept", kept[0] if kept is not None and usable else KEYED_SCHEMA.empty_table())
        # Due, new, or changed since dated; a row kept without a date (it could not move) and unchanged is not.
        con.execute(
            f"""
            CREATE TEMP TABLE plan AS
            SELECT k.id, k.key, d.due_s AS kept_due, (d.id IS NULL OR d.key <> k.key OR d.due_s <= {now!r}) AS judge
            FROM keys k LEFT JOIN kept d USING (id)
            """
        )
        judged = con.sql("SELECT id FROM plan WHERE judge").to_arrow_table()["id"].combine_chunks()
        # Where most rows are judged anyway, every row is: a pass over all of them costs less than picking them.
        every = len(judged) > memories.num_rows // 2
        moves, due = judge_retention(
            memories, scores, config, as_of, promoted, only=None if every else judged, with_due=True
        )
        con.register("due", due)
        keyed = con.sql(
            f"""
            SELECT p.id, p.key, CASE WHEN p.judge OR {every} THEN n.due_s ELSE p.kept_due END AS due_s
            FROM plan p LEFT JOIN due n USING (id)
            """
        ).to_arrow_table()
    _write(directory, version, now, keyed.cast(KEYED_SCHEMA))
    return DueRetention(moves=moves, judged=memories.num_rows if every else len(judged))


def _write(directory: Path, version: str, now: float, keyed: pa.Table) -> None:
    write_kept(
        directory, {"due": keyed, "night": pa.table({"as_of_s": [now]}, schema=_NIGHT_SCHEMA)}, version
    )
