"""Model statistics that several methods read, fetched once per step and shared (LM-Polygraph's stat calculators).

PPL, ME and PRO all read the actor's teacher-forced log-probabilities of the frozen action (the same request,
:func:`~ceb.stages.baselines.teacher_forcing.teacher_forcing_request`). The step pool (:mod:`ceb.pipeline.pool`)
scores one step of every baseline at once, inside one :func:`step_statistics` scope: a :class:`SharedStatistics`
that lives as long as that step. The first method to ask a statistic fetches it, the others that ask while it is
under way wait for that fetch, and the ones that ask later read the kept value; the scope ends with the step, so
nothing is kept beyond it. Outside a scope (a critic called on its own, ``baselines.share_statistics`` off) each
method fetches its own. The estimators stay math over the statistic.

Which method's row carries the request's cost depends on which asked first: the sum over the run is right, and
the other rows record a request-free read (``requests`` 0).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import anyio

__all__ = ["SharedStatistics", "current_statistics", "step_statistics"]

T = TypeVar("T")


@dataclass(slots=True)
class _Entry(Generic[T]):
    done: anyio.Event = field(default_factory=anyio.Event)
    value: T | None = None
    done_ok: bool = False
    error: Exception | None = None


class SharedStatistics:
    """A single-flight memo of model statistics, shared by the methods scoring one step."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry[Any]] = {}
        self.fetched = 0
        """Fetches made (one per distinct key)."""
        self.shared = 0
        """Reads served by another caller's fetch."""

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The statistic ``key``: fetched by this call, or read from another caller's fetch.

        Args:
            key: What identifies the statistic (the endpoint and the exact request).
            fetch: Fetches it; called at most once per key.

        Returns:
            ``(value, fetched_here)``: ``fetched_here`` is ``True`` for the caller whose ``fetch`` ran, which
            carries its cost.

        Raises:
            Exception: What ``fetch`` raised, in the caller that ran it and in every caller waiting for it (a
                failed fetch is not kept: the next caller fetches again). A fetch whose caller is cancelled is
                taken up by a waiting caller, which fetches again; a cancellation is never passed on.
        """
        while True:
            entry = self._entries.get(key)
            if entry is None:
                break
            await entry.done.wait()
            if entry.error is not None:
                raise entry.error
            if entry.done_ok:
                self.shared += 1
                return cast(T, entry.value), False
            # Its fetcher was cancelled: the key is free again, and this caller may fetch it.
        entry = _Entry()
        self._entries[key] = entry
        self.fetched += 1
        try:
            value = await fetch()
        except Exception as exc:
            entry.error = exc
            raise
        else:
            entry.value, entry.done_ok = value, True
        finally:
            if not entry.done_ok:
                self._entries.pop(key, None)
            entry.done.set()
        return value, True

    def __len__(self) -> int:
        return len(self._entries)


_CURRENT: ContextVar[SharedStatistics | None] = ContextVar("ceb_step_statistics", default=None)


@contextmanager
def step_statistics() -> Iterator[SharedStatistics]:
    """Share the statistics asked inside this block (and the tasks it starts): one step of several methods."""
    token = _CURRENT.set(SharedStatistics())
    try:
        yield cast(SharedStatistics, _CURRENT.get())
    finally:
        _CURRENT.reset(token)


def current_statistics() -> SharedStatistics | None:
    """The statistics of the enclosing :func:`step_statistics` block, or ``None`` outside one."""
    return _CURRENT.get()
