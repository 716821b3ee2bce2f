"""Retention zones (seed 001): Active -> Archived -> PurgeQueue -> purged, each step with its grace period.

- Active -> Archived, by one of three legs: decay score below `archive_score_threshold` and older than
  `archive_older_than_days` (seed 000's prune, which archives and never deletes); or older than
  `archive_age_days`, never accessed and of importance below `archive_max_importance` (seed 004's criteria,
  read as one rule: its own sample report archives 3 of 1,247 memories); or tagged `deprecated`.
- A row whose importance is at or above `protect_importance` is never archived by age or score alone (a
  writer said it matters: "Tom is lactose intolerant", importance 0.8, was archived on day one).
- A canonical that rows were merged into is never archived by age or score alone: it holds their facts too.
- Age runs from the latest of the row's creation and its promotions: a promotion restarts the clock. A row
  tonight's promotions move is not archived tonight (one write never both promotes and archives a row).
- Archived -> PurgeQueue: archived for longer than `archive_grace_days`.
- PurgeQueue -> purged: queued for longer than `purge_grace_days`; the apply keeps a pre-image for `restore`.
- Archived rows accessed since they were archived come back to Active (an access is a signal).
- Pinned and `block` rows are exempt from every step; a pinned row found outside Active is brought back.
- Superseded rows are left where they are: a merge is reversible because its losers are never deleted.

Every leg is monotone in time while a row's inputs stay, so each judged row also gets its next due date
(`_due_sql`); a night can judge only the rows due or changed since (`retention_due.py`).
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc

from engram_pipelines.changes.intents import intents_from_sql
from engram_pipelines.config.model import Config
from engram_pipelines.core.duck import duck

RETENTION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("from_zone", pa.string(), nullable=False),
        pa.field("to_zone", pa.string(), nullable=False),  # archived | purge_queue | purged | active
        pa.field("rule", pa.string(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("score", pa.float64()),
    ]
)


# The ids rows were merged into (a canonical holding their facts), as a relation over `memories`; the due dates'
# keys read it too (`retention_due.row_keys`): a merge into a row changes what retention may do to it.
MERGED_INTO = "(SELECT DISTINCT superseded_by AS id FROM memories WHERE superseded_by IS NOT NULL)"


def _legs_sql(config: Config, group: str, as_of: dt.datetime, only: str | None) -> str:
    """The rows of `group`'s namespaces retention judges (of `only`'s ids, where given) with every leg's inputs
    and outcome: a WITH clause for the moves and the due dates to select from."""
    r = config.retention
    now = f"TIMESTAMPTZ '{as_of.isoformat()}'"
    # A promotion restarts the row's clock: the age the archive legs read runs from the latest of its creation
    # and its promotions (tier or kind), so a row just promoted is not archived for its age the next night.
    clock = """greatest(m.created_at,
        coalesce(try_cast(json_extract_string(m.metadata, '$.promotion.at') AS TIMESTAMPTZ), m.created_at),
        coalesce(try_cast(json_extract_string(m.metadata, '$.kindPromotion.at') AS TIMESTAMPTZ), m.created_at))"""
    deprecated = r.deprecated_tag.replace("'", "''")
    judged = f"SEMI JOIN {only} o ON o.id = m.id" if only else ""
    return f"""
    WITH m AS (
        SELECT m.*, s.score AS decay_score, s.decline_rate, epoch({now} - {clock}) / 86400.0 AS age,
            epoch({clock}) AS clock_s, epoch(coalesce(zone_since, updated_at)) AS since_s,
            list_contains(from_json(m.tags, '["VARCHAR"]'), '{deprecated}') AS deprecated,
            -- A writer's high importance is never overruled by age or score alone (the deprecated tag still is).
            m.importance < {r.protect_importance} AS unprotected,
            p.id IS NOT NULL AS promoted,
            h.id IS NOT NULL AS holds_merged
        FROM memories m SEMI JOIN {group} g ON g.namespace = m.namespace {judged}
        LEFT JOIN scores s USING (id)
        LEFT JOIN promoted p USING (id)
        -- A canonical that rows were merged into holds their facts too: archived for its age or score, the
        -- fact would be visible in neither row.
        LEFT JOIN {MERGED_INTO} h USING (id)
        WHERE m.kind <> 'block' AND m.superseded_by IS NULL
    ),
    legs AS (
        SELECT *,
            -- seed 000's prune, as an archive
            unprotected AND NOT holds_merged AND decay_score < {r.archive_score_threshold}
                AND age > {r.archive_older_than_days} AS low_score,
            -- seed 004's criteria read as one rule: old, never accessed and unimportant
            unprotected AND NOT holds_merged AND age > {r.archive_age_days} AND access_count = 0
                AND importance < {r.archive_max_importance} AS unused,
            -- One write never both promotes and archives a row: tonight's promotion wins.
            zone = 'active' AND NOT promoted AS may_archive
        FROM m
    )
    """


def _moves_sql(config: Config, as_of: dt.datetime) -> str:
    """The moves among the judged rows, selected from `legs` (`_legs_sql`)."""
    r = config.retention
    now = f"TIMESTAMPTZ '{as_of.isoformat()}'"
    in_zone = f"epoch({now} - coalesce(zone_since, updated_at)) / 86400.0"
    deprecated = r.deprecated_tag.replace("'", "''")
    return f"""
    SELECT id, namespace, zone AS from_zone,
        CASE
            WHEN pinned AND zone <> 'active' THEN 'active'
            WHEN zone = 'archived' AND last_accessed_at > zone_since THEN 'active'
            WHEN zone = 'active' THEN 'archived'
            WHEN zone = 'archived' THEN 'purge_queue'
            ELSE 'purged' END AS to_zone,
        CASE
            WHEN pinned AND zone <> 'active' THEN 'pinned'
            WHEN zone = 'archived' AND last_accessed_at > zone_since THEN 'accessed'
            WHEN zone = 'active' AND deprecated THEN 'deprecated'
            WHEN zone = 'active' AND low_score THEN 'low_score'
            WHEN zone = 'active' THEN 'unused'
            WHEN zone = 'archived' THEN 'archive_grace'
            ELSE 'purge_grace' END AS rule,
        CASE
            WHEN pinned AND zone <> 'active' THEN 'pinned: back to active'
            WHEN zone = 'archived' AND last_accessed_at > zone_since THEN 'accessed since it was archived'
            WHEN zone = 'active' AND deprecated THEN 'tagged {deprecated}'
            WHEN zone = 'active' AND low_score
                THEN 'score ' || round(decay_score, 4) || ' < {r.archive_score_threshold} and ' || round(age, 1)
                     || ' days old (> {r.archive_older_than_days})'
            WHEN zone = 'active' THEN 'never accessed in ' || round(age, 1) || ' days (> {r.archive_age_days}), '
                || 'importance ' || round(importance, 3) || ' < {r.archive_max_importance}'
            WHEN zone = 'archived' THEN 'archived ' || round({in_zone}, 1)
                || ' days (> grace {r.archive_grace_days})'
            ELSE 'queued ' || round({in_zone}, 1) || ' days (> grace {r.purge_grace_days})'
            END AS reason,
        decay_score AS score
    FROM legs
    WHERE (pinned AND zone <> 'active')
        OR (NOT pinned AND (
            (zone = 'archived' AND last_accessed_at > zone_since)
            OR (may_archive AND (deprecated OR low_score OR unused))
            OR (zone = 'archived' AND {in_zone} > {r.archive_grace_days})
            OR (zone = 'purge_queue' AND {in_zone} > {r.purge_grace_days})))
    """


def leaving_active(moves: pa.Table) -> frozenset[str]:
    """Rows these moves take out of Active. They take no part in a merge of the same run: a merge into (or out
    of) one would hide a visible row behind an archived canonical once both change sets land."""
    leaving = pc.and_(pc.equal(moves["from_zone"], "active"), pc.not_equal(moves["to_zone"], "active"))
    return frozenset(moves.filter(leaving)["id"].to_pylist())


# What retention reads of a snapshot row (the due dates' keys hash these, `retention_due.py`).
RULE_COLUMNS = [
    "id",
    "namespace",
    "kind",
    "zone",
    "zone_since",
    "updated_at",
    "created_at",
    "last_accessed_at",
    "access_count",
    "pinned",
    "tags",
    "superseded_by",
    "importance",
    "metadata",
]

DUE_SCHEMA = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("due_s", pa.float64())])

# Due dates are set this much early: a row judged a little before it can move costs a few rows' work, one judged
# after it moved (float rounding in the score's logarithm, the legs' strict comparisons) would miss a move.
_DUE_MARGIN_S = 3600.0


def _due_sql(config: Config, as_of: dt.datetime) -> str:
    """The earliest instant (epoch seconds) each judged row of `legs` (`_legs_sql`) can move while its inputs
    stay, NULL for never: the
    legs are monotone in time (ages and times in a zone only grow, a score only falls while its inputs stay, see
    DECAY_SCHEMA's decline_rate), so each is dated from its own threshold. A row that moves tonight (or is held
    back only by tonight's promotion) is due now."""
    r = config.retention
    now = float(as_of.timestamp())
    day = 86400.0
    threshold = r.archive_score_threshold
    # The score leg's crossing: now if the score is already below, else no sooner than the bound of its fall.
    crossing = (
        f"""CASE WHEN decay_score IS NULL THEN NULL WHEN decay_score < {threshold!r} THEN {now!r}
            WHEN decline_rate > 0 THEN {now!r} + ln(decay_score / {threshold!r}) / decline_rate * {day!r} END"""
        if threshold > 0
        else "NULL"
    )
    return f"""
    SELECT id, CASE
            WHEN pinned THEN CASE WHEN zone <> 'active' THEN {now!r} END
            WHEN zone = 'archived' THEN CASE WHEN last_accessed_at > zone_since THEN {now!r}
                ELSE since_s + {r.archive_grace_days * day!r} END
            WHEN zone = 'purge_queue' THEN since_s + {r.purge_grace_days * day!r}
            WHEN zone = 'active' THEN least(
                CASE WHEN deprecated THEN {now!r} END,
                CASE WHEN unprotected AND NOT holds_merged
                    THEN CASE WHEN ({crossing}) IS NOT NULL
                        THEN greatest(clock_s + {r.archive_older_than_days * day!r}, {crossing}) END END,
                CASE WHEN unprotected AND NOT holds_merged AND access_count = 0
                    AND importance < {r.archive_max_importance} THEN clock_s + {r.archive_age_days * day!r} END)
            END - {_DUE_MARGIN_S!r} AS due_s
    FROM legs
    """


def judge_retention(
    memories: pa.Table,
    scores: pa.Table,
    config: Config,
    as_of: dt.datetime,
    promoted: pa.Array | None = None,
    *,
    only: pa.Array | None = None,
    with_due: bool = False,
) -> tuple[pa.Table, pa.Table | None]:
    """The zone transitions due as of `as_of` among the rows of `only` (every row where None), and with
    `with_due` the due date of each judged row retention could ever move (DUE_SCHEMA, by id; one absent can
    never move while its inputs stay). `scores`: the same instant's decay table."""
    with duck() as con:
        con.register("memories", memories.select(RULE_COLUMNS))
        con.register("scores", scores.select(["id", "score", "decline_rate"]))
        con.register(
            "promoted", pa.table({"id": promoted if promoted is not None else pa.array([], pa.string())})
        )
        subset = None
        if only is not None:
            con.register("judged_ids", pa.table({"id": only}))
            subset = "judged_ids"
        namespaces = [r[0] for r in con.execute("SELECT DISTINCT namespace FROM memories").fetchall()]
        moves, due = [], []
        for index, (effective, group) in enumerate(config.namespace_groups(namespaces, "retention")):
            con.register(f"group_{index}", pa.table({"namespace": group}))
            legs = _legs_sql(effective, f"group_{index}", as_of, subset)
            if not with_due:
                moves.append(con.sql(legs + _moves_sql(effective, as_of)).to_arrow_table())
                continue
            # The legs once for both: computed twice, the due dates cost 80% of the moves again (1M rows).
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE legs AS {legs} SELECT * EXCLUDE (metadata, tags) FROM legs"
            )
            moves.append(con.sql(_moves_sql(effective, as_of)).to_arrow_table())
            due.append(con.sql(_due_sql(effective, as_of)).to_arrow_table())
        table = (
            pa.concat_tables([p.cast(RETENTION_SCHEMA) for p in moves]).sort_by("id")
            if moves
            else RETENTION_SCHEMA.empty_table()
        )
        if not with_due:
            return table, None
        dated = pa.concat_tables([d.cast(DUE_SCHEMA) for d in due]) if due else DUE_SCHEMA.empty_table()
        return table, dated.filter(pc.is_valid(dated["due_s"]))


def retention_moves(
    memories: pa.Table,
    scores: pa.Table,
    config: Config,
    as_of: dt.datetime,
    promoted: pa.Array | None = None,
) -> pa.Table:
    """Every zone transition due as of `as_of`, with its rule and reason; `promoted`: the ids tonight's
    promotions move (never archived in the same night)."""
    return judge_retention(memories, scores, config, as_of, promoted)[0]


def retention_intents(moves: pa.Table) -> pa.Table:
    with duck() as con:
        con.register("moves", moves)
        return intents_from_sql(
            con,
            """
            SELECT namespace, 'memory' AS target_kind, id AS target_id,
                CASE WHEN to_zone = 'purged' THEN 'purge' ELSE 'move_zone' END AS op,
                CASE WHEN to_zone = 'purged' THEN '{}' ELSE to_json({'from': from_zone, 'to': to_zone}) END AS params,
                reason, to_json({'decay_score': score, 'rule': 'retention:' || rule}) AS evidence,
                'retention' AS source, 'auto' AS review_class, NULL AS cluster_id
            FROM moves
            """,
        )
