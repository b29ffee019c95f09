"""Ask an endpoint until its reply can be read: the request loop both LLM stages share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ceb.backends.base import ChatBackend, ChatRequest, TransientError
from ceb.errors import BackendError
from ceb.stages.base import CallStats

__all__ = ["Answer", "ask"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """The outcome of :func:`ask`.

    Attributes:
        value: The parsed reply, or ``None`` when none could be had.
        raw: The last reply text (``""`` when the endpoint never answered).
        error: Why ``value`` is ``None``; ``None`` on success.
        stats: Requests, tokens and time over every attempt and re-ask.
    """

    value: T | None
    raw: str
    error: str | None
    stats: CallStats


async def ask(chat: ChatBackend, request: ChatRequest, parse: Callable[[str], T], format_retries: int) -> Answer[T]:
    """Send ``request``; re-ask up to ``format_retries`` times while ``parse`` raises ``ValueError``.

    Transient endpoint failures are retried inside ``chat`` (its retry policy); what is left after that, and
    a reply still unreadable after the re-asks, come back as an :class:`Answer` with ``error`` set. Nothing
    is raised for one request's failure, so a single bad step cannot stop a stream.
    """
    stats = CallStats()
    raw = ""
    error = "no attempt made"
    for _ in range(1 + format_retries):
        try:
            resp = await chat.complete(request)
        except (TransientError, BackendError) as exc:
            return Answer(None, raw, f"endpoint failed: {exc}", stats)
        c = resp.completion
        stats += CallStats(resp.latency_s, resp.queue_s, resp.attempts, c.prompt_tokens, c.completion_tokens)
        raw = c.texts[0] if c.texts else ""
        try:
            return Answer(parse(raw), raw, None, stats)
        except ValueError as exc:
            error = f"unreadable reply: {exc}"
    return Answer(None, raw, error, stats)
