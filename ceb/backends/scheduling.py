"""Request scheduling across endpoints: priority slots per endpoint and least-outstanding balancing.

A stream is sequential: its next request cannot be sent before the current one returns. The makespan of a
run is therefore bounded below by its longest stream's chain of requests (its critical path), and the way to
reach that bound is the classic list-scheduling rule: when a slot frees, give it to the waiting request
whose stream has the most sequential work left (highest-level-first; Hu 1961, the rule behind critical-path
scheduling). Requests with slack (a short static baseline, a sweep cell) fill the server around the long
chains instead of delaying them.

The priority travels in a context variable, set by the lane around each stage call (:func:`priority`), so the
stages and backends need no extra argument; tasks started inside (the hindsight votes) inherit it.

Each endpoint (a vLLM replica) has its own :class:`PrioritySlots` sized to its ``max_num_seqs``-like limit;
:class:`EndpointLimits` picks, for each attempt, the endpoint with the fewest outstanding requests (in
service plus waiting), which is what vLLM's router and most load balancers call least-outstanding-requests.

Replica affinity (``routing="affinity"``): a stream's prompts share a long history prefix, and a replica's
prefix cache holds only what that replica computed. Each lane therefore has a home replica, chosen by rendezvous
(highest-random-weight) hashing of its key over the endpoints (Thaler and Ravishankar 1998), so a lane's
requests reuse one cache and adding or removing a replica moves only the lanes homed there. The home is left
for the least-outstanding replica only when it is overloaded: all its slots are held or waited for while
another replica has a free slot. The lane key travels like the priority, in a context variable (:func:`lane`).

:func:`server_priority` maps the priority onto vLLM's own ``priority`` request field, which orders the server's
queue under ``--scheduling-policy priority`` (lower served first; ``vllm/v1/request.py``, ``Request.__lt__``).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

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
"""How an attempt picks among replicas: ``affinity`` (the lane's home replica unless it is overloaded) or
``least_outstanding`` (the replica with the fewest outstanding requests, whatever the lane)."""

_PRIORITY: ContextVar[float] = ContextVar("ceb_request_priority", default=0.0)
_LANE: ContextVar[str | None] = ContextVar("ceb_request_lane", default=None)
_STEP: ContextVar[tuple[str, int] | None] = ContextVar("ceb_request_step", default=None)

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
"""The range vLLM's ``priority`` field accepts (``vllm/entrypoints/openai/chat_completion/protocol.py``)."""


@contextmanager
def priority(value: float) -> Iterator[None]:
    """Send the requests made inside this block with ``value`` (higher is served first).

    The pipeline uses the number of sequential requests left on the caller's stream (its remaining critical
    path), so the longest stream is never starved by streams with slack.
    """
    token = _PRIORITY.set(value)
    try:
        yield
    finally:
        _PRIORITY.reset(token)


def current_priority() -> float:
    """The priority of requests made now (0 outside any :func:`priority` block)."""
    return _PRIORITY.get()


@contextmanager
def lane(key: str) -> Iterator[None]:
    """Send the requests made inside this block as lane ``key``: to its home replica, with ``key`` as session.

    The pipeline uses one key per lane (stream, order, method, critic), so every request of a lane reads the
    prefix cache of the replica that holds the lane's history.
    """
    token = _LANE.set(key)
    try:
        yield
    finally:
        _LANE.reset(token)


def current_lane() -> str | None:
    """The lane key of requests made now (``None`` outside any :func:`lane` block)."""
    return _LANE.get()


@contextmanager
def step(trajectory: str, t: int) -> Iterator[None]:
    """The requests made inside this block are for step ``t`` (0-based) of trajectory ``trajectory``.

    With :func:`lane` it names the step a request belongs to, which a Batch file needs in each request's
    ``custom_id`` (:mod:`ceb.backends.batch`); a live backend does not read it.
    """
    token = _STEP.set((trajectory, t))
    try:
        yield
    finally:
        _STEP.reset(token)


def current_step() -> tuple[str, int] | None:
    """``(trajectory id, step)`` of requests made now (``None`` outside any :func:`step` block)."""
    return _STEP.get()


def lane_tag(key: str) -> str:
    """Eight hex digits naming lane ``key`` in request ids: BLAKE2b of the key, 4 bytes.

    A server's or a router's log line can so be traced to its lane without carrying the key (free text) itself.
    """
    return hashlib.blake2b(key.encode(), digest_size=4).hexdigest()


def server_priority(value: float) -> int:
    """A ceb priority (higher first, any float) as vLLM's ``priority`` field (lower first, a 64-bit int).

    Negated and rounded to the nearest integer, clamped to int64. Lanes whose priorities round alike get the
    same server priority, and vLLM serves equal priorities by arrival time (FIFO); the pipeline's priorities
    are request counts, whole numbers, so rounding loses nothing there.

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
    """The home of ``key`` among ``endpoints`` by rendezvous hashing: the endpoint with the highest hash weight.

    Deterministic across processes (BLAKE2b, not Python's salted ``hash``); removing an endpoint moves only the
    keys homed there, adding one moves about ``1/len(endpoints)`` of them.

    Raises:
        ValueError: ``endpoints`` is empty.
    """
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
    """A capacity limit whose waiters are served by priority (highest first), FIFO among equals.

    Args:
        total: Slots (requests in service at once).

    Attributes:
        in_use: Slots held now.
        waiting: Waiters queued now.
    """

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
        """Wait for a slot; the highest ``prio`` waiting is served first when one frees.

        Cancellation while waiting leaves no trace; a slot granted to a waiter cancelled at that moment is
        passed on to the next one.
        """
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
        """Free a slot, handing it straight to the highest-priority live waiter if there is one."""
        while self._heap:
            w = heapq.heappop(self._heap)
            if w.cancelled:
                continue
            self.waiting -= 1
            w.granted = True
            w.event.set()  # the slot moves to w: in_use unchanged
            return
        self.in_use -= 1


class _Slot:
    def __init__(self, slots: PrioritySlots, prio: float) -> None:
        self.slots = slots
        self.prio = prio

    async def __aenter__(self) -> None:
        await self.slots.acquire(self.prio)

    async def __aexit__(self, *exc: object) -> None:
        self.slots.release()


@dataclass
class EndpointLimits:
    """The run's request slots: one :class:`PrioritySlots` per endpoint, shared by every stage using it.

    Backends that talk to the same endpoint share its slots, so a critic and a hindsight stage on one vLLM
    server never put more than its ``max_concurrency`` requests in flight together.
    """

    _slots: dict[str, PrioritySlots] = field(default_factory=dict)

    def slots(self, endpoint: str, max_concurrency: int) -> PrioritySlots:
        """The slots of ``endpoint``, created with ``max_concurrency`` on first use."""
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
        """The endpoint for the next attempt.

        ``least_outstanding``, or ``affinity`` without a ``key``: the endpoint with the fewest outstanding
        requests (the first one on a tie). ``affinity`` with a ``key``: the key's :func:`home_endpoint`, unless
        it is overloaded (its outstanding requests fill its ``max_concurrency`` slots) while the least-outstanding
        endpoint has a free slot; then that one. When every endpoint is full the request waits at home.

        Raises:
            ValueError: ``endpoints`` is empty.
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

    def slot(self, endpoint: str, max_concurrency: int, prio: float | None = None) -> _Slot:
        """``async with limits.slot(endpoint, n):`` holds one slot of ``endpoint`` at priority ``prio``.

        ``prio`` defaults to :func:`current_priority`.
        """
        return _Slot(self.slots(endpoint, max_concurrency), current_priority() if prio is None else prio)
