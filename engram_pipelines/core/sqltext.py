"""Text spliced into DuckDB SQL: configuration values (cue words, tags, thresholds) that become literals, and
column names that become identifiers."""

from __future__ import annotations


def quoted(text: str) -> str:
    """`text` as a SQL string literal (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"


def identifier(name: str) -> str:
    """`name` as a SQL identifier (double quotes doubled): a column a caller names, never spliced bare."""
    return '"' + name.replace('"', '""') + '"'
