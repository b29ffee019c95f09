"""Request scheduling: priority slots per endpoint, least-outstanding balancing and lane affinity.

A stream is sequential, so a run's makespan is bounded by its longest chain of requests; a freed slot goes to the waiter
whose stream has the most sequential work left (highest-level-first list scheduling, Hu 1961). The priority and the lane
key travel in context variables set around each stage call (:func:`priority`, :func:`lane`), inherited by tasks started
inside.

Each endpoint has its own :class:`PrioritySlots`. Under ``affinity`` a lane goes to its home replica, chosen by
rendezvous hashing (Thaler and Ravishankar 1998) so it reuses one prefix cache and a replica added or removed moves only
its lanes; it leaves home only when home is full and another replica has a free slot. Otherwise the replica with the
fewest outstanding requests is picked. :func:`server_priority` maps the priority onto vLLM's ``priority`` field (lower
first, honoured under ``--scheduling-policy priority``).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import anyio

__all__ = [
    "EndpointLimits",
    "PrioritySlots",
    "Routing",
    "current_lane",
    "current_priority",
    "current_step",
    "home_endpoint",
    "lane",
    "lane_tag",
    "priority",
    "server_priority",
    "step",
]

Routing = Literal["affinity", "least_outstanding"]
"""``affinity`` (the lane's home replica unless overloaded) or ``least_outstanding``."""

T = TypeVar("T")

_PRIORITY: ContextVar[float] = ContextVar("ceb_request_priority", default=0.0)
_LANE: ContextVar[str | None] = ContextVar("ceb_request_lane", default=None)
_STEP: ContextVar[tuple[str, int] | None] = ContextVar("ceb_request_step", default=None)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
"""The range of vLLM's ``priority`` field."""


@contextmanager
def _bound(var: ContextVar[T], value: T) -> Iterator[None]:
    """``var`` set to ``value`` inside the block."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def priority(value: float) -> AbstractContextManager[None]:
    """Send the requests made inside this block with ``value`` (higher is served first).

    The pipeline uses the stream's remaining sequential requests (its critical path).
    """
    return _bound(_PRIORITY, value)


def current_priority() -> float:
    """The priority of requests made now (0 outside any :func:`priority` block)."""
    return _PRIORITY.get()


def lane(key: str) -> AbstractContextManager[None]:
    """Send the requests made inside this block as lane ``key``: to its home replica, with ``key`` as session."""
    return _bound(_LANE, key)


def current_lane() -> str | None:
    """The lane key of requests made now (``None`` outside any :func:`lane` block)."""
    return _LANE.get()


def step(trajectory: str, t: int) -> AbstractContextManager[None]:
    """Mark the requests inside this block as step ``t`` (0-based) of ``trajectory``, for Batch ``custom_id`` values."""
    return _bound(_STEP, (trajectory, t))


def current_step() -> tuple[str, int] | None:
    """``(trajectory id, step)`` of requests made now (``None`` outside any :func:`step` block)."""
    return _STEP.get()


def lane_tag(key: str) -> str:
    """Eight hex digits (BLAKE2b, 4 bytes) naming lane ``key`` in request ids without carrying its text."""
    return hashlib.blake2b(key.encode(), digest_size=4).hexdigest()


def server_priority(value: float) -> int:
    """A ceb priority (higher first, float) as vLLM's ``priority`` (lower first, int64): negated, rounded, clamped.

    Equal server priorities are served FIFO by vLLM; the pipeline's priorities are whole request counts.

    Raises:
        ValueError: ``value`` is NaN.
    """
    if value != value:  # noqa: PLR0124 - the NaN test
        raise ValueError("priority is NaN")
    if value in (float("inf"), float("-inf")):
        return _INT64_MIN if value > 0 else _INT64_MAX
    return max(_INT64_MIN, min(_INT64_MAX, -round(value)))


def _weight(key: str, endpoint: str) -> bytes:
    return hashlib.blake2b(f"{key}\0{endpoint}".encode(), digest_size=8).digest()


def home_endpoint(key: str, endpoints: Sequence[str]) -> str:
    """The endpoint of highest BLAKE2b weight for ``key`` (rendezvous hashing; :class:`ValueError` for none)."""
    if not endpoints:
        raise ValueError("no endpoint to pick from")
    return max(endpoints, key=lambda e: _weight(key, e))


@dataclass(order=True)
class _Waiter:
    key: tuple[float, int]
    event: anyio.Event = field(compare=False)
    granted: bool = field(default=False, compare=False)
    cancelled: bool = field(default=False, compare=False)


class PrioritySlots:
    """``total`` slots whose waiters are served highest priority first, FIFO among equals."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError(f"total must be >= 1, got {total}")
        self.total = total
        self.in_use = 0
        self._heap: list[_Waiter] = []
        self._seq = itertools.count()
        self.waiting = 0

    @property
    def outstanding(self) -> int:
        """Requests held or waiting: the load measure of least-outstanding balancing."""
        return self.in_use + self.waiting

    async def acquire(self, prio: float = 0.0) -> None:
        """Wait for a slot at ``prio``; a cancelled waiter leaves no trace and passes on a slot granted to it."""
        if self.in_use < self.total and not self.waiting:
            self.in_use += 1
            await anyio.lowlevel.checkpoint()
            return
        w = _Waiter((-prio, next(self._seq)), anyio.Event())
        heapq.heappush(self._heap, w)
        self.waiting += 1
        try:
            await w.event.wait()
        except BaseException:
            if w.granted:
                self.release()  # handed a slot while being cancelled: pass it on
            else:
                w.cancelled = True
                self.waiting -= 1
            raise

    def release(self) -> None:
        """Free a slot, handing it straight to the highest-priority live waiter if any."""
        while self._heap:
            w = heapq.heappop(self._heap)
            if w.cancelled:
                continue
            self.waiting -= 1
            w.granted = True
            w.event.set()  # the slot moves to w: in_use unchanged
            return
        self.in_use -= 1


@dataclass
class EndpointLimits:
    """The run's slots, one :class:`PrioritySlots` per endpoint shared by every backend using it."""

    _slots: dict[str, PrioritySlots] = field(default_factory=dict)

    def slots(self, endpoint: str, max_concurrency: int) -> PrioritySlots:
        """The slots of ``endpoint``, made with ``max_concurrency`` on first use."""
        s = self._slots.get(endpoint)
        if s is None:
            s = self._slots[endpoint] = PrioritySlots(max_concurrency)
        return s

    def pick(
        self,
        endpoints: Sequence[str],
        max_concurrency: int,
        *,
        key: str | None = None,
        routing: Routing = "least_outstanding",
    ) -> str:
        """The endpoint for the next attempt (module docstring); the first on a tie; :class:`ValueError` for none.

        Under ``affinity`` with a ``key``: its :func:`home_endpoint`, unless full while the least-outstanding one has a
        free slot. When all are full the request waits at home.
        """
        if not endpoints:
            raise ValueError("no endpoint to pick from")
        least = min(endpoints, key=lambda e: self.slots(e, max_concurrency).outstanding)
        if routing != "affinity" or key is None or len(endpoints) == 1:
            return least
        home = home_endpoint(key, endpoints)
        if self.slots(home, max_concurrency).outstanding < max_concurrency:
            return home
        return least if self.slots(least, max_concurrency).outstanding < max_concurrency else home

    @asynccontextmanager
    async def slot(self, endpoint: str, max_concurrency: int, prio: float | None = None) -> AsyncIterator[None]:
        """``async with limits.slot(endpoint, n):`` holds a slot at ``prio`` (default :func:`current_priority`)."""
        slots = self.slots(endpoint, max_concurrency)
        await slots.acquire(current_priority() if prio is None else prio)
        try:
            yield
        finally:
            slots.release()
