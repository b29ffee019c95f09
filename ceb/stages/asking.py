"""Ask an endpoint until its reply can be read: the request loop every stage that asks a model shares."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from ceb.backends.base import ChatBackend, ChatRequest, Completion, TokenLogprob, TransientError
from ceb.errors import BackendError, FatalBackendError, UnsupportedFeatureError
from ceb.stages.base import NOT_AVAILABLE, CallStats, CriticResult

__all__ = ["BOUNDED_TEXT_MAX_CHARS", "REASK_PREFIX", "Answer", "ask", "bounded_text", "reask"]

REASK_PREFIX = "Your reply could not be read: "
"""Start of the corrective turn added to a re-ask."""

T = TypeVar("T")


BOUNDED_TEXT_MAX_CHARS = 128
"""Longest bound :func:`bounded_text` writes: vLLM 0.32's xgrammar fails to compile a longer bounded repetition
(measured with SmolLM2's tokenizer: ``{0,128}`` compiles, ``{0,160}`` and ``{0,240}`` fail, and the request gets a
500). Longer free text is a list of such lines (``maxItems``), as CoT's reasoning is."""


def bounded_text(max_chars: int, min_chars: int = 0) -> dict[str, Any]:
    r"""The JSON Schema of a one-line free-text field of ``min_chars`` to ``max_chars`` characters, as a ``pattern``.

    Without a bound a small model writes until its token budget ends ("1.1.1..."), cut before the JSON closes. A
    ``pattern``, not ``maxLength``: OpenAI's strict mode refuses ``maxLength`` but accepts ``pattern``, and
    xgrammar enforces it either way, counting the JSON text's characters, escapes included.

    Raises:
        ValueError: ``max_chars`` is above :data:`BOUNDED_TEXT_MAX_CHARS` or below 1, or ``min_chars`` is not in
            ``[0, max_chars]``.
    """
    if not 1 <= max_chars <= BOUNDED_TEXT_MAX_CHARS:
        raise ValueError(f"a bounded text field holds 1 to {BOUNDED_TEXT_MAX_CHARS} characters, not {max_chars}")
    if not 0 <= min_chars <= max_chars:
        raise ValueError(f"a bounded text field's least length must be in [0, {max_chars}], not {min_chars}")
    return {"type": "string", "pattern": f"^[^\\n]{{{min_chars},{max_chars}}}$"}


@dataclass(frozen=True, slots=True)
class Answer(Generic[T]):
    """The outcome of :func:`ask`: ``value`` read from ``completion``, or ``None`` with ``error``.

    ``error`` is ``"endpoint failed: ..."``, ``"unreadable reply: ..."``, or ``"not available: ..."`` with
    ``available=False`` (the endpoint lacks a feature the request needs); ``raw`` is the last reply text.
    """

    value: T | None
    raw: str
    error: str | None
    stats: CallStats
    completion: Completion | None = None
    available: bool = True

    @property
    def tokens(self) -> tuple[TokenLogprob, ...] | None:
        """The generated tokens of ``raw`` with their log-probs, if asked for and sent (:mod:`ceb.stages.readout`)."""
        c = self.completion
        return c.logprobs[0] if c is not None and c.logprobs else None

    def failure(self, stats: CallStats | None = None) -> CriticResult:
        """The critic result of an answer without a value: failed, or not available; ``stats``: its cost."""
        return CriticResult(
            score=None, raw=self.raw, error=self.error, stats=stats or self.stats, available=self.available
        )


async def ask(chat: ChatBackend, request: ChatRequest, parse: Callable[[str], T], format_retries: int = 0) -> Answer[T]:
    """Send ``request``; re-ask up to ``format_retries`` times while ``parse`` raises ``ValueError``.

    Transient failures are retried inside ``chat``; what is left, and a reply still unreadable, come back with
    ``error`` set, so one bad step cannot stop a stream. An :class:`~ceb.errors.UnsupportedFeatureError` comes
    back not ``available``. ``parse=str`` suits a caller that reads :attr:`Answer.completion` itself.

    Raises:
        FatalBackendError: The endpoint refuses every request (bad key, unknown model): the run must stop.
    """
    stats = CallStats()
    raw = ""
    error = "no attempt made"
    for _ in range(1 + format_retries):
        try:
            resp = await chat.complete(request)
        except FatalBackendError:
            raise
        except UnsupportedFeatureError as exc:
            return Answer(None, raw, f"{NOT_AVAILABLE}: {exc.message}", stats, available=False)
        except (TransientError, BackendError) as exc:
            return Answer(None, raw, f"endpoint failed: {exc}", stats + CallStats.failed(exc))
        stats += CallStats.of(resp)
        c = resp.completion
        raw = c.texts[0] if c.texts else ""
        try:
            return Answer(parse(raw), raw, None, stats, c)
        except ValueError as exc:
            error = f"unreadable reply: {exc}"
            request = reask(request, raw, exc)
    return Answer(None, raw, error, stats)


def reask(request: ChatRequest, raw: str, exc: ValueError) -> ChatRequest:
    """The re-ask of ``request`` after the unreadable reply ``raw``: the reply and a correction appended.

    The identical request at temperature 0 would get the identical reply.
    """
    return replace(
        request,
        messages=(
            *request.messages,
            {"role": "assistant", "content": raw},
            {"role": "user", "content": f"{REASK_PREFIX}{exc}. Reply again with only the JSON object."},
        ),
    )
