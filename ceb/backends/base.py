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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anyio
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from ceb.backends.scheduling import EndpointLimits, Routing, current_lane, current_priority
from ceb.errors import BackendError

__all__ = [
    "AttemptRecord",
    "ChatBackend",
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "EndpointLimits",
    "RetryPolicy",
    "TokenLogprob",
    "TransientError",
]

Message = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat-completions request, independent of the wire format.

    Attributes:
        messages: ``({"role": ..., "content": ...}, ...)`` in order; system first.
        temperature: Sampling temperature (the critic uses 0, hindsight uses tau).
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
    """

    completion: Completion
    latency_s: float
    queue_s: float
    attempts: int


class TransientError(Exception):
    """A failure worth retrying (timeouts, 429, 5xx, dropped connections).

    Attributes:
        retry_after: Seconds the server asked us to wait (``Retry-After``), if it did.
        attempts: Attempts made before giving up (set by :meth:`ChatBackend.complete`).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.attempts = 1


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How transient failures are retried (tenacity).

    Attributes:
        max_attempts: Attempts per request, the first included.
        backoff_s: Multiplier of the jittered exponential backoff, in seconds.
        max_backoff_s: Cap on one wait, in seconds; a longer ``Retry-After`` is still honoured.
    """

    max_attempts: int = 6
    backoff_s: float = 0.5
    max_backoff_s: float = 30.0


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
        retry: RetryPolicy | None = None,
        limits: EndpointLimits | None = None,
        routing: Routing = "affinity",
    ) -> None:
        self.endpoints: tuple[str, ...] = (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)
        if not self.endpoints:
            raise ValueError("a backend needs at least one endpoint")
        self.endpoint = self.endpoints[0] if len(self.endpoints) == 1 else ",".join(self.endpoints)
        self.max_concurrency = max_concurrency
        self.retry = retry or RetryPolicy()
        self._limits = limits or EndpointLimits()
        self.routing: Routing = routing
        self.observers: list[Callable[[AttemptRecord], None]] = []
        """Called with an :class:`AttemptRecord` after every attempt (benchmarks and fault accounting)."""

    @property
    def label(self) -> str:
        """``name@endpoint``, as shown in errors and logs."""
        return f"{self.name}@{self.endpoint}"

    @abstractmethod
    async def _complete(self, request: ChatRequest, endpoint: str) -> Completion:
        """Send one attempt of ``request`` to ``endpoint`` (one of :attr:`endpoints`).

        Raise :class:`TransientError` for failures worth retrying.
        """

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
        retrying = AsyncRetrying(
            retry=retry_if_exception(self.should_retry),
            stop=stop_after_attempt(self.retry.max_attempts),
            wait=self._wait,
            sleep=anyio.sleep,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    attempts += 1
                    asked = time.perf_counter()
                    endpoint = self._limits.pick(
                        self.endpoints, self.max_concurrency, key=current_lane(), routing=self.routing
                    )
                    async with self._limits.slot(endpoint, self.max_concurrency):
                        started = time.perf_counter()
                        queue_s += started - asked
                        try:
                            completion = await self._complete(request, endpoint)
                        except Exception as exc:
                            self._observe(request, endpoint, started - asked, time.perf_counter() - started, exc)
                            raise
                        latency_s = time.perf_counter() - started
                        self._observe(request, endpoint, started - asked, latency_s, completion)
        except (TransientError, BackendError) as exc:
            exc.attempts = attempts  # so a failed step still reports the requests it cost
            raise
        return ChatResponse(completion=completion, latency_s=latency_s, queue_s=queue_s, attempts=attempts)
