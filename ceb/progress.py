"""Progress of long jobs (scoring, reports, benchmarks), for a terminal and for a batch log alike.

With stderr a TTY a :class:`Progress` is a rich bar (done / total, rate, ETA, requests/s, failures); elsewhere
(``nohup``, a scheduler, ``| tee``) an ``info`` event ``progress`` through :mod:`ceb.logs` every
:attr:`ProgressSettings.interval_s` seconds from a background thread (a stalled job still reports) and one
when the job ends, shown whatever the log level; ``ceb --progress off`` silences it. The CLI sets the mode
once (:func:`set_progress`); library code only opens a :class:`Progress`.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, get_args

from ceb.logs import get_logger

__all__ = ["PROGRESS_MODES", "Progress", "ProgressMode", "ProgressSettings", "set_progress"]

ProgressMode = Literal["auto", "bar", "log", "off"]
"""``auto``: a bar when stderr is a terminal, else log lines; ``bar``; ``log``; ``off``."""

PROGRESS_MODES: tuple[ProgressMode, ...] = get_args(ProgressMode)


@dataclass(frozen=True, slots=True)
class ProgressSettings:
    """How progress is shown; ``interval_s`` is seconds between log lines in ``log`` mode."""

    mode: ProgressMode = "auto"
    interval_s: float = 30.0


_settings = ProgressSettings()


def set_progress(mode: ProgressMode = "auto", interval_s: float = 30.0) -> None:
    """Choose how every later :class:`Progress` shows itself (the CLI calls this once).

    Raises:
        ValueError: An unknown ``mode``, or ``interval_s`` not positive.
    """
    global _settings
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress mode {mode!r}: choose one of {', '.join(PROGRESS_MODES)}")
    if not interval_s > 0:
        raise ValueError(f"progress interval {interval_s!r}: must be > 0 seconds")
    _settings = ProgressSettings(mode, interval_s)


def _progress_logger() -> Any:
    """A logger filtering at ``info`` of its own, so progress shows at the default ``warning`` level."""
    return get_logger(__name__, level=logging.INFO)


class Progress:
    """Counts finished units of ``label`` (``total`` ``None``: unknown, no ETA) and shows them (module docstring).

    A context manager, :meth:`advance` thread-safe; in ``log`` mode the exit writes a last line with ``status``
    finished, interrupted or failed, unless nothing was known or done. ``settings`` overrides
    :func:`set_progress`'s (tests).
    """

    def __init__(
        self, label: str, total: int | None, unit: str = "steps", *, settings: ProgressSettings | None = None
    ) -> None:
        self.label, self.total, self.unit = label, total, unit
        self.done = self.failed = self.requests = 0
        self.note = ""
        s = settings or _settings
        mode = s.mode
        if mode == "auto":
            mode = "bar" if sys.stderr.isatty() else "log"
        self.mode: ProgressMode = mode
        self.interval_s = s.interval_s
        self._lock = threading.Lock()
        self._started = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._task: Any = None

    def advance(self, n: int = 1, *, failed: int = 0, requests: int = 0) -> None:
        """Add ``n`` finished units, ``failed`` of them failed, and ``requests`` requests spent on them."""
        with self._lock:
            self.done += n
            self.failed += failed
            self.requests += requests
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done, stats=self._stats())

    def set_total(self, total: int | None) -> None:
        """Set the units to do once known (a resumed run learns it late)."""
        self.total = total
        if self._bar is not None:
            self._bar.update(self._task, total=total)

    def add_requests(self, requests: int) -> None:
        """Count requests that finished no unit (a hindsight round)."""
        self.advance(0, requests=requests)

    def set_note(self, note: str) -> None:
        """A short text shown with the counts (the section a report builds)."""
        self.note = note
        if self._bar is not None:
            self._bar.update(self._task, stats=self._stats())

    @property
    def elapsed_s(self) -> float:
        """Seconds since the job started."""
        return time.perf_counter() - self._started

    def snapshot(self) -> dict[str, Any]:
        """A log line's figures: done, total, failed, rates, elapsed and ETA in seconds (ETA ``None`` until known)."""
        with self._lock:
            done, failed, requests = self.done, self.failed, self.requests
        elapsed = self.elapsed_s
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = None
        if self.total is not None and rate > 0:
            eta = round(max(self.total - done, 0) / rate, 1)
        out: dict[str, Any] = {"done": done, "total": self.total, "unit": self.unit, "failed": failed}
        out |= {"per_s": round(rate, 2), "requests_per_s": round(requests / elapsed if elapsed > 0 else 0.0, 2)}
        out |= {"elapsed_s": round(elapsed, 1), "eta_s": eta}
        if self.note:
            out["note"] = self.note
        return out

    def _stats(self) -> str:
        snap = self.snapshot()
        text = f"{snap['per_s']:.1f} {self.unit}/s"
        if self.requests:
            text += f", {snap['requests_per_s']:.1f} req/s"
        text += f", {snap['failed']} failed"
        return text + (f", {self.note}" if self.note else "")

    def log_line(self, status: str = "running") -> None:
        """Write one ``progress`` log line now."""
        _progress_logger().info("progress", job=self.label, status=status, **self.snapshot())

    def _tick(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.log_line()

    def __enter__(self) -> Progress:
        self._started = time.perf_counter()
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stats]}"),
                console=Console(stderr=True, markup=False),
                transient=True,
            )
            self._task = self._bar.add_task(self.label, total=self.total, stats=self._stats())
            self._bar.start()
        elif self.mode == "log":
            self._thread = threading.Thread(target=self._tick, name=f"progress-{self.label}", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._bar is not None:
            self._bar.stop()
        if self.mode == "log" and (self.total is not None or self.done):  # a job refused before it began is silent
            status = "finished" if exc_type is None else "interrupted" if exc_type is KeyboardInterrupt else "failed"
            self.log_line(status)
