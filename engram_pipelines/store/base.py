"""The live store behind one small interface; SQLite and PostgreSQL differ only in the dialect hooks.

`Store` is built in layers, each in its own module:
- core.py: the connection, the dialect hooks, transactions, the schema, streamed reads for snapshots;
- changelog.py: the change-set registry, the apply ledger and the audit log;
- agents.py: the agents' own API (get, write, CAS update, access bookkeeping, pin, recall) and operator writes;
- writes.py: the apply's set-based CAS primitives (one transaction per batch: lock or check, pre-image to the
  audit log, write, ledger) and the exact reverts.
"""

from __future__ import annotations

from engram_pipelines.store.writes import CasWrites


class Store(CasWrites):
    """A live memory store. Use as a context manager or call close()."""
