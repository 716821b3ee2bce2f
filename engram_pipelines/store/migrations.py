"""Versioned schema migrations, one list of statements per dialect and version.

A migration runs once, in a transaction, and is recorded in `schema_migrations`. New versions are appended;
a released version is never edited.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Dialect = Literal["sqlite", "postgres"]


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    sqlite: tuple[str, ...]
    postgres: tuple[str, ...]

    def statements(self, dialect: Dialect, *, pgvector: bool = False) -> list[str]:
        if dialect == "sqlite":
            return list(self.sqlite)
        embedding_type = "vector" if pgvector else "bytea"
        return [s.replace("{EMBEDDING}", embedding_type) for s in self.postgres]


_SQLITE_INITIAL = (
    """
    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        tier TEXT NOT NULL DEFAULT 'stm' CHECK (tier IN ('stm', 'ltm')),
        kind TEXT NOT NULL DEFAULT 'episodic' CHECK (kind IN ('episodic', 'semantic', 'summary', 'block')),
        content TEXT NOT NULL,
        embedding BLOB,
        embedding_model TEXT,
        embedded_content_sha TEXT,
        importance REAL NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
        score REAL,
        access_count INTEGER NOT NULL DEFAULT 0,
        last_accessed_at TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        version INTEGER NOT NULL DEFAULT 1,
        pinned INTEGER NOT NULL DEFAULT 0,
        zone TEXT NOT NULL DEFAULT 'active' CHECK (zone IN ('active', 'archived', 'purge_queue')),
        zone_since TEXT,
        superseded_by TEXT,
        stale INTEGER NOT NULL DEFAULT 0,
        tags TEXT NOT NULL DEFAULT '[]',
        metadata TEXT NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX memories_namespace ON memories (namespace)",
    """
    CREATE TABLE memory_links (
        namespace TEXT NOT NULL,
        src_id TEXT NOT NULL,
        dst_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        weight REAL NOT NULL DEFAULT 1.0,
        origin TEXT NOT NULL DEFAULT 'agent',
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        traversed_at TEXT,
        PRIMARY KEY (src_id, dst_id, kind)
    )
    """,
    "CREATE INDEX memory_links_dst ON memory_links (dst_id)",
    """
    CREATE TABLE audit_log (
        audit_id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        actor TEXT NOT NULL,
        change_set_id TEXT,
        change_id TEXT,
        target_kind TEXT NOT NULL,
        target_id TEXT NOT NULL,
        op TEXT NOT NULL,
        before TEXT,
        after TEXT
    )
    """,
    "CREATE INDEX audit_log_target ON audit_log (target_id)",
    "CREATE INDEX audit_log_change ON audit_log (change_set_id, change_id)",
    """
    CREATE TABLE change_sets (
        change_set_id TEXT PRIMARY KEY,
        created_at TEXT NOT NULL,
        as_of TEXT NOT NULL,
        job TEXT NOT NULL,
        review_class TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('proposed', 'approved', 'applied', 'reverted')),
        path TEXT NOT NULL,
        config_fingerprint TEXT NOT NULL,
        total INTEGER NOT NULL,
        counts TEXT NOT NULL DEFAULT '{}',
        approved_at TEXT,
        approved_by TEXT,
        applied_at TEXT,
        reverted_at TEXT
    )
    """,
    """
    CREATE TABLE change_ledger (
        change_id TEXT PRIMARY KEY,
        change_set_id TEXT NOT NULL,
        target_id TEXT NOT NULL,
        outcome TEXT NOT NULL,
        detail TEXT,
        at TEXT NOT NULL
    )
    """,
    "CREATE INDEX change_ledger_set ON change_ledger (change_set_id)",
    """
    CREATE VIEW recall_memories AS
        SELECT * FROM memories WHERE superseded_by IS NULL AND zone = 'active'
    """,
)

_POSTGRES_INITIAL = (
    """
    CREATE TABLE memories (
        id TEXT PRIMARY KEY,
        namespace TEXT NOT NULL,
        tier TEXT NOT NULL DEFAULT 'stm' CHECK (tier IN ('stm', 'ltm')),
        kind TEXT NOT NULL DEFAULT 'episodic' CHECK (kind IN ('episodic', 'semantic', 'summary', 'block')),
        content TEXT NOT NULL,
        embedding {EMBEDDING},
        embedding_model TEXT,
        embedded_content_sha TEXT,
        importance DOUBLE PRECISION NOT NULL DEFAULT 0.5 CHECK (importance >= 0 AND importance <= 1),
        score DOUBLE PRECISION,
        access_count BIGINT NOT NULL DEFAULT 0,
        last_accessed_at TIMESTAMPTZ,
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        version BIGINT NOT NULL DEFAULT 1,
        pinned BOOLEAN NOT NULL DEFAULT false,
        zone TEXT NOT NULL DEFAULT 'active' CHECK (zone IN ('active', 'archived', 'purge_queue')),
        zone_since TIMESTAMPTZ,
        superseded_by TEXT,
        stale BOOLEAN NOT NULL DEFAULT false,
        tags JSONB NOT NULL DEFAULT '[]',
        metadata JSONB NOT NULL DEFAULT '{}'
    )
    """,
    "CREATE INDEX memories_namespace ON memories (namespace)",
    """
    CREATE TABLE memory_links (
        namespace TEXT NOT NULL,
        src_id TEXT NOT NULL,
        dst_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        weight DOUBLE PRECISION NOT NULL DEFAULT 1.0,
        origin TEXT NOT NULL DEFAULT 'agent',
        created_at TIMESTAMPTZ NOT NULL,
        updated_at TIMESTAMPTZ NOT NULL,
        traversed_at TIMESTAMPTZ,
        PRIMARY KEY (src_id, dst_id, kind)
    )
    """,
    "CREATE INDEX memory_links_dst ON memory_links (dst_id)",
    """
    CREATE TABLE audit_log (
        audit_id BIGSERIAL PRIMARY KEY,
        at TIMESTAMPTZ NOT NULL,
        actor TEXT NOT NULL,
        change_set_id TEXT,
        change_id TEXT,
        target_kind TEXT NOT NULL,
        target_id TEXT NOT NULL,
        op TEXT NOT NULL,
        before JSONB,
        after JSONB
    )
    """,
    "CREATE INDEX audit_log_target ON audit_log (target_id)",
    "CREATE INDEX audit_log_change ON audit_log (change_set_id, change_id)",
    """
    CREATE TABLE change_sets (
        change_set_id TEXT PRIMARY KEY,
        created_at TIMESTAMPTZ NOT NULL,
        as_of TEXT NOT NULL,
        job TEXT NOT NULL,
        review_class TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('proposed', 'approved', 'applied', 'reverted')),
        path TEXT NOT NULL,
        config_fingerprint TEXT NOT NULL,
        total BIGINT NOT NULL,
        counts JSONB NOT NULL DEFAULT '{}',
        approved_at TIMESTAMPTZ,
        approved_by TEXT,
        applied_at TIMESTAMPTZ,
        reverted_at TIMESTAMPTZ
    )
    """,
    """
    CREATE TABLE change_ledger (
        change_id TEXT PRIMARY KEY,
        change_set_id TEXT NOT NULL,
        target_id TEXT NOT NULL,
        outcome TEXT NOT NULL,
        detail TEXT,
        at TIMESTAMPTZ NOT NULL
    )
    """,
    "CREATE INDEX change_ledger_set ON change_ledger (change_set_id)",
    """
    CREATE VIEW recall_memories AS
        SELECT * FROM memories WHERE superseded_by IS NULL AND zone = 'active'
    """,
)


def _ledger_by_target(dialect: Dialect) -> tuple[str, ...]:
    """Version 2: the ledger keyed by (change set, target, change id) and the audit log indexed by change set in
    write order.

    Both were keyed by the change id, a hash: every ledger row and every audit row of an apply landed on a
    random index page, so each batch of 1,000 changes dirtied ~2,000 pages more than it wrote rows, and the
    commit copied them all into the WAL. The apply writes each op's changes in target order, so ledger keys
    now arrive in order, and the audit log's change-set index grows at its end. Keyed per change set, a change
    that recurs on another night (same content, same id) also gets its own ledger row in each set.
    """
    at = "TEXT" if dialect == "sqlite" else "TIMESTAMPTZ"
    without_rowid = " WITHOUT ROWID" if dialect == "sqlite" else ""
    return (
        f"""
        CREATE TABLE change_ledger_v2 (
            change_set_id TEXT NOT NULL,
            target_id TEXT NOT NULL,
            change_id TEXT NOT NULL,
            outcome TEXT NOT NULL,
            detail TEXT,
            at {at} NOT NULL,
            PRIMARY KEY (change_set_id, target_id, change_id)
        ){without_rowid}
        """,
        "INSERT INTO change_ledger_v2 (change_set_id, target_id, change_id, outcome, detail, at) "
        "SELECT change_set_id, target_id, change_id, outcome, detail, at FROM change_ledger",
        "DROP TABLE change_ledger",
        "ALTER TABLE change_ledger_v2 RENAME TO change_ledger",
        "DROP INDEX audit_log_change",
        "CREATE INDEX audit_log_set ON audit_log (change_set_id, audit_id)",
    )


# A row is carried by a semantic node when a visible node derived from it (a `derived-from` link node -> row)
# holds its exact text: recall shows the node and not the same text twice. The node stands for the row only
# while both say the same (an agent's edit of the row brings it back) and while the node is visible (a node
# archived, superseded or removed brings its sources back). `m` is the recalled row. Part of migration 3: a
# change is a new migration, never an edit of this text.
CARRIED_BY_A_NODE = """EXISTS (
    SELECT 1 FROM memory_links l JOIN memories n ON n.id = l.src_id
    WHERE l.dst_id = m.id AND l.kind = 'derived-from'
      AND n.kind = 'semantic' AND n.namespace = m.namespace AND n.content = m.content
      AND n.superseded_by IS NULL AND n.zone = 'active' AND n.id <> m.id
)"""


def _recall_without_carried_rows() -> tuple[str, ...]:
    """Version 3: the recall view leaves out a row whose exact text a visible semantic node carries.

    A semantic node takes its most informative source's text, so recall showed that text twice, the node and
    its source (LoCoMo dev facts: 12% of top-10 slots were such near-copies after a night). The row is not
    changed or hidden by a write: the view reads the node's `derived-from` link, so nothing is lost and
    nothing needs reverting.
    """
    return (
        "DROP VIEW recall_memories",
        f"""
        CREATE VIEW recall_memories AS
            SELECT * FROM memories m
            WHERE m.superseded_by IS NULL AND m.zone = 'active' AND NOT {CARRIED_BY_A_NODE}
        """,
    )


def _pinned_rows_recall() -> tuple[str, ...]:
    """Version 4: a pinned row is in recall even when it is superseded (pinning makes a row visible).

    A pin is a guarantee that a row stays: pinned after a merge hid it, it stayed hidden. Archived pinned rows
    come back to Active through retention's next night; a supersede is not undone by a write, so the view shows
    the pinned row beside its canonical."""
    return (
        "DROP VIEW recall_memories",
        f"""
        CREATE VIEW recall_memories AS
            SELECT * FROM memories m
            WHERE (m.superseded_by IS NULL OR m.pinned) AND m.zone = 'active' AND NOT {CARRIED_BY_A_NODE}
        """,
    )


def _link_journal(dialect: Dialect) -> tuple[str, ...]:
    """Version 5: a journal of the links written, so a night's snapshot reads only the links written since the
    last one instead of the whole table (2.9M links after a first night at 1M memories: 27 s of a quiet night's
    40 s snapshot on 2026-12-02, read every night to find that nothing had changed).

    Triggers on `memory_links` record the key of every row inserted, updated or deleted, whoever writes it (the
    apply, a revert, an agent). A snapshot takes a mark before it reads and asks next night for the keys
    journaled from that mark on. SQLite serialises its writers, so the mark is the next sequence number.
    PostgreSQL commits in another order than it hands out sequence numbers, so each entry carries its
    transaction id and the mark is the oldest transaction still running when the snapshot began: every entry
    of a transaction that had not committed by then is read again the next night. `pruned_below` says which
    entries are gone (a reader whose mark is older reads the links whole); a TRUNCATE, which no row trigger
    sees, moves it past every earlier mark.
    """
    if dialect == "sqlite":
        key = "(src_id, dst_id, kind)"
        return (
            """
            CREATE TABLE link_journal (
                seq INTEGER PRIMARY KEY AUTOINCREMENT,
                src_id TEXT NOT NULL,
                dst_id TEXT NOT NULL,
                kind TEXT NOT NULL
            )
            """,
            "CREATE TABLE link_journal_state (pruned_below INTEGER NOT NULL)",
            "INSERT INTO link_journal_state (pruned_below) VALUES (0)",
            f"""
            CREATE TRIGGER link_journal_insert AFTER INSERT ON memory_links BEGIN
                INSERT INTO link_journal {key} VALUES (NEW.src_id, NEW.dst_id, NEW.kind);
            END
            """,
            f"""
            CREATE TRIGGER link_journal_update AFTER UPDATE ON memory_links BEGIN
                INSERT INTO link_journal {key} VALUES (OLD.src_id, OLD.dst_id, OLD.kind);
                INSERT INTO link_journal {key} VALUES (NEW.src_id, NEW.dst_id, NEW.kind);
            END
            """,
            f"""
            CREATE TRIGGER link_journal_delete AFTER DELETE ON memory_links BEGIN
                INSERT INTO link_journal {key} VALUES (OLD.src_id, OLD.dst_id, OLD.kind);
            END
            """,
        )
    return _postgres_journal("memory_links", "link_journal", ("src_id", "dst_id", "kind"))


def _memory_journal(dialect: Dialect) -> tuple[str, ...]:
    """Version 6: a journal of the memories written, as version 5's of the links, so a night's snapshot asks
    the store which rows to read again instead of scanning every row's change signature (id, version, access
    count, two timestamps: 5.7 s of a 97 s quiet night at 1M memories on 2026-12-03, 2.7 s of it in SQLite's
    row stepping).

    Every row inserted, updated (an agent's edit, access bookkeeping, the apply, a raw writer) or deleted is
    journaled by id; an id changed in place journals the old one too. Marks, transaction ids and
    `pruned_below` work as in the link journal."""
    if dialect == "sqlite":
        add = "INSERT INTO memory_journal (id) VALUES"
        return (
            "CREATE TABLE memory_journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL)",
            "CREATE TABLE memory_journal_state (pruned_below INTEGER NOT NULL)",
            "INSERT INTO memory_journal_state (pruned_below) VALUES (0)",
            f"CREATE TRIGGER memory_journal_insert AFTER INSERT ON memories BEGIN {add} (NEW.id); END",
            # One entry per update (an update is most of an apply's writes); the old id only when it changed.
            f"CREATE TRIGGER memory_journal_update AFTER UPDATE ON memories BEGIN {add} (NEW.id); END",
            f"""
            CREATE TRIGGER memory_journal_rekey AFTER UPDATE OF id ON memories WHEN OLD.id IS NOT NEW.id
            BEGIN {add} (OLD.id); END
            """,
            f"CREATE TRIGGER memory_journal_delete AFTER DELETE ON memories BEGIN {add} (OLD.id); END",
        )
    return _postgres_journal("memories", "memory_journal", ("id",))


def _postgres_journal(table: str, journal: str, key: tuple[str, ...]) -> tuple[str, ...]:
    """The PostgreSQL journal of `table`'s rows by `key` (versions 5 and 6). Statement-level triggers with
    transition tables: one INSERT ... SELECT per statement, not one per row (the apply writes in batches of
    thousands)."""
    columns = ", ".join(key)
    statements = [
        f"""
        CREATE TABLE {journal} (
            seq BIGSERIAL PRIMARY KEY,
            xid BIGINT NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
            {", ".join(f"{c} TEXT NOT NULL" for c in key)}
        )
        """,
        f"CREATE INDEX {journal}_xid ON {journal} (xid)",
        f"CREATE TABLE {journal}_state (pruned_below BIGINT NOT NULL)",
        f"INSERT INTO {journal}_state (pruned_below) VALUES (0)",
    ]
    for event, tables, rows in (
        ("INSERT", "NEW TABLE AS changed", f"SELECT {columns} FROM changed"),
        ("DELETE", "OLD TABLE AS changed", f"SELECT {columns} FROM changed"),
        (
            "UPDATE",
            "OLD TABLE AS old_rows NEW TABLE AS new_rows",
            f"SELECT {columns} FROM old_rows UNION SELECT {columns} FROM new_rows",
        ),
    ):
        name = f"{journal}_{event.lower()}"
        statements += [
            f"""
            CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                INSERT INTO {journal} ({columns}) {rows};
                RETURN NULL;
            END $$
            """,
            f"""
            CREATE TRIGGER {name} AFTER {event} ON {table} REFERENCING {tables}
                FOR EACH STATEMENT EXECUTE FUNCTION {name}()
            """,
        ]
    # A TRUNCATE, which no row trigger sees, counts as a prune past every earlier mark.
    return (
        *statements,
        f"""
        CREATE FUNCTION {journal}_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE {journal}_state SET pruned_below = pg_current_xact_id()::text::bigint + 1;
            RETURN NULL;
        END $$
        """,
        f"""
        CREATE TRIGGER {journal}_truncate AFTER TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION {journal}_truncate()
        """,
    )


# Version 7: the oldest memory found by one index seek. Every code location load and every `run` asks for it
# (where the daily partitions start, `partitions.start: auto`); without an index it scanned the whole table: 3.9 s
# of each command at 1M memories from a cold page cache, SQLite, 2026-12-06.
_CREATED_AT_INDEX = ("CREATE INDEX memories_created_at ON memories (created_at)",)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1, "memories, links, audit log, change sets, ledger, recall view", _SQLITE_INITIAL, _POSTGRES_INITIAL
    ),
    Migration(
        2,
        "ledger keyed by change set and target; audit log indexed by change set in write order",
        _ledger_by_target("sqlite"),
        _ledger_by_target("postgres"),
    ),
    Migration(
        3,
        "recall view leaves out a row whose exact text a visible semantic node derived from it carries",
        _recall_without_carried_rows(),
        _recall_without_carried_rows(),
    ),
    Migration(
        4, "a pinned row is in recall even when superseded", _pinned_rows_recall(), _pinned_rows_recall()
    ),
    Migration(
        5,
        "a journal of the links written, for snapshots that read only what changed",
        _link_journal("sqlite"),
        _link_journal("postgres"),
    ),
    Migration(
        6,
        "a journal of the memories written, for snapshots that ask which rows to read again",
        _memory_journal("sqlite"),
        _memory_journal("postgres"),
    ),
    Migration(
        7,
        "memories indexed by created_at: the oldest memory without a scan",
        _CREATED_AT_INDEX,
        _CREATED_AT_INDEX,
    ),
)

LATEST_VERSION = MIGRATIONS[-1].version
