"""Simulated agents for tests and benchmarks: threads that use the live store the way agents do.

Each agent, on its own connection, picks random rows and makes version-checked edits (told when they
conflict), access bookkeeping and pins, recording what the store accepted and how long each write took.
Bounded in operations and seconds; stops when told.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engram_pipelines.store import Store, VersionConflict, open_store


@dataclass
class Agent:
    url: str
    seed: int
    stop: threading.Event
    row_ids: list[str]
    edits: list[tuple[str, str]] = field(default_factory=list)  # (id, tag) the store accepted
    conflicts: int = 0
    accesses: Counter[str] = field(default_factory=Counter)
    pins: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    pause: float = 0.0  # seconds between operations (0: as fast as the store allows)

    def run(self, max_ops: int = 100_000, max_seconds: float = 120.0) -> None:
        rng = random.Random(self.seed)
        deadline = time.monotonic() + max_seconds
        with open_store(self.url) as store:
            for op in range(max_ops):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                self._one(store, rng, op)
                if self.pause:
                    time.sleep(self.pause)

    def _one(self, store: Store, rng: random.Random, op: int) -> None:
        target = rng.choice(self.row_ids)
        started = time.perf_counter()
        kind = rng.random()
        row = store.get(target)
        if row is None:  # purged meanwhile: nothing to edit, like a conflict
            self.conflicts += 1
            return
        if kind < 0.6:
            tag = f"agent{self.seed}-{op}"
            try:
                store.update_memory(target, row["version"], tags=[*row["tags"], tag])
                self.edits.append((target, tag))
            except VersionConflict:
                self.conflicts += 1
        elif kind < 0.9:
            store.record_access(target)
            self.accesses[target] += 1
        else:
            try:
                store.set_pinned(target, row["version"], True)
                self.pins.append(target)
            except VersionConflict:
                self.conflicts += 1
        self.latencies.append(time.perf_counter() - started)


def run_with_agents(
    url: str,
    row_ids: list[str],
    action: Callable[[], Any],
    *,
    writers: int = 4,
    pause: float = 0.0,
    warmup: float = 0.2,
) -> tuple[list[Agent], Any]:
    """Run `action` while `writers` agents edit the store; returns the agents (what they did) and its result."""
    stop = threading.Event()
    agents = [Agent(url, seed, stop, row_ids, pause=pause) for seed in range(writers)]
    threads = [threading.Thread(target=a.run) for a in agents]
    for thread in threads:
        thread.start()
    time.sleep(warmup)  # the agents are writing before the action starts
    try:
        outcome = action()
    finally:
        time.sleep(0.1)
        stop.set()
        for thread in threads:
            thread.join()
    return agents, outcome


def lost_edits(store: Store, agents: list[Agent], row_ids: list[str]) -> int:
    """Agent writes the store accepted that are no longer there (must be 0 under a guarded apply)."""
    rows = store.read_memories(row_ids)
    # A row deleted after an edit the store accepted lost that edit too.
    lost = sum(
        target not in rows or tag not in rows[target]["tags"] for a in agents for target, tag in a.edits
    )
    accesses: Counter[str] = Counter()
    for agent in agents:
        accesses.update(agent.accesses)
    lost += sum(t in rows and rows[t]["access_count"] != n for t, n in accesses.items())
    lost += sum(t not in rows or not rows[t]["pinned"] for a in agents for t in a.pins)
    return lost


def latency_percentiles(agents: list[Agent]) -> dict[str, float]:
    values = np.array([x for a in agents for x in a.latencies]) * 1000.0
    if values.size == 0:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "writes": 0}
    return {
        "p50_ms": float(np.percentile(values, 50)),
        "p99_ms": float(np.percentile(values, 99)),
        "writes": int(values.size),
    }
