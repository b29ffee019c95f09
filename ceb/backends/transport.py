"""What a provider implements and returns: the :class:`Transport` contract and the request and reply types.

One transport per provider: :mod:`ceb.backends.openai`, :mod:`ceb.backends.vllm_engine`, :mod:`ceb.backends.batch`,
:mod:`ceb.backends.scripted`. The policy around it is the client's, :class:`~ceb.backends.base.ChatBackend`.
"""

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
    """What a transport returns from one successful attempt (:meth:`Transport.send`).

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
    """One event of a streamed reply, as a transport's :meth:`Transport.open_stream` yields it.

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


@dataclass(frozen=True, slots=True)
class ModelIdentity:
    """What identifies the model behind an endpoint, as its server reports it (asked once per run).

    Two servers under one name and URL are the same model only when these agree: the reply cache keys its entries
    on them (:mod:`ceb.backends.cache`) and a run records them (``summary.json``'s ``provenance``).

    Attributes:
        model: The served model's id (vLLM's ``--served-model-name``, else its model path).
        root: The weights the server loaded, where it says (vLLM's ``root`` in ``GET /v1/models``: the model
            directory or hub name); ``None`` where it does not (OpenAI).
        server_version: The server's version, where it reports one (vLLM's ``GET /version``).
        max_model_len: The context length in tokens the server reports (vLLM's ``max_model_len``), if any.
        weights_digest: :func:`weights_digest` of ``root`` when it is a directory on this machine, else ``None``.
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
"""Files of a weights directory :func:`weights_digest` reads at most (a model has tens; a larger tree is not one)."""


def weights_digest(root: str | None) -> str | None:
    """SHA-256 of the file list under ``root`` when it is a directory on this machine; ``None`` otherwise.

    Each file counts by its relative name, size in bytes and modification time in ns; a hub name, a path on
    another machine or too large a tree (:data:`_WEIGHT_FILES`) gives ``None``. It tells weights written anew
    under the same path (a checkpoint saved over the old one) from the old ones without reading gigabytes: any
    rewrite changes a file's modification time.
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
    """A failure worth retrying (timeouts, 429, 5xx, dropped connections).

    A timeout is a :class:`TransientError` raised from a :class:`TimeoutError` (``raise ... from exc``).

    Attributes:
        retry_after: Seconds the server asked us to wait (``Retry-After``), if it did.
        attempts: Attempts made before giving up (set by :meth:`~ceb.backends.base.ChatBackend.complete`).
    """

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.attempts = 1


class Transport(ABC):
    """How one provider reaches its model: one attempt of one request. A new backend writes this, nothing else.

    It turns a :class:`ChatRequest` into its wire form, sends it to the endpoint it is handed and maps the reply onto
    a :class:`Completion` and a failure onto the error classes: :class:`TransientError` (with ``retry_after``, the
    server's ``Retry-After`` in seconds) where another attempt may help, :class:`~ceb.errors.BackendError` for a
    refused request, :class:`~ceb.errors.FatalBackendError` for an endpoint that cannot serve the run. Retries,
    slots, routing, priority, observers and the cache are the client's (:class:`~ceb.backends.base.ChatBackend`).

    Only :meth:`send` is abstract. The other members are facts about the provider with safe defaults, each here
    because the client or a run needs it and only the provider knows it: :attr:`name` and :attr:`endpoints`
    (the client routes attempts among the endpoints and keys its slots on them), :meth:`open_stream` (a provider
    that streams says how; the default sends the whole request and yields it as one event), :attr:`adaptations`,
    :meth:`preflight`, :meth:`identify` and :meth:`describe` (what a run checks and records of its endpoint), and
    :meth:`aclose` (connections or an engine to release).

    Args:
        endpoint: Where requests go (base URL, or an in-process engine name); several are replicas of one model.

    Raises:
        ValueError: No endpoint given.
    """

    name: str = "chat"
    """The registered name (``backend.name``), shown in labels, logs and the run's provenance."""

    def __init__(self, endpoint: str | Sequence[str]) -> None:
        self.endpoints: tuple[str, ...] = (endpoint,) if isinstance(endpoint, str) else tuple(endpoint)
        """Where an attempt may go; the client picks one per attempt and holds a slot there."""
        if not self.endpoints:
            raise ValueError("a backend needs at least one endpoint")
        self.adaptations: dict[str, str] = {}
        """What this provider sends differently from its settings, learnt from the server's replies, one line each
        (the HTTP transport, :mod:`ceb.backends.openai`, fills it; ``ceb doctor`` and the run's provenance show it)."""

    @property
    def label(self) -> str:
        """``name@endpoint[,endpoint...]``, as shown in errors and logs."""
        return f"{self.name}@{','.join(self.endpoints)}"

    @abstractmethod
    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """Send one attempt of ``request`` to ``endpoint`` (one of :attr:`endpoints`) and read the whole reply.

        Raises:
            TransientError: A failure worth another attempt.
            BackendError: The request was refused (another attempt cannot help).
        """

    @asynccontextmanager
    async def open_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        """Open one attempt of ``request`` as a stream; entering sends it and checks the status.

        The default has no streaming on the wire: it sends the request whole (:meth:`send`) and yields its reply as
        one text event and one usage event, so every backend serves :meth:`~ceb.backends.base.ChatBackend.stream`
        (without early results). Leaving the context before the iterator ends closes the connection, which makes a
        vLLM server abort the request.

        Raises:
            TransientError: On entering, for failures worth retrying; errors while iterating are not retried.
        """
        completion = await self.send(request, endpoint)

        async def events() -> AsyncIterator[StreamChunk]:
            yield StreamChunk(text=completion.texts[0] if completion.texts else "")
            yield StreamChunk(
                has_choice=False, prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens
            )

        yield events()

    async def preflight(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Check, before a run starts, that every endpoint answers; the default has nothing to check.

        Raises:
            FatalBackendError: An endpoint cannot serve the run (down, wrong address, key or model).
        """

    async def identify(self) -> ModelIdentity | None:
        """What identifies the model behind the endpoints, as its server reports it; the default knows nothing.

        The reply cache keys its entries on it, so a provider that can ask should (and remember the answer).

        Raises:
            TransientError: The server could not be asked now (nothing is remembered; a later call asks again).
        """
        return None

    def describe(self) -> dict[str, Any]:
        """What a run records of this provider (``summary.json``'s ``provenance``).

        Its name, its endpoint(s) without credentials, the model its requests name, the structured-output mode and
        token field it sends now, and what it changed to be answered there (:attr:`adaptations`). Providers add
        what they know.
        """
        return {
            "backend": self.name,
            "endpoint": [public_url(e) for e in self.endpoints],
            "model": None,
            "structured_output": None,
            "token_limit_field": None,
            "adaptations": dict(self.adaptations),
        }

    async def aclose(self) -> None:  # noqa: B027 - a hook with a safe default, not abstract on purpose
        """Release connections (or stop an engine); the default holds none. A later request opens them again."""
