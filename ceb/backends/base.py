""":class:`ChatBackend`: the retries, routing, slots, observers and cache around any :class:`Transport`."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from ceb.backends.scheduling import EndpointLimits, Routing, current_lane, current_priority
from ceb.backends.transport import (
    ChatRequest,
    ChatResponse,
    Completion,
    ModelIdentity,
    StreamChunk,
    TokenLogprob,
    TransientError,
    Transport,
)
from ceb.config import BackendConfig
from ceb.errors import BackendError
from ceb.logs import get_logger
from ceb.registry import Registry

if TYPE_CHECKING:  # types only: the client calls the cache step open_backend hands it
    from ceb.backends.cache import CacheStep, ReplyCache

log = get_logger(__name__)

__all__ = [
    "BACKENDS",
    "AttemptRecord",
    "BackendFactory",
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "EndpointLimits",
    "RetryPolicy",
    "RetryTally",
    "RetrySettings",
    "StreamReply",
    "TokenLogprob",
    "TransientError",
    "Transport",
    "open_backend",
    "register_backend",
]


class StreamReply:
    """A streamed reply being read: iterate it for text deltas (choice 0); timings and usage fill in as it goes.

    Valid inside :meth:`ChatBackend.stream` only. Times are seconds from sending (after the slot wait), taken with
    :func:`time.perf_counter` as each event is read, as vLLM's ``benchmarks/lib/endpoint_request_func.py`` does:
    ``ttft_s`` is the first event with a choice (TTFT), ``itl_s`` the gaps between later ones (ITL), ``latency_s`` the
    last one read (E2EL once ``done``). ``queue_s`` and ``attempts`` cover opening the stream. ``prompt_tokens`` /
    ``completion_tokens`` come from the usage event (absent on a cut stream); ``done`` means the server ended the stream
    itself.
    """

    def __init__(self, events: AsyncIterator[StreamChunk], started: float, queue_s: float, attempts: int) -> None:
        self._events = events
        self._started = started
        self._last = started
        self.text = ""
        self.ttft_s: float | None = None
        self.itl_s: list[float] = []
        self.latency_s = 0.0
        self.queue_s = queue_s
        self.attempts = attempts
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reason: str | None = None
        self.done = False
        self._reader: AsyncGenerator[str, None] | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        if self._reader is None:
            self._reader = self._deltas()
        return self._reader

    async def aclose(self) -> None:
        """Close the readers (called when the :meth:`ChatBackend.stream` context is left)."""
        if self._reader is not None:
            await self._reader.aclose()
        close = getattr(self._events, "aclose", None)
        if close is not None:
            await close()

    async def _deltas(self) -> AsyncGenerator[str, None]:
        async for chunk in self._events:
            now = time.perf_counter()
            if chunk.prompt_tokens is not None:
                self.prompt_tokens = chunk.prompt_tokens
            if chunk.completion_tokens is not None:
                self.completion_tokens = chunk.completion_tokens
            if chunk.finish_reason is not None:
                self.finish_reason = chunk.finish_reason
            if not chunk.has_choice:
                continue
            if self.ttft_s is None:
                self.ttft_s = now - self._started
            else:
                self.itl_s.append(now - self._last)
            self._last = now
            self.latency_s = now - self._started
            if chunk.text:
                self.text += chunk.text
                yield chunk.text
        self.done = True

    async def read_all(self) -> str:
        """Read the rest of the reply; returns the whole text."""
        async for _ in self:
            pass
        return self.text


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Retry settings where no :class:`~ceb.config.BackendConfig` gives them (tests set the waits to zero).

    Attributes:
        max_attempts: Attempts per request, the first included.
        backoff_s: Multiplier of tenacity's jittered exponential backoff, in seconds.
        max_backoff_s: Cap on one wait, in seconds; a longer ``Retry-After`` is still honoured.
        timeout_attempts: Attempts when the last one timed out (at most ``max_attempts``): a reply that outran the
            timeout once will likely do so again (measured: a 768-token reply at 160 tokens/s against a 120 s timeout
            cost 12 minutes over 6 attempts).
    """

    max_attempts: int = 6
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    timeout_attempts: int = 2


RetrySettings = RetryPolicy | BackendConfig
"""What the retries read: a :class:`RetryPolicy`, or the ``backend`` section's same four fields."""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of one request, as :attr:`ChatBackend.observers` see it.

    ``queue_s`` is the seconds waited for its slot (vLLM's client queue time), ``latency_s`` the seconds from sending to
    the reply or failure; ``error`` is ``"<Type>: <message>"`` (``""`` when ``ok``); token counts are the server's,
    ``None`` where it gave none; ``priority`` is the caller's :func:`~ceb.backends.scheduling.priority`.
    """

    stage: str
    endpoint: str
    queue_s: float
    latency_s: float
    ok: bool
    error: str
    prompt_tokens: int | None
    completion_tokens: int | None
    n: int
    priority: float


class ChatBackend:
    """What the stages call: one :class:`Transport` with the policy every provider shares, as steps around it.

    :meth:`complete` goes through the reply cache (a hit sends nothing), tenacity retries of :class:`TransientError`
    (jittered exponential backoff honouring ``Retry-After``), the endpoint :attr:`routing` picks per attempt
    (``affinity``: the lane's home replica unless it is overloaded; or ``least_outstanding``), a slot there at the
    caller's priority (its wait ``queue_s`` kept apart from ``latency_s``), :meth:`Transport.send` and the
    :attr:`observers`. :meth:`stream` takes the same steps but the cache. After httpx's ``Client`` over a
    ``BaseTransport`` and inspect_ai's ``Model`` over a ``ModelAPI``. ``max_concurrency`` bounds the requests in flight
    per endpoint; ``retry`` defaults to :class:`RetryPolicy`, ``limits`` to private slots.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        max_concurrency: int = 64,
        retry: RetrySettings | None = None,
        limits: EndpointLimits | None = None,
        routing: Routing = "affinity",
        cache: CacheStep | None = None,
    ) -> None:
        self.transport = transport
        self.name = transport.name
        self.endpoints = transport.endpoints
        self.endpoint = ",".join(transport.endpoints)
        """The endpoints joined with ``,``."""
        self.label = transport.label
        """``name@endpoint``, as shown in errors and logs."""
        self.adaptations = transport.adaptations
        """The transport's :attr:`Transport.adaptations`."""
        self.max_concurrency = max_concurrency
        self.retry: RetrySettings = retry or RetryPolicy()
        self.limits = limits or EndpointLimits()
        self.routing: Routing = routing
        self.cache = cache
        self.observers: list[Callable[[AttemptRecord], None]] = []
        """Called with an :class:`AttemptRecord` after every attempt."""
        self.retries = RetryTally(self.label)

    async def preflight(self) -> None:
        """:meth:`Transport.preflight`; not skipped when the cache could answer everything."""
        await self.transport.preflight()

    async def identify(self) -> ModelIdentity | None:
        """What identifies the model behind this backend (:meth:`Transport.identify`)."""
        return await self.transport.identify()

    def describe(self) -> dict[str, Any]:
        """What a run records of this backend (:meth:`Transport.describe`)."""
        return self.transport.describe()

    async def aclose(self) -> None:
        """Log the retries not yet logged, and close the transport (the reply cache's store is its opener's)."""
        self.retries.flush()
        await self.transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """The reply to ``request``: from the cache, or sent with transient failures retried (maybe elsewhere).

        Returns:
            The completion with its server latency and slot wait (seconds) and attempt count.

        Raises:
            TransientError: The last failure once the retries are spent; ``attempts`` says how many were made.
        """
        if self.cache is None:
            return await self._send(request)
        return await self.cache.complete(request, self._send, self.transport.identify)

    async def _send(self, request: ChatRequest) -> ChatResponse:
        """``request`` through the retries, routing, slots and observers.

        The first attempt runs outside tenacity's loop, which leaves reference cycles (its retry state and the
        retrier) that only the garbage collector frees: about 45 objects a request, and under
        ``benchmarks/pipeline.py`` the collector then took 2 to 3% of the run. A failed first attempt is the loop's
        first outcome, so what is retried, how long it waits and when it stops are tenacity's as before.
        """
        tally = _Tally()
        try:
            try:
                return await self._attempt(request, tally)
            except TransientError as exc:
                first: TransientError | None = exc
            async for attempt in self._retrying(request):
                with attempt:
                    if first is not None:
                        failed, first = first, None
                        raise failed
                    response = await self._attempt(request, tally)
        except (TransientError, BackendError) as exc:
            exc.attempts = tally.attempts  # so a failed step still reports the requests it cost
            raise
        return response

    async def _attempt(self, request: ChatRequest, tally: _Tally) -> ChatResponse:
        """One attempt at ``request`` (routing, slot, transport, observers), counted in ``tally``."""
        tally.attempts += 1
        asked = time.perf_counter()
        endpoint = self._pick()
        async with self.limits.slot(endpoint, self.max_concurrency):
            started = time.perf_counter()
            tally.queue_s += started - asked
            try:
                completion = await self.transport.send(request, endpoint)
            except Exception as exc:
                self._observe(request, endpoint, started - asked, time.perf_counter() - started, exc)
                tally.failure = _reason(exc)
                raise
            latency_s = time.perf_counter() - started
            self._observe(request, endpoint, started - asked, latency_s, completion)
        return ChatResponse(completion, latency_s, tally.queue_s, tally.attempts, tally.failure)

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamReply]:
        """Send ``request`` (``n`` must be 1) and read the reply as it is generated.

        ``async with chat.stream(request) as reply: async for delta in reply: ...``. Opening the stream (up to HTTP 200)
        is retried like :meth:`complete`; a failure while reading is raised, not retried. The slot is held until the
        context is left; leaving early cuts the reply (vLLM aborts the request). Observers get the successful attempt
        when the context is left, ``latency_s`` being the time to the last event read. Not cached: a cut stream is not a
        whole reply.

        Yields:
            The :class:`StreamReply`.

        Raises:
            ValueError: ``request.n`` is not 1.
            TransientError: The last failure to open, once the retries are spent.
        """
        if request.n != 1:
            raise ValueError(f"a streamed request has one choice, not n={request.n}")
        queue_s = 0.0
        attempts = 0
        retrying = self._retrying(request)
        async with AsyncExitStack() as stack:
            try:
                async for attempt in retrying:
                    with attempt:
                        attempts += 1
                        asked = time.perf_counter()
                        endpoint = self._pick()
                        inner = AsyncExitStack()
                        await inner.enter_async_context(self.limits.slot(endpoint, self.max_concurrency))
                        started = time.perf_counter()
                        queue_s += started - asked
                        try:
                            events = await inner.enter_async_context(self.transport.open_stream(request, endpoint))
                        except BaseException as exc:
                            await inner.aclose()
                            if isinstance(exc, Exception):
                                self._observe(request, endpoint, started - asked, time.perf_counter() - started, exc)
                            raise
                        stack.push_async_exit(inner)
            except (TransientError, BackendError) as exc:
                exc.attempts = attempts
                raise
            reply = StreamReply(events, started, queue_s, attempts)
            try:
                yield reply
            except Exception as exc:
                self._observe(request, endpoint, started - asked, reply.latency_s, exc)
                raise
            finally:
                await reply.aclose()
            whole = Completion((reply.text,), reply.prompt_tokens, reply.completion_tokens)
            self._observe(request, endpoint, started - asked, reply.latency_s, whole)

    def _observe(
        self, request: ChatRequest, endpoint: str, queue_s: float, latency_s: float, outcome: Completion | Exception
    ) -> None:
        if not self.observers:
            return
        ok = isinstance(outcome, Completion)
        record = AttemptRecord(
            stage=request.stage,
            endpoint=endpoint,
            queue_s=queue_s,
            latency_s=latency_s,
            ok=ok,
            error="" if ok else f"{type(outcome).__name__}: {outcome}",
            prompt_tokens=outcome.prompt_tokens if isinstance(outcome, Completion) else None,
            completion_tokens=outcome.completion_tokens if isinstance(outcome, Completion) else None,
            n=request.n,
            priority=current_priority(),
        )
        for observer in self.observers:
            observer(record)

    def _retrying(self, request: ChatRequest) -> AsyncRetrying:
        """The tenacity loop of one request (at most ``timeout_attempts`` after a timeout)."""

        def announce(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            self.retries.add(exc)
            log.debug(
                "retrying request",
                backend=self.label,
                stage=request.stage,
                attempt=state.attempt_number,
                reason=_reason(exc),
                wait_s=round(state.upcoming_sleep, 3),
            )

        return AsyncRetrying(
            retry=retry_if_exception_type(TransientError),
            stop=stop_after_attempt(self.retry.max_attempts) | _StopAfterTimeouts(self.retry.timeout_attempts),
            wait=self._wait,
            sleep=anyio.sleep,
            before_sleep=announce,
            reraise=True,
        )

    def _pick(self) -> str:
        """The endpoint for the next attempt."""
        return self.limits.pick(self.endpoints, self.max_concurrency, key=current_lane(), routing=self.routing)

    def _wait(self, state: RetryCallState) -> float:
        """Jittered exponential backoff, or the server's ``Retry-After`` when longer."""
        jittered = wait_random_exponential(multiplier=self.retry.backoff_s, max=self.retry.max_backoff_s)
        backoff = jittered(state)
        exc = state.outcome.exception() if state.outcome else None
        asked = exc.retry_after if isinstance(exc, TransientError) else None
        return max(backoff, asked or 0.0)


RETRY_LOG_INTERVAL_S = 30.0
"""Seconds between two ``retries`` warnings of one backend (the first retry is logged at once)."""

_STATUS = re.compile(r"(\d{3}) from ")


def retry_cause(exc: BaseException | None) -> str:
    """What a retried failure was: ``timeout``, ``HTTP 503``, ``connection`` or the error's type name."""
    text = str(exc) if exc is not None else ""
    if timed_out(exc):
        return "timeout"
    if status := _STATUS.match(text):
        return f"HTTP {status.group(1)}"
    if text.startswith(("connection", "stream from")):
        return "connection"
    return type(exc).__name__


class RetryTally:
    """A backend's retries counted by :func:`retry_cause`, logged as one ``retries`` warning per ``interval_s``.

    The first retry is logged at once; :meth:`flush` (on close) logs the rest. ``clock`` is monotonic seconds (tests).
    """

    def __init__(
        self, label: str, interval_s: float = RETRY_LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.label, self.interval_s, self.clock = label, interval_s, clock
        self.pending: Counter[str] = Counter()
        self.total = 0
        self._since = clock()
        self._logged: float | None = None

    def add(self, exc: BaseException | None) -> None:
        """Count one retry of ``exc``; log when the interval has passed."""
        self.pending[retry_cause(exc)] += 1
        self.total += 1
        if self._logged is None or self.clock() - self._logged >= self.interval_s:
            self.flush()

    def flush(self) -> None:
        """Log the retries counted since the last line, if any."""
        if not self.pending:
            return
        now = self.clock()
        log.warning(
            "retries",
            backend=self.label,
            count=sum(self.pending.values()),
            by_cause=dict(self.pending.most_common()),
            over_s=round(now - (self._logged if self._logged is not None else self._since), 1),
            total=self.total,
        )
        self.pending.clear()
        self._logged = now


def timed_out(exc: BaseException | None) -> bool:
    """Whether ``exc`` is a :class:`TimeoutError` or was raised from one."""
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "__cause__", None), TimeoutError)


def _reason(exc: BaseException | None) -> str:
    return "" if exc is None else f"{type(exc).__name__}: {exc}"


@dataclass(slots=True)
class _Tally:
    """A request's attempts so far, their slot waits (seconds) and the reason the last failed one failed."""

    attempts: int = 0
    queue_s: float = 0.0
    failure: str | None = None


class _StopAfterTimeouts(stop_base):
    """Stop after ``attempts`` attempts when the last one timed out."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def __call__(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        return state.attempt_number >= self.attempts and timed_out(exc)


BackendFactory = Callable[[BackendConfig], Transport | None]
"""``settings -> transport`` of a registered backend; ``None`` for one without a model (``offline``)."""

BACKENDS: Registry[BackendFactory] = Registry("backend", plugins=("ceb.backends",))
"""Every backend by name; the modules of :mod:`ceb.backends` are imported on the first look-up (not vLLM itself)."""


def register_backend(name: str, *, extra: str | None = None) -> Callable[[BackendFactory], BackendFactory]:
    """Register the decorated factory as ``backend.name = name``; ``extra`` is the ``pip install`` extra it needs."""
    return BACKENDS.add(name, extra=extra)


def open_backend(
    settings: BackendConfig, limits: EndpointLimits | None = None, cache: ReplyCache | None = None
) -> ChatBackend | None:
    """The backend ``settings.name``: its registered transport in a :class:`ChatBackend`; ``None`` for ``offline``.

    The client takes ``max_concurrency``, the retry fields and ``routing`` from ``settings``, the run's ``limits`` and a
    step of the run's ``cache``; the caller closes it.

    Raises:
        ConfigError: Unknown backend, or a setting it needs is missing or refused.
    """
    transport = BACKENDS.get(settings.name)(settings)
    if transport is None:
        return None
    return ChatBackend(
        transport,
        max_concurrency=settings.max_concurrency,
        retry=settings,
        limits=limits,
        routing=settings.routing,
        cache=None if cache is None else cache.step(settings),
    )
