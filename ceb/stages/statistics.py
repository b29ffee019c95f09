"""The model statistics the baselines read (paper section 4.1), one fetcher each, shared within a step.

A baseline (:mod:`ceb.stages.baselines`) is a formula over one or two of these; docs/methods.md has the table of
statistic, fetcher, endpoint and readers. Inside a :func:`step_statistics` scope (the step pool opens one per step)
a statistic is fetched once per endpoint and request, and the methods that read it after get it at zero cost
(``requests`` 0), so the run's sum is right; outside one, or with ``baselines.share_statistics`` off, each call
fetches its own. Every fetcher raises :class:`~ceb.errors.FatalBackendError` when the endpoint refuses every
request; any other failure is in the value it returns (``error``, ``available``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import Any, Generic, TypeVar, cast

import anyio

from ceb.backends.base import ChatBackend, ChatRequest, TokenLogprob, TransientError
from ceb.config import BaselineConfig, CriticConfig
from ceb.stages.asking import Answer, ask, bounded_text
from ceb.stages.base import NOT_AVAILABLE, CallStats, CriticInput, CriticResult
from ceb.stages.critic import situation_context
from ceb.stages.readout import logprob_fields
from ceb.stages.templates import PromptSet

__all__ = [
    "COT_REASONING_MAX_CHARS",
    "COT_REASONING_STEPS",
    "COT_SCHEMA",
    "COT_STEP_MAX_CHARS",
    "PTRUE_ANSWERS",
    "SAMPLE_SLACK_TOKENS",
    "STATED_CONFIDENCE_SCHEMA",
    "ForcedAction",
    "SharedStatistics",
    "action_span",
    "actor_messages",
    "cot_reply",
    "cot_request",
    "critic_messages",
    "current_statistics",
    "forced_span",
    "ptrue_first_token",
    "ptrue_first_token_request",
    "ptrue_pair",
    "ptrue_pair_requests",
    "sample_budget",
    "sample_request",
    "sampled_answers",
    "step_statistics",
    "teacher_force",
    "teacher_forcing_request",
    "verbalized_reply",
    "verbalized_request",
]

T = TypeVar("T")


@dataclass(slots=True)
class _Entry(Generic[T]):
    done: anyio.Event = field(default_factory=anyio.Event)
    value: T | None = None
    done_ok: bool = False
    error: Exception | None = None


class SharedStatistics:
    """A single-flight memo of model statistics, shared by the methods scoring one step."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry[Any]] = {}
        self.fetched = 0  # fetches made, one per distinct key
        self.shared = 0  # reads served by another caller's fetch

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """``(value, fetched_here)`` of ``key``: ``fetch()`` run at most once per key; the caller that ran it pays.

        Raises:
            Exception: What ``fetch`` raised, in its caller and every waiting one (a failed fetch is not kept). A
                cancelled fetch is taken up by a waiting caller; a cancellation is never passed on.
        """
        while True:
            entry = self._entries.get(key)
            if entry is None:
                break
            await entry.done.wait()
            if entry.error is not None:
                raise entry.error
            if entry.done_ok:
                self.shared += 1
                return cast(T, entry.value), False
            # Its fetcher was cancelled: the key is free again, and this caller may fetch it.
        entry = _Entry()
        self._entries[key] = entry
        self.fetched += 1
        try:
            value = await fetch()
        except Exception as exc:
            entry.error = exc
            raise
        else:
            entry.value, entry.done_ok = value, True
        finally:
            if not entry.done_ok:
                self._entries.pop(key, None)
            entry.done.set()
        return value, True

    def __len__(self) -> int:
        return len(self._entries)


_CURRENT: ContextVar[SharedStatistics | None] = ContextVar("ceb_step_statistics", default=None)


@contextmanager
def step_statistics() -> Iterator[SharedStatistics]:
    """Share the statistics asked inside this block (and the tasks it starts): one step of several methods."""
    token = _CURRENT.set(SharedStatistics())
    try:
        yield cast(SharedStatistics, _CURRENT.get())
    finally:
        _CURRENT.reset(token)


def current_statistics() -> SharedStatistics | None:
    """The statistics of the enclosing :func:`step_statistics` block, or ``None`` outside one."""
    return _CURRENT.get()


# --- prompts ------------------------------------------------------------------------------------------------------


def critic_messages(prompts: PromptSet, inp: CriticInput, kind: str) -> tuple[dict[str, str], ...]:
    """``(system, user)`` messages of a critic-side baseline (``kind``: ``ptrue``, ``cot``) for ``inp``."""
    ctx = situation_context(inp)
    return (
        {"role": "system", "content": prompts.render_or_base(inp.domain, f"{kind}_system", ctx)},
        {"role": "user", "content": prompts.render_or_base(inp.domain, f"{kind}_user", ctx)},
    )


def actor_messages(prompts: PromptSet, inp: CriticInput, *, ask_confidence: bool = False) -> tuple[dict[str, str], ...]:
    """The actor's ``(system, user)`` messages for step ``t``, as the baselines that re-run the actor use them.

    The system message is ``inp.actor_prompt`` when the stream has one, else ``actor_system.j2`` (a generic ReAct
    prompt); ``ask_confidence`` also asks for a stated confidence after the action (Verbalization).
    """
    ctx = situation_context(inp) | {"ask_confidence": ask_confidence}
    system = inp.actor_prompt or prompts.render_or_base(inp.domain, "actor_system", ctx)
    return (
        {"role": "system", "content": system},
        {"role": "user", "content": prompts.render_or_base(inp.domain, "actor_user", ctx)},
    )


_CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}
"""Body fields (vLLM) that leave the last assistant message open, as a prefix the model continues."""

SAMPLE_SLACK_TOKENS = 16
"""Tokens a PRO sample may write beyond the frozen action's length in characters (white space, an end marker)."""

COT_REASONING_STEPS = 12
"""Most reasoning steps (lines) the CoT critic may write under structure."""

COT_STEP_MAX_CHARS = 100
"""Longest reasoning step, in characters."""

COT_REASONING_MAX_CHARS = COT_REASONING_STEPS * COT_STEP_MAX_CHARS
"""Longest CoT reasoning under structure, in characters (1,200): it closes within the default 1,300-token
``baselines.cot_max_tokens`` at one character per token (a 135M model's degenerate "1.1.1..."). A list of lines,
not one string: vLLM's xgrammar cannot compile so long a bound (:data:`~ceb.stages.asking.BOUNDED_TEXT_MAX_CHARS`)."""

COT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {
            "type": "array",
            "items": bounded_text(COT_STEP_MAX_CHARS, min_chars=1),
            "minItems": 1,
            "maxItems": COT_REASONING_STEPS,
        },
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["reasoning", "confidence"],
    "additionalProperties": False,
}
"""The CoT reply under structure: reasoning steps first, then the confidence in percent; elsewhere
:func:`parse_confidence_line` reads the free text. The lower bounds are needed: without them SmolLM2-135M answered
``{"reasoning": [], "confidence": 0}`` on 14 of 16 steps, skipping the chain of thought."""

STATED_CONFIDENCE_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 100}
"""The continuation under structure: a bare integer percentage. JSON mode cannot express it: there, and without
structure, the prompt alone asks for it."""


# --- requests -----------------------------------------------------------------------------------------------------


def teacher_forcing_request(prompts: PromptSet, inp: CriticInput, top_k: int) -> ChatRequest:
    """The actor's messages then ``inp.action`` as the open assistant message, ``prompt_logprobs=top_k``, 1 token."""
    return ChatRequest(
        messages=(*actor_messages(prompts, inp), {"role": "assistant", "content": inp.action}),
        temperature=0.0,
        max_tokens=1,
        extra={"prompt_logprobs": top_k, **_CONTINUE},
        stage="critic",
    )


def sample_budget(action: str, cap: int) -> int:
    """Output budget of each PRO sample, in tokens: ``min(cap, len(action) + SAMPLE_SLACK_TOKENS)``, at least 1.

    A byte-level BPE token holds at least one character of ASCII text, so ``len(action)`` tokens can reproduce the
    action, and a sample still going after that is another class whatever it writes next. A cut sample's log-prob
    covers the part it wrote.
    """
    return max(1, min(cap, len(action) + SAMPLE_SLACK_TOKENS))


def sample_request(prompts: PromptSet, inp: CriticInput, settings: BaselineConfig) -> ChatRequest:
    """``N = pro_samples`` actions sampled under the actor's prompt at ``pro_temperature``, with their log-probs."""
    return ChatRequest(
        messages=actor_messages(prompts, inp),
        temperature=settings.pro_temperature,
        max_tokens=sample_budget(inp.action, settings.pro_max_tokens),
        n=settings.pro_samples,
        logprobs=True,
        stage="critic",
    )


PTRUE_ANSWERS = ("True", "False")
"""The two answers whose teacher-forced log-probabilities P(True) compares."""


def ptrue_pair_requests(prompts: PromptSet, inp: CriticInput) -> tuple[ChatRequest, ChatRequest]:
    """The P(True) question answered "True", and "False", each the open assistant message (``prompt_logprobs=1``)."""
    messages = critic_messages(prompts, inp, "ptrue")
    true, false = (
        ChatRequest(
            messages=(*messages, {"role": "assistant", "content": answer}),
            temperature=0.0,
            max_tokens=1,
            extra={"prompt_logprobs": 1, **_CONTINUE},
            stage="critic",
        )
        for answer in PTRUE_ANSWERS
    )
    return true, false


def ptrue_first_token_request(prompts: PromptSet, inp: CriticInput, settings: BaselineConfig) -> ChatRequest:
    """The P(True) question with ``ptrue_max_tokens`` of output and ``ptrue_top_logprobs`` alternatives."""
    return ChatRequest(
        messages=critic_messages(prompts, inp, "ptrue"),
        temperature=0.0,
        max_tokens=settings.ptrue_max_tokens,
        logprobs=True,
        top_logprobs=settings.ptrue_top_logprobs,
        stage="critic",
    )


def cot_request(prompts: PromptSet, inp: CriticInput, settings: BaselineConfig, readout: CriticConfig) -> ChatRequest:
    """The CoT question under :data:`COT_SCHEMA`, at ``cot_temperature`` within ``cot_max_tokens``."""
    return ChatRequest(
        messages=critic_messages(prompts, inp, "cot"),
        temperature=settings.cot_temperature,
        max_tokens=settings.cot_max_tokens,
        json_schema=COT_SCHEMA,
        schema_name="cot_confidence",
        stage="critic",
        **logprob_fields(readout),
    )


def verbalized_request(
    prompts: PromptSet, inp: CriticInput, settings: BaselineConfig, readout: CriticConfig
) -> ChatRequest:
    """The actor prompt asking for a confidence, then the action, a line break and ``verbalized_cue.j2``, left open."""
    cue = prompts.render_or_base(inp.domain, "verbalized_cue", situation_context(inp)).strip()
    reply = {"role": "assistant", "content": f"{inp.action}\n{cue}"}
    return ChatRequest(
        messages=(*actor_messages(prompts, inp, ask_confidence=True), reply),
        temperature=0.0,
        max_tokens=settings.verbalized_max_tokens,
        json_schema=STATED_CONFIDENCE_SCHEMA,
        schema_name="stated_confidence",
        extra=_CONTINUE,
        stage="critic",
        **logprob_fields(readout),
    )


# --- teacher forcing ----------------------------------------------------------------------------------------------


def _visible(text: str) -> str:
    return "".join(text.split())


def action_span(positions: Sequence[TokenLogprob | None], action: str) -> tuple[TokenLogprob, ...]:
    """The prompt tokens that spell ``action`` at the end of a teacher-forced prompt.

    The rule, on non-white-space characters (chat templates trim or re-space message text, and some
    tokenizers decode a lone token without its leading space, so white space is not compared):

    1. Tokens at the very end that hold only white space are not part of the action and are skipped.
    2. Going backwards, tokens are taken until they hold at least as many non-white-space characters as the
       action. The earliest token taken may straddle the boundary (``'":ls'`` for an action ``ls``): it is
       counted in the span, since part of its probability is the action's.
    3. Tokens decoded as ``""`` right before the span are counted too: vLLM decodes the leading pieces of a
       character split over several tokens as ``""`` and the whole character on its last piece.
    4. The span's characters must end with the action's; otherwise the template changed the action, or the
       server decoded a split character as U+FFFD, and no span is returned.

    ``positions`` is ``Completion.prompt_logprobs`` (the first is ``None``); the span has shape ``(L,)``, ``L >= 1``.

    Raises:
        ValueError: The action is blank, the prompt does not end with it, or the span reaches the first prompt
            token (which has no log-prob).
    """
    target = _visible(action)
    if not target:
        raise ValueError("the action has no visible characters")
    end = len(positions)
    while end > 0 and _holds(positions[end - 1], lambda text: not _visible(text)):
        end -= 1
    start, seen = end, 0
    while seen < len(target):
        token = positions[start - 1] if start > 0 else None
        if token is None:
            raise ValueError("the action reaches back to the first prompt token, which has no log-prob")
        seen += len(_visible(token.token))
        start -= 1
    while start > 0 and _holds(positions[start - 1], lambda text: text == ""):
        start -= 1
    span = tuple(p for p in positions[start:end] if p is not None)
    if not "".join(_visible(p.token) for p in span).endswith(target):
        tail = "".join(p.token for p in span)
        raise ValueError(f"the prompt does not end with the action (its last tokens read {tail!r})")
    return span


def _holds(position: TokenLogprob | None, test: Callable[[str], bool]) -> bool:
    return position is not None and test(position.token)


@dataclass(frozen=True, slots=True)
class ForcedAction:
    """The teacher-forced log-probs of a frozen action (:func:`teacher_force`): ``span`` of shape ``(L,)``.

    ``span`` is ``None`` with ``error`` (``"endpoint failed: ..."``, or ``"not available: ..."`` with
    ``available=False``).
    """

    span: tuple[TokenLogprob, ...] | None
    stats: CallStats
    error: str | None = None
    available: bool = True

    def failure(self, stats: CallStats | None = None) -> CriticResult:
        """The critic result of a step whose span could not be had: failed, or not available; ``stats``: its cost."""
        return CriticResult(score=None, raw="", error=self.error, stats=stats or self.stats, available=self.available)


def forced_span(sent: Answer[str], text: str, label: str = "") -> ForcedAction:
    """The span of ``text`` at the end of ``sent``'s teacher-forced prompt (:func:`action_span`), or why there is none.

    A failed request stays failed; a reply without ``prompt_logprobs``, or whose prompt does not end with ``text``,
    is not available (``label`` names ``text`` in the latter's reason); a malformed position in the span is the
    endpoint's failure.
    """
    if sent.completion is None:
        return ForcedAction(None, sent.stats, sent.error, available=sent.available)
    positions = sent.completion.prompt_logprobs
    if not positions:
        reason = "the endpoint returned no prompt_logprobs (teacher forcing needs a vLLM-style server)"
        return ForcedAction(None, sent.stats, f"{NOT_AVAILABLE}: {reason}", available=False)
    try:
        return ForcedAction(action_span(positions, text), sent.stats)
    except TransientError as exc:
        return ForcedAction(None, sent.stats, f"endpoint failed: {exc}")
    except ValueError as exc:
        return ForcedAction(None, sent.stats, f"{NOT_AVAILABLE}: {label}{exc}", available=False)


# --- fetchers -----------------------------------------------------------------------------------------------------


async def _fetch(
    chat: ChatBackend, requests: Sequence[ChatRequest], fetch: Callable[[], Awaitable[T]], share: bool
) -> T:
    """``fetch()``, or the value another method of the step fetched for the same endpoint and requests, cost-free."""
    shared = current_statistics() if share else None
    if shared is None:
        return await fetch()
    value, fetched_here = await shared.get((id(chat), repr(tuple(requests))), fetch)
    return value if fetched_here else _free(value)


def _free(value: Any) -> Any:
    """``value`` with its cost zeroed (an :class:`Answer`, a :class:`ForcedAction`, or a tuple of them)."""
    if isinstance(value, tuple):
        return tuple(_free(v) for v in value)
    return replace(value, stats=CallStats())


async def teacher_force(
    actor: ChatBackend, prompts: PromptSet, inp: CriticInput, top_k: int, share: bool = True
) -> ForcedAction:
    """The actor's log-probs of ``inp.action`` (:func:`teacher_forcing_request`, :func:`action_span`)."""
    request = teacher_forcing_request(prompts, inp, top_k)

    async def fetch() -> ForcedAction:
        return forced_span(await ask(actor, request, str), inp.action)

    return await _fetch(actor, [request], fetch, share)


async def _reply(
    chat: ChatBackend, request: ChatRequest, share: bool, parse: Callable[[str], T], retries: int = 0
) -> Answer[T]:
    """One reply to ``request`` read by ``parse`` (:func:`~ceb.stages.asking.ask`), shared as :func:`_fetch` says."""
    return await _fetch(chat, [request], lambda: ask(chat, request, parse, retries), share)


async def sampled_answers(
    actor: ChatBackend, prompts: PromptSet, inp: CriticInput, settings: BaselineConfig
) -> Answer[str]:
    """``N`` actions sampled from the actor with their log-probs (:func:`sample_request`), in ``completion``."""
    return await _reply(actor, sample_request(prompts, inp, settings), settings.share_statistics, str)


async def ptrue_pair(
    chat: ChatBackend, prompts: PromptSet, inp: CriticInput, settings: BaselineConfig
) -> tuple[Answer[str], Answer[str]]:
    """The teacher-forced replies to :func:`ptrue_pair_requests`, True first; both sent at once."""
    requests = ptrue_pair_requests(prompts, inp)

    async def fetch() -> tuple[Answer[str], Answer[str]]:
        sent: list[Answer[str] | None] = [None, None]

        async def one(i: int, request: ChatRequest) -> None:
            sent[i] = await ask(chat, request, str)

        async with anyio.create_task_group() as tg:
            for i, request in enumerate(requests):
                tg.start_soon(one, i, request)
        true, false = (s for s in sent if s is not None)
        return true, false

    return await _fetch(chat, requests, fetch, settings.share_statistics)


async def ptrue_first_token(
    chat: ChatBackend, prompts: PromptSet, inp: CriticInput, settings: BaselineConfig
) -> Answer[str]:
    """The reply to :func:`ptrue_first_token_request`, its tokens' top log-probs in ``completion``."""
    return await _reply(chat, ptrue_first_token_request(prompts, inp, settings), settings.share_statistics, str)


async def cot_reply(
    chat: ChatBackend,
    prompts: PromptSet,
    inp: CriticInput,
    settings: BaselineConfig,
    readout: CriticConfig,
    parse: Callable[[str], float],
) -> Answer[float]:
    """The CoT reply (:func:`cot_request`) read by ``parse``, re-asked up to ``readout.format_retries`` times."""
    request = cot_request(prompts, inp, settings, readout)
    return await _reply(chat, request, settings.share_statistics, parse, readout.format_retries)


async def verbalized_reply(
    actor: ChatBackend, prompts: PromptSet, inp: CriticInput, settings: BaselineConfig, readout: CriticConfig
) -> Answer[str]:
    """The actor's continuation of :func:`verbalized_request`, not re-asked (a correction would close the reply)."""
    return await _reply(actor, verbalized_request(prompts, inp, settings, readout), settings.share_statistics, str)
