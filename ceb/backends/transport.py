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
    """One chat-completions request, independent of the wire format; ``max_tokens`` is per choice.

    ``messages`` are ``{"role", "content"}`` mappings, system first; ``schema_name`` is OpenAI's ``json_schema.name``;
    ``logprobs`` and ``top_logprobs`` (at most 20 at OpenAI) are OpenAI's; ``stage`` is for logs and accounting, never
    sent. ``extra`` holds server-specific body fields sent as given (vLLM's ``prompt_logprobs``,
    ``continue_final_message``, ``add_generation_prompt``, ``echo``) and must not repeat a field set otherwise. The
    mappings make a request comparable, not hashable.
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
    """One token position as a server reported it: its text, natural-log ``logprob`` (``<= 0``) and alternatives.

    ``top`` is ``(token, logprob)`` of the likeliest tokens, likeliest first, the token itself included when it ranks:
    OpenAI's ``top_logprobs`` for generated tokens, the top ``K`` of vLLM's ``prompt_logprobs=K`` for prompt ones
    (``token`` is then vLLM's ``decoded_token`` and ``rank`` its vocabulary rank, 1 the likeliest).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    rank: int | None = None


@dataclass(frozen=True, slots=True)
class Completion:
    """What one successful attempt returns: ``texts`` of shape ``(n,)`` and what the server said of them.

    Token counts are ``None`` where the server gave none (``completion_tokens`` sums the choices). ``logprobs`` has one
    entry per choice (``None`` for a choice without; ``None`` for all when none had any); ``prompt_logprobs`` is vLLM's,
    one entry per templated prompt token, the first ``None`` (read lazily from a reply: ``PromptLogprobs``).
    """

    texts: tuple[str, ...]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    model: str = ""
    logprobs: tuple[tuple[TokenLogprob, ...] | None, ...] | None = None
    prompt_logprobs: Sequence[TokenLogprob | None] | None = None


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """A finished call: the completion and where the time went.

    ``latency_s``: seconds in the server for the successful attempt; ``queue_s``: seconds waiting for slots over all
    attempts; ``retry_reason``: ``"<Type>: <message>"`` of the last failed attempt.
    """

    completion: Completion
    latency_s: float
    queue_s: float
    attempts: int
    retry_reason: str | None = None


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One event of a streamed reply: the ``text`` added to choice 0 (OpenAI's ``delta.content``) and what ends it.

    ``has_choice`` is ``False`` for the trailing usage event, which carries the token counts; TTFT is taken at the first
    event with a choice, as in vLLM's benchmark.
    """

    text: str = ""
    has_choice: bool = True
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """The model behind an endpoint as its server reports it; the reply cache keys on it and a run records it.

    ``model`` is the served id (vLLM's ``--served-model-name``); ``root`` (the weights loaded), ``max_model_len``
    (tokens) and ``server_version`` are vLLM's ``GET /v1/models`` and ``GET /version`` facts, ``None`` elsewhere
    (OpenAI); ``weights_digest`` is :func:`weights_digest` of ``root``.
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

    :meth:`send`, the one abstract method, maps the outcome onto a :class:`Completion`, :class:`TransientError` (another
    attempt may help), :class:`~ceb.errors.BackendError` (refused) or :class:`~ceb.errors.FatalBackendError` (the
    endpoint cannot serve the run). Retries, slots, routing, priority, observers and the cache are the client's
    (:class:`~ceb.backends.base.ChatBackend`); the other members are hooks with safe defaults. ``endpoint`` is a base
    URL or engine name, several being replicas (:class:`ValueError` for none).
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
