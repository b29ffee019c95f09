"""Model statistics that several methods read, fetched once per step and shared (LM-Polygraph's stat calculators).

PPL, ME and PRO all read the actor's teacher-forced log-probabilities of the frozen action (the same request,
:func:`~ceb.stages.baselines.teacher_forcing.teacher_forcing_request`); each method's lane runs on its own, so
without sharing every one of them sent it. :class:`SharedStatistics` is a single-flight memo keyed by what was
asked: the first lane to ask a key fetches it, the others that ask while it is under way wait for that fetch,
and the ones that ask later read the kept value. The estimators stay math over the statistic.

Memory is bounded: the latest :data:`DEFAULT_CAPACITY` values are kept (the lanes of one stream order move
through the steps together, so a value is read by its other methods long before it is dropped); a value asked
for again after it was dropped is fetched again, which costs a request and changes nothing else.

Which lane's row carries the request's cost depends on which asked first: the sum over the run is right, and
the other rows record a request-free read (``requests`` 0).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import anyio

__all__ = ["DEFAULT_CAPACITY", "SharedStatistics"]

T = TypeVar("T")

DEFAULT_CAPACITY = 4096
"""Values kept after their fetch (one per step and statistic): about 20 MB of teacher-forced spans at K = 20."""


@dataclass(slots=True)
class _Entry(Generic[T]):
    done: anyio.Event = field(default_factory=anyio.Event)
    value: T | None = None
    done_ok: bool = False
    error: Exception | None = None


class SharedStatistics:
    """A single-flight memo of model statistics, shared by the methods of one set of stages.

    Args:
        capacity: Values kept after their fetch, newest first; ``>= 1``.

    Raises:
        ValueError: ``capacity`` is below 1.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._entries: OrderedDict[Hashable, _Entry[Any]] = OrderedDict()
        self.fetched = 0
        """Fetches made (one per distinct key, again after a key was dropped)."""
        self.shared = 0
        """Reads served by another caller's fetch."""

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The statistic ``key``: fetched by this call, or read from another caller's fetch.

        Args:
            key: What identifies the statistic (the endpoint and the exact request).
            fetch: Fetches it; called at most once per key while the key is kept.

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
            self._entries.move_to_end(key)
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
        self._evict()
        return value, True

    def _evict(self) -> None:
        while len(self._entries) > self.capacity:
            key, oldest = next(iter(self._entries.items()))
            if not oldest.done.is_set():  # still being fetched: keep it, and everything newer
                break
            del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)
