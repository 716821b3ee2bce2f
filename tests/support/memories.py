"""Test memories: the suite's as-of day, hand-made rows and vectors, and a Progress that records."""

from __future__ import annotations

import datetime as dt
import zlib

import numpy as np

AS_OF = dt.date(2026, 11, 29)
T0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)


def unit(vector: list[float] | np.ndarray, dim: int = 384) -> np.ndarray:
    """A unit vector of `dim` whose leading components are `vector` (the rest zero)."""
    out = np.zeros(dim, dtype=np.float32)
    out[: len(vector)] = vector
    return out / np.linalg.norm(out)


def memory(i: int | str, **fields: object) -> dict[str, object]:
    """A plain test memory with a 384-d vector; override any column."""
    rng = np.random.default_rng(zlib.crc32(str(i).encode()))
    base = {
        "id": f"m{i}" if isinstance(i, int) else i,
        "namespace": "ns1",
        "content": f"memory number {i}",
        "created_at": T0,
        "embedding": rng.standard_normal(384).astype(np.float32),
        "embedding_model": "test-384",
    }
    base.update(fields)
    vec = np.asarray(base["embedding"], dtype=np.float32) if base["embedding"] is not None else None
    if vec is not None:
        base["embedding"] = vec / np.linalg.norm(vec)
    return base


class ProgressRecorder:
    """A Progress that keeps each task as (task, total, units advanced)."""

    def __init__(self) -> None:
        self.tasks: list[tuple[str, int | None, int]] = []

    def start(self, task: str, total: int | None) -> None:
        self.tasks.append((task, total, 0))

    def advance(self, n: int) -> None:
        task, total, done = self.tasks[-1]
        self.tasks[-1] = (task, total, done + n)

    def finish(self) -> None:
        pass
