"""The :class:`Transport` contract a provider implements, and the request and reply types it speaks."""

from __future__ import annotations

import hashlib
import re
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ChatRequest",
    "ChatResponse",
    "Completion",
    "Message",
    "ModelIdentity",
    "StreamChunk",
    "TokenLogprob",
    "TransientError",
    "Transport",
    "public_url",
    "weights_digest",
]

Message = Mapping[str, str]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat-completions request, independent of the wire format.

    Attributes:
        messages: ``({"role": ..., "content": ...}, ...)`` in order; system first.
        temperature: Sampling temperature (the critic uses 0, hindsight its ``tau``).
        max_tokens: Upper bound on generated tokens per choice.
        n: Choices to sample from one prompt.
        json_schema: JSON Schema the reply must follow, where the server supports structured output.
        schema_name: OpenAI's ``json_schema.name``.
        seed: Sampling seed, where the server honours one.
        stage: The asking stage (``critic``, ``hindsight``); logs and accounting only, never sent.
        logprobs: OpenAI's ``logprobs``: the log-probability of every generated token.
        top_logprobs: OpenAI's ``top_logprobs`` (at most 20 there); needs ``logprobs``.
        extra: Server-specific body fields sent as given (vLLM's ``prompt_logprobs``, ``continue_final_message``,
            ``add_generation_prompt``, ``echo``); must not repeat a field set otherwise. Mappings make a request
            comparable but not hashable.
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
        token: The token's text (vLLM's ``decoded_token`` for prompt positions; ``""`` when none was given).
        logprob: Natural-log probability of this token at its position, ``<= 0``.
        top: ``(token, logprob)`` of the most likely tokens here, most likely first, the token itself included when it
            ranks: OpenAI's ``top_logprobs`` for generated tokens, the top ``K`` of vLLM's ``prompt_logprobs=K`` for
            prompt ones.
        rank: The token's rank in the vocabulary (1 = most likely), where the server says (vLLM, prompt positions).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """What one successful attempt returns (:meth:`Transport.send`).

    Attributes:
        texts: One reply text per choice, shape ``(n,)``.
        prompt_tokens: Input tokens the server counted, if it said.
        completion_tokens: Output tokens over all choices, if it said.
        model: The model name the server answered with.
        logprobs: Per choice, shape ``(n,)``, the generated tokens' log-probabilities (``None`` for a choice without);
            ``None`` when no choice had any.
        prompt_logprobs: vLLM's ``prompt_logprobs``, one entry per prompt token after the chat template, the first
            ``None`` (no context); ``None`` when not sent.
    """

    texts: tuple[str, ...]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    logprobs: tuple[tuple[TokenLogprob, ...] | None, ...] | None = None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A finished call: the completion and where the time went.

    Attributes:
        completion: The server's reply.
        latency_s: Seconds in the server for the successful attempt.
        queue_s: Seconds waiting for an endpoint slot, over all attempts.
        attempts: Attempts made (1 when the first succeeded).
        retry_reason: ``"<ExceptionType>: <message>"`` of the last failed attempt, if any.
    """

    completion: Completion
    latency_s: float
    queue_s: float
    attempts: int
    retry_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One event of a streamed reply (:meth:`Transport.open_stream`).

    Attributes:
        text: Text added to choice 0 (OpenAI's ``choices[0].delta.content``; ``""`` for the role-only and usage events).
        has_choice: The event carried a choice; ``False`` for the trailing usage event. TTFT is taken at the first event
            with a choice, as in vLLM's benchmark.
        prompt_tokens: ``usage.prompt_tokens`` of the usage event.
        completion_tokens: ``usage.completion_tokens`` of the usage event.
        finish_reason: ``choices[0].finish_reason`` of the event that ends the choice.
    """

    text: str = ""
    has_choice: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """The model behind an endpoint as its server reports it; the reply cache keys on it and a run records it.

    Attributes:
        model: The served model id (vLLM's ``--served-model-name``, else its model path).
        root: The weights loaded (vLLM's ``root`` in ``GET /v1/models``); ``None`` where not said (OpenAI).
        server_version: vLLM's ``GET /version``, if any.
        max_model_len: Context length in tokens (vLLM's ``max_model_len``), if any.
        weights_digest: :func:`weights_digest` of ``root``.
    """

    model: str
    root: str | None = None
    server_version: str | None = None
    max_model_len: int | None = None
    weights_digest: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values."""
        return asdict(self)


_WEIGHT_FILES = 100_000
"""Files :func:`weights_digest` reads at most (a model directory has tens)."""


def weights_digest(root: str | None) -> str | None:
    """SHA-256 over ``(relative name, size in bytes, mtime in ns)`` of the files under ``root``, without reading them.

    A rewrite of the weights under the same path changes it. ``None`` for a hub name, a path not on this machine, or
    more than :data:`_WEIGHT_FILES` entries.
    """
    if not root:
        return None
    path = Path(root).expanduser()
    try:
        if not path.is_dir():
            return None
        files = []
        for i, f in enumerate(sorted(path.rglob("*"))):
            if i >= _WEIGHT_FILES:
                return None
            if f.is_file():
                stat = f.stat()
                files.append(f"{f.relative_to(path).as_posix()}\t{stat.st_size}\t{stat.st_mtime_ns}")
    except OSError:
        return None
    return hashlib.sha256("\n".join(files).encode()).hexdigest()


def public_url(url: str) -> str:
    """``url`` without credentials (``user:password@``), as a record or an error message may show it."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@", r"\1", url)


class TransientError(Exception):
    """A failure worth retrying (timeout, 429, 5xx, dropped connection); a timeout is raised from a TimeoutError.

    Attributes:
        retry_after: Seconds the server asked to wait (``Retry-After``), if it did.
        attempts: Attempts made before giving up (set by the client).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.attempts = 1


class Transport(ABC):
    """One provider's attempt at one request; a new backend subclasses this and nothing else.

    :meth:`send` (the one abstract method) builds the wire form, sends it to the endpoint it is given and maps the
    outcome: a :class:`Completion`, :class:`TransientError` where another attempt may help,
    :class:`~ceb.errors.BackendError` for a refused request, :class:`~ceb.errors.FatalBackendError` for an endpoint that
    cannot serve the run. Retries, slots, routing, priority, observers and the cache are the client's
    (:class:`~ceb.backends.base.ChatBackend`). The other members are hooks with safe defaults.

    Args:
        endpoint: Base URL or engine name; several are replicas of one model.

    Raises:
        ValueError: No endpoint given.
    """

    name: str = "chat"
    """The registered name (``backend.name``), shown in labels, logs and provenance."""

    def __init__(self, endpoint: str | Sequence[str]) -> None:
        self.endpoints: tuple[str, ...] = (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)
        if not self.endpoints:
            raise ValueError("a backend needs at least one endpoint")
        self.adaptations: dict[str, str] = {}
        """What this provider sends differently from its settings, learnt from the server, one line each (``ceb doctor``
        and the provenance show it)."""

    @property
    def label(self) -> str:
        """``name@endpoint[,endpoint...]``."""
        return f"{self.name}@{','.join(self.endpoints)}"

    @abstractmethod
    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """Send one attempt of ``request`` to ``endpoint`` and read the whole reply.

        Raises:
            TransientError: A failure worth another attempt.
            BackendError: The request was refused.
        """

    @asynccontextmanager
    async def open_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        """Open one attempt as a stream of :class:`StreamChunk`; entering sends it and checks the status.

        The default sends the request whole and yields one text and one usage event. Leaving early closes the
        connection, which makes vLLM abort the request.

        Raises:
            TransientError: On entering, for failures worth retrying (errors while iterating are not retried).
        """
        completion = await self.send(request, endpoint)

        async def events() -> AsyncIterator[StreamChunk]:
            yield StreamChunk(text=completion.texts[0] if completion.texts else "")
            yield StreamChunk(
                has_choice=False, prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens
            )

        yield events()

    async def preflight(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Check that every endpoint can serve the run; the default checks nothing.

        Raises:
            FatalBackendError: An endpoint is down or has the wrong address, key or model.
        """

    async def identify(self) -> ModelIdentity | None:
        """The model behind the endpoints, remembered once asked; the default knows nothing.

        Raises:
            TransientError: The server could not be asked now.
        """
        return None

    def describe(self) -> dict[str, Any]:
        """What a run records of this provider (``summary.json``'s ``provenance``); URLs without credentials."""
        return {
            "backend": self.name,
            "endpoint": [public_url(e) for e in self.endpoints],
            "model": None,
            "structured_output": None,
            "token_limit_field": None,
            "adaptations": dict(self.adaptations),
        }

    async def aclose(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Release connections or an engine; a later request opens them again."""
