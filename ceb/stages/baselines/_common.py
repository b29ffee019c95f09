"""What the baseline critics share: their evidence line and their prompts.

They ask the endpoint as every stage does (:func:`ceb.stages.asking.ask`).
"""

from __future__ import annotations

import json
from typing import Any

from ceb.backends.base import ChatBackend
from ceb.errors import ConfigError
from ceb.stages.base import CriticInput
from ceb.stages.critic import situation_context
from ceb.stages.templates import PromptSet


def evidence(**fields: Any) -> str:
    """The numbers a baseline's score came from, as one line of JSON for :attr:`CriticResult.raw`."""
    return json.dumps(fields, ensure_ascii=False, allow_nan=True)


def prompt_messages(prompts: PromptSet, inp: CriticInput, kind: str) -> tuple[dict[str, str], ...]:
    """``(system, user)`` messages of a critic-side baseline (``ptrue``, ``cot``) for ``inp``."""
    ctx = situation_context(inp)
    return (
        {"role": "system", "content": prompts.render_or_base(inp.domain, f"{kind}_system", ctx)},
        {"role": "user", "content": prompts.render_or_base(inp.domain, f"{kind}_user", ctx)},
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
    system = inp.actor_prompt or prompts.render_or_base(inp.domain, "actor_system", ctx)
    return (
        {"role": "system", "content": system},
        {"role": "user", "content": prompts.render_or_base(inp.domain, "actor_user", ctx)},
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
