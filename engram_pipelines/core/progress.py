"""Progress of long operations: a bar on a terminal, periodic counts in logs (Dagster's included)."""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Protocol


class Progress(Protocol):
    def start(self, task: str, total: int | None) -> None: ...

    def advance(self, n: int) -> None: ...

    def finish(self) -> None: ...


class SilentProgress:
    def start(self, task: str, total: int | None) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def finish(self) -> None:
        pass


class LogProgress:
    """Logs `task: done/total (rate/s, ETA)` at most every `every` seconds, and once at the end."""

    def __init__(self, logger: logging.Logger | logging.LoggerAdapter, every: float = 5.0) -> None:
        self.logger = logger
        self.every = every
        self.task = ""
        self.total: int | None = None
        self.done = 0
        self.started = self.last = 0.0

    def start(self, task: str, total: int | None) -> None:
        self.task, self.total, self.done = task, total, 0
        self.started = self.last = time.monotonic()
        self.logger.info(f"{task}: starting ({total if total is not None else '?'} to do)")

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._log(now)

    def _log(self, now: float, *, final: bool = False) -> None:
        elapsed = max(now - self.started, 1e-9)
        rate = self.done / elapsed
        of = f"/{self.total:,}" if self.total is not None else ""
        if final:
            tail = f"done in {elapsed:,.1f} s"
        elif self.total is not None and rate > 0:
            tail = f"about {_duration((self.total - self.done) / rate)} left"
        else:
            tail = ""
        self.logger.info(f"{self.task}: {self.done:,}{of} ({rate:,.0f}/s{', ' + tail if tail else ''})")

    def finish(self) -> None:
        self._log(time.monotonic(), final=True)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class BarProgress:
    """A rich progress bar on an interactive terminal; plain periodic lines otherwise (CI logs)."""

    def __init__(self) -> None:
        self._bar: Any = None  # rich's Progress, imported only on a terminal
        self._task: Any = None
        self._fallback: LogProgress | None = None

    def start(self, task: str, total: int | None) -> None:
        if sys.stderr.isatty():
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                _rate_column(),
                TimeElapsedColumn(),
                "ETA",
                TimeRemainingColumn(),
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task(task, total=total)
        else:
            logger = logging.getLogger("engram_pipelines.core.progress")
            if not logger.handlers:
                handler = logging.StreamHandler(sys.stderr)
                handler.setFormatter(logging.Formatter("%(message)s"))
                logger.addHandler(handler)
                logger.setLevel(logging.INFO)
                logger.propagate = False
            self._fallback = LogProgress(logger, every=10.0)
            self._fallback.start(task, total)

    def advance(self, n: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, n)
        elif self._fallback is not None:
            self._fallback.advance(n)

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        elif self._fallback is not None:
            self._fallback.finish()
            self._fallback = None


def _rate_column() -> Any:
    """Rows per second on the bar (rich's own speed column is for bytes)."""
    from rich.progress import ProgressColumn, Task
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Task) -> Text:
            return Text(f"{task.speed:,.0f}/s" if task.speed else "", style="progress.data.speed")

    return RateColumn()
