"""`import`: a JSON Lines corpus into the live store. Valid lines land; bad lines go to a rejects file."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_pipelines.core.progress import Progress, SilentProgress
from engram_pipelines.ingest.parse import Reject, parse_jsonl, write_rejects
from engram_pipelines.store import Store

REJECT_SAMPLES = 50


@dataclass
class ImportSummary:
    path: str
    lines_read: int = 0
    imported: int = 0
    already_present: int = 0
    rejected_lines: int = 0
    rejects_path: str | None = None
    reject_samples: list[Reject] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "lines_read": self.lines_read,
            "imported": self.imported,
            "already_present": self.already_present,
            "rejected_lines": self.rejected_lines,
            "rejects_path": self.rejects_path,
            "rejects": [{"line": r.line, "field": r.field, "reason": r.reason} for r in self.reject_samples],
        }


def import_jsonl(
    store: Store,
    path: Path,
    *,
    default_namespace: str | None,
    embedding_dim: int,
    rejects_path: Path,
    progress: Progress | None = None,
    source_format: str = "engram",
) -> ImportSummary:
    """Import `path`; bad lines go to `rejects_path`, which is replaced only at the end and only when there are
    any (written beside it first): the input is never touched, whatever `rejects_path` is."""
    if rejects_path.resolve() == path.resolve():
        raise ValueError(
            f"--rejects {rejects_path} is the input file: name another file for the rejected lines"
        )
    progress = progress or SilentProgress()
    summary = ImportSummary(path=str(path))
    partial = rejects_path.with_name(rejects_path.name + ".partial")
    partial.unlink(missing_ok=True)  # our own leftover from an interrupted import
    progress.start(f"import {path.name}", None)

    def existing(ids: Sequence[str]) -> dict[str, str]:
        return {i: row["namespace"] for i, row in store.read_memories(ids).items()}

    for result in parse_jsonl(
        path,
        default_namespace=default_namespace,
        embedding_dim=embedding_dim,
        existing=existing,
        source_format=source_format,
    ):
        rows = result.rows.to_pylist()
        inserted = store.insert_memories(rows)
        summary.lines_read += result.lines_read
        summary.imported += inserted
        summary.already_present += len(rows) - inserted
        summary.rejected_lines += result.rejected_lines
        if result.rejects:
            write_rejects(result.rejects, partial, append=True)
            room = REJECT_SAMPLES - len(summary.reject_samples)
            summary.reject_samples.extend(result.rejects[: max(room, 0)])
        progress.advance(result.lines_read)
    progress.finish()
    if summary.rejected_lines:
        partial.replace(rejects_path)
        summary.rejects_path = str(rejects_path)
    return summary
