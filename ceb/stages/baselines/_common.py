"""What the baseline critics share: sending one request, the not-available result, and their prompts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2

from ceb.backends.base import ChatBackend, ChatRequest, Completion, TransientError
from ceb.errors import BackendError, ConfigError, FatalBackendError, UnsupportedFeatureError
from ceb.stages.base import NOT_AVAILABLE, CallStats, CriticInput, CriticResult
from ceb.stages.critic import situation_context
from ceb.stages.templates import PromptSet

BASE_FAMILY = "base"
"""The template folder a family falls back to for a baseline prompt it does not define itself."""


@dataclass(frozen=True, slots=True)
class Sent:
    """The outcome of :func:`send`: the completion, or why there is none.

    Attributes:
        completion: The server's reply, ``None`` when the endpoint failed.
        stats: Requests, tokens and time spent.
        error: ``"endpoint failed: ..."`` when ``completion`` is ``None``, or ``"not available: ..."`` when the
            endpoint lacks a feature the request needs.
        available: ``False`` when the request needs a feature the endpoint lacks (not a failure).
    """

    completion: Completion | None
    stats: CallStats
    error: str | None = None
    available: bool = True

    def failure(self, stats: CallStats | None = None) -> CriticResult:
        """The critic result of a request without a completion: failed, or not available; ``stats``: its cost."""
        return CriticResult(score=None, raw="", error=self.error, stats=stats or self.stats, available=self.available)


async def send(chat: ChatBackend, request: ChatRequest) -> Sent:
    """Send ``request`` once (the backend's own retry policy applies) and keep a failure as a value.

    Raises:
        FatalBackendError: The endpoint refuses every request: the run must stop.
    """
    try:
        resp = await chat.complete(request)
    except FatalBackendError:
        raise
    except UnsupportedFeatureError as exc:
        return Sent(None, CallStats(), f"{NOT_AVAILABLE}: {exc.message}", available=False)
    except (TransientError, BackendError) as exc:
        return Sent(None, CallStats.failed(exc), f"endpoint failed: {exc}")
    return Sent(resp.completion, CallStats.of(resp))


def not_available(reason: str, *, raw: str = "", stats: CallStats | None = None) -> CriticResult:
    """A result with no score because the method cannot give one for this step; see :data:`NOT_AVAILABLE`."""
    return CriticResult.not_available(reason, raw=raw, stats=stats)


def evidence(**fields: Any) -> str:
    """The numbers a baseline's score came from, as one line of JSON for :attr:`CriticResult.raw`."""
    return json.dumps(fields, ensure_ascii=False, allow_nan=True)


def render(prompts: PromptSet, domain: str, kind: str, context: Mapping[str, Any]) -> str:
    """Render template ``kind`` of ``domain``'s family, or of ``base`` when the family has no such file.

    The packaged families define only the CEB prompts; the baseline prompts live in ``prompts/base``. A user
    directory may still give a family its own (``my_prompts/shell/ptrue_user.j2``), which is then used.

    Raises:
        ConfigError: The template is malformed or uses a variable the baseline does not give.
    """
    name = f"{prompts.family(domain)}/{kind}.j2"
    try:
        return prompts.render(domain, kind, context)
    except ConfigError as exc:
        cause = exc.__cause__
        if not (isinstance(cause, jinja2.TemplateNotFound) and cause.name == name):
            raise
    # `base` holds critic_system.j2, so PromptSet takes it for a family of its own and looks in base/ (a user
    # directory's base/ first).
    return prompts.render(BASE_FAMILY, kind, context)


def prompt_messages(prompts: PromptSet, inp: CriticInput, kind: str) -> tuple[dict[str, str], ...]:
    """``(system, user)`` messages of a critic-side baseline (``ptrue``, ``cot``) for ``inp``."""
    ctx = situation_context(inp)
    return (
        {"role": "system", "content": render(prompts, inp.domain, f"{kind}_system", ctx)},
        {"role": "user", "content": render(prompts, inp.domain, f"{kind}_user", ctx)},
    )


def actor_messages(prompts: PromptSet, inp: CriticInput, *, ask_confidence: bool = False) -> tuple[dict[str, str], ...]:
    """The actor's ``(system, user)`` messages for step ``t``, as the baselines that re-run the actor use them.

    The system message is the actor's own prompt when the stream carries one (``inp.actor_prompt``, non-empty),
    else ``actor_system.j2``, a generic agent prompt in the shape of the ReAct loop. The user message is
    ``actor_user.j2``: the task, the earlier actions with what they returned, and the current state.

    Args:
        prompts: Templates.
        inp: The step.
        ask_confidence: Also ask for a stated confidence after the action (Verbalization).
    """
    ctx = situation_context(inp) | {"ask_confidence": ask_confidence}
    system = inp.actor_prompt or render(prompts, inp.domain, "actor_system", ctx)
    return (
        {"role": "system", "content": system},
        {"role": "user", "content": render(prompts, inp.domain, "actor_user", ctx)},
    )


def continuation_extra() -> dict[str, Any]:
    """Body fields (vLLM) that leave the last assistant message open, as a prefix the model continues."""
    return {"continue_final_message": True, "add_generation_prompt": False}


def need_chat(chat: ChatBackend | None) -> ChatBackend:
    """``chat``, which the caller's catalogue entry guarantees (its ``needs`` holds ``"chat"``).

    Raises:
        ConfigError: ``chat`` is ``None`` (the method was built without :func:`ceb.stages.assembly.build_critic`).
    """
    if chat is None:
        raise ConfigError("this baseline needs an LLM endpoint, and none is set")
    return chat
