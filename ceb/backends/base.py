"""The chat backend: :class:`ChatBackend`, the one client that owns the policy around any provider's transport.

:func:`open_backend` builds one from a run's ``backend`` section over the transport its registered factory builds
(:data:`BACKENDS`). The request and reply types are :mod:`ceb.backends.transport`'s, named here too for its callers.
"""

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
    """A streamed reply being read: iterate it for text deltas; timings and usage fill in as it goes.

    Made by :meth:`ChatBackend.stream`, valid inside that context only. Times are seconds from when the request
    was sent (after the slot wait), measured with :func:`time.perf_counter` when each event was read, as vLLM's
    ``benchmarks/lib/endpoint_request_func.py`` does.

    Attributes:
        text: The text read so far (choice 0).
        ttft_s: Time to the first event with a choice (vLLM's TTFT), ``None`` before it.
        itl_s: Gaps between successive events with a choice after the first (vLLM's ITL), in order.
        latency_s: Time to the last event with a choice read so far (vLLM's E2EL once the reply is complete).
        queue_s: Seconds waited for an endpoint slot over every attempt at opening the stream.
        attempts: Attempts made at opening it.
        prompt_tokens: Input tokens, once the usage event arrived.
        completion_tokens: Output tokens, once the usage event arrived (absent when the stream was cut).
        finish_reason: Why generation ended (``stop``, ``length``), ``None`` until it did.
        done: The server sent the whole reply (the stream ended by itself, not cut by the reader).
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
        """Finalize the readers of the events (called by :meth:`ChatBackend.stream` when its context is left)."""
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
    """How transient failures are retried (tenacity), where no :class:`~ceb.config.BackendConfig` gives it.

    Tests set the waits to zero with it; a backend built from settings reads the same four fields from them.

    Attributes:
        max_attempts: Attempts per request, the first included.
        backoff_s: Multiplier of the jittered exponential backoff, in seconds.
        max_backoff_s: Cap on one wait, in seconds; a longer ``Retry-After`` is still honoured.
        timeout_attempts: Attempts per request when the last one timed out (at most ``max_attempts``). A retry
            restarts the generation from scratch, and a reply that outran the timeout once (a long budget on a
            loaded server) will most likely do so again: one more attempt covers a passing stall without paying
            the whole timeout ``max_attempts`` times (measured: a 768-token reply at 160 tokens/s passed a 120 s
            timeout and was retried 5 times, 12 minutes for one step).
    """

    max_attempts: int = 6
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    timeout_attempts: int = 2


RetrySettings = RetryPolicy | BackendConfig
"""What the retries read: a :class:`RetryPolicy` (tests), or the ``backend`` section's same four fields."""


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One attempt of one request, as :attr:`ChatBackend.observers` see it.

    Attributes:
        stage: The asking stage (``critic``, ``hindsight``, a baseline).
        endpoint: Where it went.
        queue_s: Seconds waiting for a slot before this attempt (client queue time, as vLLM's benchmark calls it).
        latency_s: Seconds from sending to the full reply or the failure (end-to-end latency of the attempt).
        ok: The attempt returned a completion.
        error: ``"<ExceptionType>: <message>"`` of a failed attempt; ``""`` when ``ok``.
        prompt_tokens: Input tokens the server counted, when it said.
        completion_tokens: Output tokens over all choices, when it said.
        n: Choices asked for.
        priority: The caller's scheduling priority (:func:`~ceb.backends.scheduling.priority`).
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

    :meth:`complete` goes through, in order: the reply cache (when the run has one: a hit sends nothing), the
    declared retries (tenacity: jittered exponential backoff that honours ``Retry-After``, per
    :class:`TransientError`), the endpoint :attr:`routing` picks for each attempt, a slot there at the caller's
    :func:`~ceb.backends.scheduling.priority` (its wait, ``queue_s``, measured apart from the server's time,
    ``latency_s``), the transport's :meth:`~Transport.send`, and the :attr:`observers`. :meth:`stream` takes the same
    steps but the cache. Pattern after httpx's ``Client`` over a ``BaseTransport`` and inspect_ai's ``Model`` over a
    ``ModelAPI``.

    Args:
        transport: The provider.
        max_concurrency: Requests in flight to each endpoint at most.
        retry: Retry policy for :class:`TransientError`; the default :class:`RetryPolicy` when ``None``.
        limits: Shared per-endpoint limits of the run; a private one when ``None``.
        routing: How an attempt picks among several endpoints: ``affinity`` (the caller's lane,
            :func:`~ceb.backends.scheduling.lane`, goes to its home replica unless that one is overloaded) or
            ``least_outstanding`` (:meth:`~ceb.backends.scheduling.EndpointLimits.pick`).
        cache: The run's reply cache as this backend consults it (:meth:`~ceb.backends.cache.ReplyCache.step`).
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
        """The endpoint, or the endpoints joined with ``,``."""
        self.label = transport.label
        """``name@endpoint``, as shown in errors and logs."""
        self.adaptations = transport.adaptations
        """What the transport sends differently from its settings (:attr:`Transport.adaptations`), as it learns it."""
        self.max_concurrency = max_concurrency
        self.retry: RetrySettings = retry or RetryPolicy()
        self.limits = limits or EndpointLimits()
        """The endpoint slots this backend takes its requests' slots from (the run's, when it was given them)."""
        self.routing: Routing = routing
        self.cache = cache
        self.observers: list[Callable[[AttemptRecord], None]] = []
        """Called with an :class:`AttemptRecord` after every attempt (benchmarks and fault accounting)."""
        self.retries = RetryTally(self.label)
        """The retries of this backend, logged as one warning line per interval (:class:`RetryTally`)."""

    async def preflight(self) -> None:
        """The transport's check that every endpoint answers (:meth:`Transport.preflight`), before a run starts.

        A run answered wholly from the cache still needs its endpoint for the rest, so it is not skipped.
        """
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
        """The reply to ``request``: from the cache, or sent under its endpoint's limit with transient failures retried.

        Each attempt goes to the endpoint :attr:`routing` picks (the caller's lane's home replica, or the one with
        the fewest outstanding requests) and waits there for a slot at the caller's
        :func:`~ceb.backends.scheduling.priority`; a retry may land on another replica.

        Returns:
            The completion with its server latency (seconds), slot wait (seconds) and attempt count.

        Raises:
            TransientError: The last attempt's failure once the retry budget is spent.
            Exception: Whatever :meth:`Transport.send` raised that is not a :class:`TransientError`.
        """
        if self.cache is None:
            return await self._send(request)
        return await self.cache.complete(request, self._send, self.transport.identify)

    async def _send(self, request: ChatRequest) -> ChatResponse:
        """``request`` sent through the retries, the routing, the slots and the observers."""
        queue_s = 0.0
        attempts = 0
        failure: str | None = None
        retrying = self._retrying(request)
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    asked = time.perf_counter()
                    endpoint = self._pick()
                    async with self.limits.slot(endpoint, self.max_concurrency):
                        started = time.perf_counter()
                        queue_s += started - asked
                        try:
                            completion = await self.transport.send(request, endpoint)
                        except Exception as exc:
                            self._observe(request, endpoint, started - asked, time.perf_counter() - started, exc)
                            failure = _reason(exc)
                            raise
                        latency_s = time.perf_counter() - started
                        self._observe(request, endpoint, started - asked, latency_s, completion)
        except (TransientError, BackendError) as exc:
            exc.attempts = attempts  # so a failed step still reports the requests it cost
            raise
        return ChatResponse(completion, latency_s, queue_s, attempts, failure)

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamReply]:
        """Send ``request`` (``n`` must be 1) under its endpoint's limit and read the reply as it is generated.

        ``async with chat.stream(request) as reply: async for delta in reply: ...``. Opening the stream (up to
        an HTTP 200) is retried like :meth:`complete`; a failure while reading is raised to the reader, not
        retried (part of the reply was already seen). The endpoint slot is held until the context is left;
        leaving it early cuts the reply (the server aborts the request). Observers get one
        :class:`AttemptRecord` per attempt; the successful one when the context is left, its ``latency_s``
        being the time to the last event read. Streams bypass the reply cache: a cut stream is not a whole reply.

        Yields:
            The :class:`StreamReply`.

        Raises:
            ValueError: ``request.n`` is not 1.
            TransientError: The last attempt's failure to open once the retry budget is spent.
            Exception: Whatever :meth:`Transport.open_stream` raised that is not a :class:`TransientError`.
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
        """The declared retry loop of one request.

        A :class:`TransientError` is retried, waiting :meth:`_wait`; after a timeout at most ``timeout_attempts``
        are made; each retry is a debug line (stage, attempt, reason, wait) and is counted in :attr:`retries`.
        """

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
        """The endpoint for the next attempt: the caller's lane's home replica, or the least loaded one."""
        return self.limits.pick(self.endpoints, self.max_concurrency, key=current_lane(), routing=self.routing)

    def _wait(self, state: RetryCallState) -> float:
        """Jittered exponential backoff, or longer when the server asked (``Retry-After``)."""
        jittered = wait_random_exponential(multiplier=self.retry.backoff_s, max=self.retry.max_backoff_s)
        backoff = jittered(state)
        exc = state.outcome.exception() if state.outcome else None
        asked = exc.retry_after if isinstance(exc, TransientError) else None
        return max(backoff, asked or 0.0)


RETRY_LOG_INTERVAL_S = 30.0
"""Seconds between two ``retries`` warning lines of one backend (the first retry is logged at once)."""

_STATUS = re.compile(r"(\d{3}) from ")


def retry_cause(exc: BaseException | None) -> str:
    """What a retried failure was, for counting: ``timeout``, ``HTTP 503``, ``connection`` or the error's type."""
    text = str(exc) if exc is not None else ""
    if timed_out(exc):
        return "timeout"
    if status := _STATUS.match(text):
        return f"HTTP {status.group(1)}"
    if text.startswith(("connection", "stream from")):
        return "connection"
    return type(exc).__name__


class RetryTally:
    """A backend's retries counted by cause and logged as one warning line per interval, not one per retry.

    The first retry is logged at once and later ones at most every ``interval_s`` seconds, as ``retries`` with
    ``count`` and ``by_cause`` (:func:`retry_cause`); :meth:`flush` (the backend's close) logs the rest. Each attempt
    stays a debug line.

    Args:
        label: The backend's ``name@endpoint``.
        interval_s: Seconds between two lines.
        clock: Monotonic seconds (tests).
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
        """Count one retry of ``exc``; log the counts when the interval has passed since the last line."""
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
    """Whether ``exc`` is a request timeout: a :class:`TimeoutError`, or an error raised from one."""
    return isinstance(exc, TimeoutError) or isinstance(getattr(exc, "__cause__", None), TimeoutError)


def _reason(exc: BaseException | None) -> str:
    return "" if exc is None else f"{type(exc).__name__}: {exc}"


class _StopAfterTimeouts(stop_base):
    """Stop once ``attempts`` attempts were made and the last one timed out (:attr:`RetryPolicy.timeout_attempts`)."""

    def __init__(self, attempts: int) -> None:
        self.attempts = attempts

    def __call__(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        return state.attempt_number >= self.attempts and timed_out(exc)


BackendFactory = Callable[[BackendConfig], Transport | None]
"""``settings -> transport``: a registered backend's provider, built from the run's ``backend`` section; ``None`` for
a backend with no language model (``offline``)."""

BACKENDS: Registry[BackendFactory] = Registry("backend", plugins=("ceb.backends",))
"""Every backend by name. Each module of :mod:`ceb.backends` registers its own with :func:`register_backend`
when imported; they are all imported on the first look-up (importing one does not import vLLM)."""


def register_backend(name: str, *, extra: str | None = None) -> Callable[[BackendFactory], BackendFactory]:
    """Register the decorated factory as backend ``name`` (``backend.name = name`` selects it).

    Args:
        name: The backend's name.
        extra: The ``pip install -e '.[extra]'`` that brings its dependencies, if any.
    """
    return BACKENDS.add(name, extra=extra)


def open_backend(
    settings: BackendConfig, limits: EndpointLimits | None = None, cache: ReplyCache | None = None
) -> ChatBackend | None:
    """The backend ``settings.name`` built from ``settings``: the one way every backend is opened.

    The registered factory builds the transport; it is wrapped once in the :class:`ChatBackend` with the section's
    policy (``max_concurrency``, the retry fields, ``routing``), the run's slots and the run's cache. The caller owns
    the result and closes it (:meth:`ChatBackend.aclose`).

    Args:
        settings: The ``backend`` section.
        limits: The run's endpoint slots, shared by every backend the run opens; private ones when ``None``.
        cache: The run's reply cache (:mod:`ceb.backends.cache`): every backend consults it, whichever it is.

    Returns:
        The backend, or ``None`` for a backend without a language model (``offline``).

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
