"""The chat backend contract: one abstract async call, with limits, retries and accounting shared.

A subclass only turns a :class:`ChatRequest` into its wire payload and the reply into a
:class:`Completion` (:meth:`ChatBackend._complete`). This base class owns what every backend needs the same
way: the per-endpoint concurrency limit, declared retries (tenacity: jittered exponential backoff that honours
``Retry-After``), and the time split between waiting for a slot (``queue_s``) and the server (``latency_s``).
Pattern after inspect_ai's ``ModelAPI`` and lm-eval's ``TemplateAPI``.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, Self

import anyio
import structlog
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from ceb.backends.scheduling import EndpointLimits, Routing, current_lane, current_priority
from ceb.config import BackendConfig
from ceb.errors import BackendError
from ceb.registry import Registry

log = structlog.get_logger(__name__)

__all__ = [
    "BACKENDS",
    "AttemptRecord",
    "BackendFactory",
    "BackendWrapper",
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "EndpointLimits",
    "RetryPolicy",
    "RetrySettings",
    "StreamChunk",
    "StreamReply",
    "TokenLogprob",
    "TransientError",
    "open_backend",
    "register_backend",
]

Message = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat-completions request, independent of the wire format.

    Attributes:
        messages: ``({"role": ..., "content": ...}, ...)`` in order; system first.
        temperature: Sampling temperature (the critic uses 0, hindsight its ``hindsight.temperature``, tau).
        max_tokens: Upper bound on generated tokens per choice.
        n: Number of choices to sample from one prompt.
        json_schema: JSON Schema the reply must follow, when the server supports structured output.
        schema_name: Name sent with the schema (OpenAI's ``json_schema.name``).
        seed: Sampling seed, when the server honours one.
        stage: Which stage asks (``critic``, ``hindsight``); for logs and accounting only.
        logprobs: Ask for the log-probability of every generated token (OpenAI's ``logprobs``).
        top_logprobs: Also ask for this many most likely alternatives per generated token (OpenAI's
            ``top_logprobs``, at most 20 there); needs ``logprobs``.
        extra: Server-specific body fields sent as they are, e.g. vLLM's ``prompt_logprobs``,
            ``continue_final_message``, ``add_generation_prompt`` or ``echo``. They must not repeat a field the
            request sets otherwise. Like ``messages`` and ``json_schema`` it is a mapping, so a request is
            compared by value but not hashed; the default is a fresh empty dict per request.
    """

    messages: tuple[Message, ...]
    temperature: float = 0.0
    max_tokens: int = 256
    n: int = 1
    json_schema: Mapping[str, Any] | None = None
    schema_name: str = "response"
    seed: int | None = None
    stage: str = ""
    logprobs: bool = False
    top_logprobs: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token position with its log-probability, as a server reported it.

    Attributes:
        token: The token's text (vLLM's ``decoded_token`` for prompt positions; ``""`` when the server gave
            no text).
        logprob: Natural-log probability of this token at its position, ``<= 0``.
        top: The most likely tokens at this position as ``(token, logprob)`` pairs, most likely first. It holds
            the token itself when it ranks among them. For a generated token these are OpenAI's
            ``top_logprobs`` (empty when none were asked for); for a prompt position, the top ``K`` of vLLM's
            ``prompt_logprobs=K``.
        rank: The token's rank in the whole vocabulary (1 = most likely), when the server said (vLLM does for
            prompt positions).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """What a subclass returns from one successful attempt.

    Attributes:
        texts: One reply text per choice, shape ``(n,)``.
        prompt_tokens: Input tokens the server counted, if it said.
        completion_tokens: Output tokens the server counted (all choices), if it said.
        model: Model name the server answered with.
        logprobs: Per choice (shape ``(n,)``), the generated tokens with their log-probabilities, or ``None``
            for a choice the server gave none for; ``None`` altogether when no choice had any.
        prompt_logprobs: vLLM's per-prompt-token log-probabilities (asked for with
            ``extra={"prompt_logprobs": K}``), one entry per prompt token after the chat template; the first
            entry, which has no context to be predicted from, is ``None``. ``None`` when the server sent none.
    """

    texts: tuple[str, ...]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    logprobs: tuple[tuple[TokenLogprob, ...] | None, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A finished call: the completion plus where the time went.

    Attributes:
        completion: The server's reply.
        latency_s: Seconds spent in the server for the successful attempt.
        queue_s: Seconds spent waiting for an endpoint slot, summed over attempts.
        attempts: Attempts made (1 when the first one succeeded).
        retry_reason: Why the last failed attempt failed (``"<ExceptionType>: <message>"``), when any did.
    """

    completion: Completion
    latency_s: float
    queue_s: float
    attempts: int
    retry_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One event of a streamed reply, as a subclass's :meth:`ChatBackend._stream` yields it.

    Attributes:
        text: The text added to choice 0 by this event (OpenAI's ``choices[0].delta.content``; ``""`` for the
            role-only first event and the usage event).
        has_choice: The event carried a choice (a token or the role); ``False`` for the trailing usage event.
            vLLM's benchmark counts time to first token at the first event with a choice, and so do we.
        prompt_tokens: ``usage.prompt_tokens`` when this event carries usage.
        completion_tokens: ``usage.completion_tokens`` when this event carries usage.
        finish_reason: ``choices[0].finish_reason`` when this event ends the choice.
    """

    text: str = ""
    has_choice: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


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


class TransientError(Exception):
    """A failure worth retrying (timeouts, 429, 5xx, dropped connections).

    A timeout is a :class:`TransientError` raised from a :class:`TimeoutError` (``raise ... from exc``).

    Attributes:
        retry_after: Seconds the server asked us to wait (``Retry-After``), if it did.
        attempts: Attempts made before giving up (set by :meth:`ChatBackend.complete`).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.attempts = 1


class RetrySettings(Protocol):
    """What the retries read: :class:`~ceb.config.BackendConfig` itself, or a :class:`RetryPolicy` (tests)."""

    @property
    def max_attempts(self) -> int:
        """Attempts per request, the first included."""
        ...

    @property
    def backoff_s(self) -> float:
        """Multiplier of the jittered exponential backoff, in seconds."""
        ...

    @property
    def max_backoff_s(self) -> float:
        """Cap on one wait, in seconds."""
        ...

    @property
    def timeout_attempts(self) -> int:
        """Attempts per request when the last one timed out."""
        ...


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


class ChatBackend(ABC):
    """Base class of every LLM backend.

    Args:
        endpoint: Where requests go (base URL, or an in-process engine name); keys the concurrency limit.
            Several endpoints (replicas of one model) are chosen per attempt by ``routing``.
        max_concurrency: Requests in flight to each endpoint at most.
        retry: Retry policy for :class:`TransientError`.
        limits: Shared per-endpoint limits of the run; a private one when ``None``.
        routing: How an attempt picks among several endpoints: ``affinity`` (the caller's lane,
            :func:`~ceb.backends.scheduling.lane`, goes to its home replica unless that one is overloaded) or
            ``least_outstanding`` (:meth:`~ceb.backends.scheduling.EndpointLimits.pick`).

    Raises:
        ValueError: No endpoint given.
    """

    name: str = "chat"

    def __init__(
        self,
        *,
        endpoint: str | Sequence[str],
        max_concurrency: int = 64,
        retry: RetrySettings | None = None,
        limits: EndpointLimits | None = None,
        routing: Routing = "affinity",
    ) -> None:
        self.endpoints: tuple[str, ...] = (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)
        if not self.endpoints:
            raise ValueError("a backend needs at least one endpoint")
        self.endpoint = self.endpoints[0] if len(self.endpoints) == 1 else ",".join(self.endpoints)
        self.max_concurrency = max_concurrency
        self.retry: RetrySettings = retry or RetryPolicy()
        self._limits = limits or EndpointLimits()
        self.routing: Routing = routing
        self.observers: list[Callable[[AttemptRecord], None]] = []
        """Called with an :class:`AttemptRecord` after every attempt (benchmarks and fault accounting)."""

    @property
    def limits(self) -> EndpointLimits:
        """The endpoint slots this backend takes its requests' slots from (the run's, when it was given them)."""
        return self._limits

    @property
    def label(self) -> str:
        """``name@endpoint``, as shown in errors and logs."""
        return f"{self.name}@{self.endpoint}"

    @abstractmethod
    async def _complete(self, request: ChatRequest, endpoint: str) -> Completion:
        """Send one attempt of ``request`` to ``endpoint`` (one of :attr:`endpoints`).

        Raise :class:`TransientError` for failures worth retrying.
        """

    def _stream(self, request: ChatRequest, endpoint: str) -> AbstractAsyncContextManager[AsyncIterator[StreamChunk]]:
        """Open one attempt of ``request`` as a stream; entering sends it and checks the status.

        The default has no streaming transport: it completes the request at once and yields its text as one
        event (so every backend can serve :meth:`stream`, without early results). Leaving the context before
        the iterator ends closes the connection, which makes a vLLM server abort the request.

        Raise :class:`TransientError` on entering for failures worth retrying; errors while iterating are
        not retried.
        """
        return self._whole_as_stream(request, endpoint)

    @asynccontextmanager
    async def _whole_as_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        completion = await self._complete(request, endpoint)

        async def events() -> AsyncIterator[StreamChunk]:
            yield StreamChunk(text=completion.texts[0] if completion.texts else "")
            yield StreamChunk(
                has_choice=False,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
            )

        yield events()

    @asynccontextmanager
    async def stream(self, request: ChatRequest) -> AsyncIterator[StreamReply]:
        """Send ``request`` (``n`` must be 1) under its endpoint's limit and read the reply as it is generated.

        ``async with chat.stream(request) as reply: async for delta in reply: ...``. Opening the stream (up to
        an HTTP 200) is retried like :meth:`complete`; a failure while reading is raised to the reader, not
        retried (part of the reply was already seen). The endpoint slot is held until the context is left;
        leaving it early cuts the reply (the server aborts the request). Observers get one
        :class:`AttemptRecord` per attempt; the successful one when the context is left, its ``latency_s``
        being the time to the last event read.

        Yields:
            The :class:`StreamReply`.

        Raises:
            ValueError: ``request.n`` is not 1.
            TransientError: The last attempt's failure to open once the retry budget is spent.
            Exception: Whatever :meth:`_stream` raised that :meth:`should_retry` declined.
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
                        await inner.enter_async_context(self._limits.slot(endpoint, self.max_concurrency))
                        started = time.perf_counter()
                        queue_s += started - asked
                        try:
                            events = await inner.enter_async_context(self._stream(request, endpoint))
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
            self._observe(
                request,
                endpoint,
                started - asked,
                reply.latency_s,
                Completion(
                    texts=(reply.text,),
                    prompt_tokens=reply.prompt_tokens,
                    completion_tokens=reply.completion_tokens,
                    model="",
                ),
            )

    def should_retry(self, exc: BaseException) -> bool:
        """Decide per error class whether another attempt may succeed; default: :class:`TransientError`."""
        return isinstance(exc, TransientError)

    def retry_after(self, exc: BaseException) -> float | None:
        """Seconds the server asked to wait before the next attempt, if any."""
        return exc.retry_after if isinstance(exc, TransientError) else None

    async def preflight(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Check, before a run starts, that every endpoint answers; the default has nothing to check.

        Raises:
            FatalBackendError: An endpoint cannot serve the run (down, wrong address, key or model).
        """

    async def aclose(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Release connections; the default holds none."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

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

        :meth:`should_retry` decides per error and :meth:`_wait` between attempts; after a timeout at most
        ``timeout_attempts`` are made; each retry is logged as a warning (stage, attempt, reason, wait).
        """

        def announce(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning(
                "retrying request",
                backend=self.label,
                stage=request.stage,
                attempt=state.attempt_number,
                reason=_reason(exc),
                wait_s=round(state.upcoming_sleep, 3),
            )

        return AsyncRetrying(
            retry=retry_if_exception(self.should_retry),
            stop=stop_after_attempt(self.retry.max_attempts) | _StopAfterTimeouts(self.retry.timeout_attempts),
            wait=self._wait,
            sleep=anyio.sleep,
            before_sleep=announce,
            reraise=True,
        )

    def _pick(self) -> str:
        """The endpoint for the next attempt: the caller's lane's home replica, or the least loaded one."""
        return self._limits.pick(self.endpoints, self.max_concurrency, key=current_lane(), routing=self.routing)

    def _wait(self, state: RetryCallState) -> float:
        jittered = wait_random_exponential(multiplier=self.retry.backoff_s, max=self.retry.max_backoff_s)
        backoff = jittered(state)
        exc = state.outcome.exception() if state.outcome else None
        asked = self.retry_after(exc) if exc is not None else None
        return max(backoff, asked or 0.0)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` under its endpoint's limit, retrying transient failures.

        Each attempt goes to the endpoint :attr:`routing` picks (the caller's lane's home replica, or the one with
        the fewest outstanding requests) and waits there for a slot at the caller's
        :func:`~ceb.backends.scheduling.priority`; a retry may land on another replica.

        Returns:
            The completion with its server latency (seconds), slot wait (seconds) and attempt count.

        Raises:
            TransientError: The last attempt's failure once the retry budget is spent.
            Exception: Whatever :meth:`_complete` raised that :meth:`should_retry` declined.
        """
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
                    async with self._limits.slot(endpoint, self.max_concurrency):
                        started = time.perf_counter()
                        queue_s += started - asked
                        try:
                            completion = await self._complete(request, endpoint)
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


class BackendWrapper(Protocol):
    """What :func:`open_backend` wraps every backend it opens in: the reply cache (:mod:`ceb.backends.cache`)."""

    def wrap(self, backend: ChatBackend, settings: BackendConfig) -> ChatBackend:
        """``backend``, opened from ``settings``, behind the wrapper."""
        ...


BackendFactory = Callable[[BackendConfig, EndpointLimits], ChatBackend | None]
"""``(settings, limits) -> backend``: a registered backend, built from the run's ``backend`` section with the
run's endpoint slots; ``None`` for a backend with no language model (``offline``)."""

BACKENDS: Registry[BackendFactory] = Registry("backend", plugins=("ceb.backends",))
"""Every backend by name. Each module of :mod:`ceb.backends` registers its own with :func:`register_backend`
when imported; they are all imported on the first look-up (importing one does not import vLLM)."""


def register_backend(name: str, *, extra: str | None = None) -> Callable[[BackendFactory], BackendFactory]:
    """Register the decorated factory as backend ``name`` (``backend.name = name`` selects it).

    Args:
        name: The backend's name.
        extra: The ``pip install 'critic-experience-bank[extra]'`` that brings its dependencies, if any.
    """
    return BACKENDS.add(name, extra=extra)


def open_backend(
    settings: BackendConfig, limits: EndpointLimits | None = None, cache: BackendWrapper | None = None
) -> ChatBackend | None:
    """The backend ``settings.name`` built from ``settings``: the one way every backend is opened.

    The caller owns the result and closes it (:meth:`ChatBackend.aclose`).

    Args:
        settings: The ``backend`` section.
        limits: The run's endpoint slots, shared by every backend the run opens; private ones when ``None``.
        cache: The run's reply cache (:mod:`ceb.backends.cache`): the backend is wrapped in it, whichever it is.

    Returns:
        The backend, or ``None`` for a backend without a language model (``offline``).

    Raises:
        ConfigError: Unknown backend, or a setting it needs is missing or refused.
    """
    backend = BACKENDS.get(settings.name)(settings, limits or EndpointLimits())
    return backend if backend is None or cache is None else cache.wrap(backend, settings)
