"""Text spliced into DuckDB SQL: configuration values (cue words, tags, thresholds) that become literals."""

from __future__ import annotations


def quoted(text: str) -> str:
    """`text` as a SQL string literal (single quotes doubled)."""
    return "'" + text.replace("'", "''") + "'"
