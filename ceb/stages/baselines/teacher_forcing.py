"""Teacher forcing: the actor's log-probabilities of a frozen action, read back from its prompt.

The frozen action is put into the actor's conversation as the start of its own reply, and the endpoint is
asked for the log-probability of every prompt token (vLLM's ``prompt_logprobs``) with the reply left open
(``continue_final_message``), so the rendered prompt ends with the action's tokens. The action's span is then
found at the end of the prompt by its text (:func:`action_span`). PPL, ME and PRO read their numbers from it,
from one request per step (:mod:`ceb.stages.statistics`). Only vLLM-style servers implement these fields;
elsewhere the step is reported as not available.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import orjson

from ceb.backends.base import ChatBackend, ChatRequest, TokenLogprob
from ceb.stages.asking import ask
from ceb.stages.base import NOT_AVAILABLE, CallStats, CriticInput, CriticResult
from ceb.stages.baselines._common import actor_messages, continuation_extra
from ceb.stages.statistics import current_statistics
from ceb.stages.templates import PromptSet

__all__ = ["ForcedAction", "action_span", "teacher_force", "teacher_forcing_request"]


def teacher_forcing_request(prompts: PromptSet, inp: CriticInput, top_k: int) -> ChatRequest:
    """The request that scores ``inp.action`` under the actor's prompt (:func:`actor_messages`).

    Messages: the actor's system and user turns, then the action as the last, open assistant message.
    Body: ``prompt_logprobs=top_k``, ``continue_final_message=True``, ``add_generation_prompt=False``; one
    generated token (``max_tokens=1``), which is not read.
    """
    return ChatRequest(
        messages=(*actor_messages(prompts, inp), {"role": "assistant", "content": inp.action}),
        temperature=0.0,
        max_tokens=1,
        extra={"prompt_logprobs": top_k, **continuation_extra()},
        stage="critic",
    )


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

    Args:
        positions: One entry per prompt token (``Completion.prompt_logprobs``); the first is ``None``.
        action: The frozen action.

    Returns:
        The span's tokens in order, shape ``(L,)`` with ``L >= 1``.

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
    """The outcome of :func:`teacher_force`.

    Attributes:
        span: The action's tokens with their log-probs and top alternatives, ``None`` on failure.
        stats: Requests, tokens and time spent.
        error: Why ``span`` is ``None``: ``"endpoint failed: ..."`` or ``"not available: ..."``.
        available: ``False`` when the step cannot be teacher-forced here at all (not a failure).
    """

    span: tuple[TokenLogprob, ...] | None
    stats: CallStats
    error: str | None = None
    available: bool = True

    def failure(self) -> CriticResult:
        """The critic result of a step whose span could not be had: failed, or not available."""
        return CriticResult(score=None, raw="", error=self.error, stats=self.stats, available=self.available)


async def teacher_force(
    actor: ChatBackend,
    prompts: PromptSet,
    inp: CriticInput,
    top_k: int,
    share: bool = True,
) -> ForcedAction:
    """Score ``inp.action`` under the actor by teacher forcing (module docstring) and cut out its span.

    Args:
        actor: The actor's endpoint.
        prompts: Templates of the actor prompt.
        inp: The step.
        top_k: ``prompt_logprobs``: the top alternatives listed per prompt token.
        share: Share the statistic with the other methods scoring the step (:mod:`ceb.stages.statistics`, inside
            its :func:`~ceb.stages.statistics.step_statistics` scope): the request is sent once per step and
            endpoint, whichever of PPL, ME and PRO asks first; a reader of another's fetch gets the same span with a
            request-free cost. ``False`` (or outside a scope) sends it every time.

    Raises:
        FatalBackendError: The endpoint refuses every request.
    """
    shared = current_statistics() if share else None
    if shared is None:
        return await _teacher_force(actor, prompts, inp, top_k)
    request = teacher_forcing_request(prompts, inp, top_k)
    key = ("teacher_forcing", id(actor), orjson.dumps([request.messages, request.extra, request.max_tokens]))
    forced, fetched_here = await shared.get(key, lambda: _teacher_force(actor, prompts, inp, top_k))
    return forced if fetched_here else replace(forced, stats=CallStats())


async def _teacher_force(actor: ChatBackend, prompts: PromptSet, inp: CriticInput, top_k: int) -> ForcedAction:
    sent = await ask(actor, teacher_forcing_request(prompts, inp, top_k), str)
    if sent.completion is None:
        return ForcedAction(None, sent.stats, sent.error, available=sent.available)
    positions = sent.completion.prompt_logprobs
    if not positions:
        reason = "the endpoint returned no prompt_logprobs (teacher forcing needs a vLLM-style server)"
        return ForcedAction(None, sent.stats, f"{NOT_AVAILABLE}: {reason}", available=False)
    try:
        return ForcedAction(action_span(positions, inp.action), sent.stats)
    except ValueError as exc:
        return ForcedAction(None, sent.stats, f"{NOT_AVAILABLE}: {exc}", available=False)
