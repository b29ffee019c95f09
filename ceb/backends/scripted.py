"""An in-process transport answering from a Python function, for tests and dry runs; it records every request."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio

from ceb.backends.base import ChatBackend, EndpointLimits, RetryPolicy
from ceb.backends.transport import ChatRequest, Completion, StreamChunk, Transport

__all__ = ["Responder", "ScriptedChat", "ScriptedTransport"]

Responder = Callable[[ChatRequest], str | Sequence[str]]
"""Maps a request to one reply text, or one per choice; may raise to simulate failures."""


class ScriptedTransport(Transport):
    """Answers each request with ``responder(request)``, words counted as tokens; records ``requests``.

    A streamed reply comes in pieces of ``chunk_chars`` characters, ``chunk_delay_s`` seconds apart; ``streamed`` counts
    the pieces each reader took.
    """

    name = "scripted"

    def __init__(self, responder: Responder, *, chunk_chars: int = 1, chunk_delay_s: float = 0.0) -> None:
        super().__init__("scripted://local")
        self.responder = responder
        self.requests: list[ChatRequest] = []
        self.chunk_chars = chunk_chars
        self.chunk_delay_s = chunk_delay_s
        self.streamed: list[int] = []

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        """The responder's reply."""
        self.requests.append(request)
        reply = self.responder(request)
        texts = (reply,) * request.n if isinstance(reply, str) else tuple(reply)
        prompt_words = sum(len(m["content"].split()) for m in request.messages)
        return Completion(
            texts=texts,
            prompt_tokens=prompt_words,
            completion_tokens=sum(len(t.split()) for t in texts),
            model="scripted",
        )

    @asynccontextmanager
    async def open_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        """The responder's first reply in pieces, after a role-only event."""
        self.requests.append(request)
        reply = self.responder(request)
        text = reply if isinstance(reply, str) else reply[0]
        index = len(self.streamed)
        self.streamed.append(0)

        async def events() -> AsyncIterator[StreamChunk]:
            yield StreamChunk()  # the role-only first event, as OpenAI and vLLM send it
            for i in range(0, len(text), self.chunk_chars):
                await anyio.sleep(self.chunk_delay_s)
                self.streamed[index] += 1
                yield StreamChunk(text=text[i : i + self.chunk_chars])
            yield StreamChunk(has_choice=False, completion_tokens=self.streamed[index])

        yield events()


class ScriptedChat(ChatBackend):
    """The client over a :class:`ScriptedTransport` with its records; ``retry``: 3 attempts, zero waits."""

    transport: ScriptedTransport

    def __init__(
        self,
        responder: Responder,
        *,
        max_concurrency: int = 64,
        retry: RetryPolicy | None = None,
        limits: EndpointLimits | None = None,
        chunk_chars: int = 1,
        chunk_delay_s: float = 0.0,
    ) -> None:
        super().__init__(
            ScriptedTransport(responder, chunk_chars=chunk_chars, chunk_delay_s=chunk_delay_s),
            max_concurrency=max_concurrency,
            retry=retry or RetryPolicy(max_attempts=3, backoff_s=0.0, max_backoff_s=0.0),
            limits=limits,
        )
        self.requests = self.transport.requests
        self.streamed = self.transport.streamed
