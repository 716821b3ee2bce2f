"""How the benchmarks time a method: run it a number of times, keep every run's seconds and the last result."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def repeated(fn: Callable[[], T], repeats: int) -> tuple[list[float], T]:
    """(the seconds of each of `repeats` runs of `fn`, the last run's result); at least one run."""
    seconds: list[float] = []
    for _ in range(max(1, repeats)):
        started = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - started)
    return seconds, result
