"""The LLM critic ``f_theta`` (Eq. 2 and 6) and the repetition flag ``rho_t`` (section 3.3)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ceb.backends.base import ChatBackend, ChatRequest, StreamReply, TransientError
from ceb.bank import Hit
from ceb.config import CEBConfig, CriticConfig, RepetitionReading
from ceb.errors import BackendError, FatalBackendError
from ceb.logs import get_logger
from ceb.stages.asking import Answer, ask, bounded_text, reask
from ceb.stages.base import CallStats, CriticInput, CriticResult
from ceb.stages.parsing import parse_score, score_prefix, score_span
from ceb.stages.readout import logprob_fields, read_score
from ceb.stages.templates import PromptSet

__all__ = [
    "CRITIC_SCHEMA",
    "REASON_MAX_CHARS",
    "LLMCritic",
    "actions_match",
    "config_repetition_flag",
    "critic_context",
    "normalize_action",
    "repetition_flag",
    "reply_tails",
    "situation_context",
]

log = get_logger(__name__)

_TAILS: ContextVar[TaskGroup | None] = ContextVar("ceb_reply_tails", default=None)


@contextmanager
def reply_tails(group: TaskGroup) -> Iterator[None]:
    """Let critic replies taken early (``critic.early_score``) finish in ``group`` inside this block.

    The owner (a lane) holds ``group`` open around its whole run, so no reply outlives it: leaving the group
    waits for every tail, and cancelling it cuts them.
    """
    token = _TAILS.set(group)
    try:
        yield
    finally:
        _TAILS.reset(token)


REASON_MAX_CHARS = 120
"""Longest ``reason`` the critic may write, in characters: one sentence; ``critic.max_tokens`` (160) holds it at
one character per token with the score, and within :data:`~ceb.stages.asking.BOUNDED_TEXT_MAX_CHARS`."""

CRITIC_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": bounded_text(REASON_MAX_CHARS),
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}
"""The critic's reply shape, sent as structured output where the server supports it.

Without the bounds guided decoding lets a model write an endless number (``{"score": 17653980053980...``) or
reason past the output budget; the reason's ``pattern`` holds under ``json_schema`` and ``vllm``, and under
``json_object`` and ``none`` only ``critic.max_tokens`` bounds the reply.
"""

_WS = re.compile(r"\s+")


def normalize_action(action: str) -> str:
    """``action`` with white space collapsed to single spaces, stripped and case-folded (what ``rho_t`` compares)."""
    return _WS.sub(" ", action).strip().casefold()


def _common_prefix(a: str, b: str) -> int:
    """Length of the longest common prefix of ``a`` and ``b``."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def actions_match(
    a: str, b: str, *, reading: RepetitionReading = "prefix", prefix_chars: int = 40, prefix_fraction: float = 0.9
) -> bool:
    """Whether two actions, already folded by :func:`normalize_action`, match under ``reading`` (section 3.3).

    ``prefix``: equal, or the shorter (not empty) is a prefix of the longer; ``exact``: equal; ``chars``: the first
    ``prefix_chars`` characters are equal; ``relative``: the common prefix covers at least ``prefix_fraction`` (in
    (0, 1]) of the longer one's length (two empty actions match). The relation is symmetric.

    Raises:
        ValueError: ``reading`` is none of the four.
    """
    if reading == "exact":
        return a == b
    if reading == "prefix":
        short, long = (a, b) if len(a) <= len(b) else (b, a)
        return a == b or (short != "" and long.startswith(short))
    if reading == "chars":
        return a[:prefix_chars] == b[:prefix_chars]
    if reading == "relative":
        return _common_prefix(a, b) >= prefix_fraction * max(len(a), len(b))
    raise ValueError(f"unknown repetition reading {reading!r}; expected prefix, exact, chars or relative")


def repetition_flag(
    previous: Sequence[str],
    action: str,
    *,
    window: int = 3,
    reading: RepetitionReading = "prefix",
    prefix_chars: int = 40,
    prefix_fraction: float = 0.9,
) -> bool:
    """``rho_t``: does ``a_t`` match the prefix of any of the last ``window`` actions (section 3.3)?

    Both are folded (:func:`normalize_action`), then compared by :func:`actions_match` (which raises
    ``ValueError`` for an unknown ``reading``). The default, ``prefix``, reads the paper literally: an exact repeat
    is flagged, and so is a command cut short or extended at its tail; two that only share a head are not.
    ``previous`` is ``a_1 .. a_{t-1}``; ``window``: 3 in the paper, 0 never flags. docs/design.md measures each reading.
    """
    if window <= 0:
        return False
    a = normalize_action(action)
    return any(
        actions_match(
            a, normalize_action(p), reading=reading, prefix_chars=prefix_chars, prefix_fraction=prefix_fraction
        )
        for p in previous[-window:]
    )


def config_repetition_flag(previous: Sequence[str], action: str, config: CEBConfig) -> bool:
    """:func:`repetition_flag` with the settings of ``config`` (``ceb.repetition_*``): what a run computes."""
    return repetition_flag(
        previous,
        action,
        window=config.repetition_window,
        reading=config.repetition_reading,
        prefix_chars=config.repetition_prefix_chars,
        prefix_fraction=config.repetition_prefix_fraction,
    )


def _score_text(score: float | None) -> str:
    return "none (the critic gave no readable score)" if score is None else f"{score:.2f}"


def _precedent(hit: Hit) -> dict[str, Any]:
    r = hit.record
    agreement = {True: "agreed with the hindsight outcome", False: "DISAGREED with the hindsight outcome"}
    return {
        "outcome": "productive" if r.pseudo_label == 1 else "unproductive",
        "task": r.task,
        "action": r.action,
        "state": r.state,
        "observation": r.observation,
        "score_text": _score_text(r.score),
        "agreement_text": "no past score" if r.agreement is None else agreement[r.agreement],
        "similarity": hit.similarity,
    }


def situation_context(inp: CriticInput) -> dict[str, Any]:
    """The step's ``(q, s_t, h_<t, a_t)`` and logged fields as template variables: no score, no precedent.

    The baseline prompts use this alone (section 4.1); :func:`critic_context` adds scores and precedents.
    """
    return {
        "task": inp.task,
        "step_number": inp.step + 1,
        "state": inp.state,
        "action": inp.action,
        "reasoning": inp.reasoning,
        "op": inp.op,
        "element": inp.element,
        "value": inp.value,
        "history": [
            {"number": inp.history_start + i + 1, "action": h.action, "observation": h.observation}
            for i, h in enumerate(inp.history)
        ],
        "history_omitted": inp.history_start,
    }


def critic_context(inp: CriticInput) -> dict[str, Any]:
    """The template variables of the critic prompt for ``inp`` (no other data reaches the prompt)."""
    ctx = situation_context(inp)
    for item, h in zip(ctx["history"], inp.history, strict=True):
        item["score_text"] = _score_text(h.score)
    ctx |= {
        "use_bank": inp.use_bank,
        "precedents": [_precedent(h) for h in inp.retrieval.hits],
        "repetition_flag": inp.repetition_flag,
    }
    return ctx


class LLMCritic:
    """Scores a proposed action with an LLM behind a :class:`~ceb.backends.base.ChatBackend` (Eq. 2)."""

    def __init__(self, chat: ChatBackend, prompts: PromptSet, settings: CriticConfig | None = None) -> None:
        self.chat = chat
        self.prompts = prompts
        self.settings = settings or CriticConfig()

    def messages(self, inp: CriticInput) -> tuple[dict[str, str], ...]:
        """The ``(system, user)`` messages for ``inp``."""
        return self.prompts.messages(inp.domain, "critic", critic_context(inp))

    async def score(self, inp: CriticInput) -> CriticResult:
        """Ask for ``{"score": r_t}`` and return ``clip(r_t, 0, 1)`` (Eq. 6).

        Under ``readout = "expected"`` the score is the expectation of ``r_t`` (:mod:`ceb.stages.readout`). An
        unreadable reply is re-asked ``format_retries`` times; a failure gives ``score=None`` with ``error``, never
        an exception, so one bad step cannot stop a stream.
        """
        request = ChatRequest(
            messages=self.messages(inp),
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens,
            json_schema=CRITIC_SCHEMA,
            schema_name="critic_score",
            stage="critic",
            **logprob_fields(self.settings),
        )
        if self.settings.early_score:
            ans = await self._ask_streamed(request)
        else:
            ans = await ask(self.chat, request, parse_score, self.settings.format_retries)
        if ans.value is None:
            return CriticResult(score=None, raw=ans.raw, error=ans.error, stats=ans.stats)
        z = min(1.0, max(0.0, ans.value))
        reading = read_score(z, self.settings, tokens=ans.tokens, text=ans.raw, span=score_span, value_of=float)
        if reading.note is not None:
            log.debug("expected readout not used; the text score is kept", reason=reading.note)
        return CriticResult(
            score=reading.score, raw=ans.raw, clipped=z != ans.value, stats=ans.stats, readout=reading.readout
        )

    async def _ask_streamed(self, request: ChatRequest) -> Answer[float]:
        """:func:`~ceb.stages.asking.ask` over a streamed first attempt, its score taken once its prefix holds it."""
        cap = self.settings.reason_tokens_after_score
        tails = _TAILS.get() if cap is None else None
        try:
            if tails is not None:
                early: _Early = await tails.start(self._read, request, cap)
            else:
                early = await self._read(request, cap)
        except FatalBackendError:
            raise
        except (TransientError, BackendError) as exc:
            # A stream that could not be opened (after its retries) or broke midway: ask the plain way, where
            # retries cover the whole reply.
            log.debug("streamed critic call failed; asking unstreamed", error=str(exc))
            ans = await ask(self.chat, request, parse_score, self.settings.format_retries)
            return Answer(ans.value, ans.raw, ans.error, ans.stats + CallStats(requests=getattr(exc, "attempts", 1)))
        if early.value is not None:
            return Answer(early.value, early.raw, None, early.stats)
        try:
            return Answer(parse_score(early.raw), early.raw, None, early.stats)
        except ValueError as exc:
            if self.settings.format_retries == 0:
                return Answer(None, early.raw, f"unreadable reply: {exc}", early.stats)
            ans = await ask(self.chat, reask(request, early.raw, exc), parse_score, self.settings.format_retries - 1)
            return Answer(ans.value, ans.raw, ans.error, early.stats + ans.stats)

    async def _read(
        self, request: ChatRequest, cap: int | None, *, task_status: TaskStatus[_Early] = anyio.TASK_STATUS_IGNORED
    ) -> _Early:
        """Stream ``request``; report the score once complete (``task_status``), then cut or finish the reply."""
        reported: _Early | None = None
        async with self.chat.stream(request) as reply:
            after = 0
            try:
                async for _ in reply:
                    if reported is None:
                        value = score_prefix(reply.text)
                        if value is None:
                            continue
                        reported = _Early.of(value, reply)
                        if cap is None:
                            task_status.started(reported)
                            continue
                    else:
                        after += 1
                    if cap is not None and after >= cap:
                        break  # leaving the stream's context closes it: the server aborts the request
            except Exception as exc:
                if reported is None or cap is not None:
                    raise
                # The score was already handed over; a tail that breaks must not take its owner down.
                log.debug("critic reply tail failed", error=str(exc))
        if reported is None:
            reported = _Early.of(None, reply)
            task_status.started(reported)
        else:
            # Inline (not a background tail): the reply as far as it was read, and what it cost.
            reported = _Early(reported.value, reply.text, _stats(reply))
        return reported


@dataclass(frozen=True, slots=True)
class _Early:
    """A streamed critic reply as far as it was read: the score if its prefix held one, the text, the cost."""

    value: float | None
    raw: str
    stats: CallStats

    @classmethod
    def of(cls, value: float | None, reply: StreamReply) -> _Early:
        return cls(value, reply.text, _stats(reply))


def _stats(reply: StreamReply) -> CallStats:
    """Cost of a streamed reply so far; the token counts are there only if the server's usage event was read."""
    return CallStats(reply.latency_s, reply.queue_s, reply.attempts, reply.prompt_tokens, reply.completion_tokens)
