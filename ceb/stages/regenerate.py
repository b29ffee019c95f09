"""The actor of ``ceb regenerate``: re-predict one flagged step once, with a fixed generic critique.

The paper's appendix "Offline Confidence-Gated Regeneration" (docs/regeneration.md): the same critique
(:data:`CRITIQUE`) for every step and method, so methods differ only in which steps they flag. The actor never
sees the reference or the label. The reply is an action of the converter's space
(:data:`ceb.data.references.ACTION_SPACES`: element, operation, value), fixed by a schema the server enforces
(:func:`action_schema`), so :mod:`ceb.data.references` can judge it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.data.references import ACTION_SPACES, ActionSpace
from ceb.data.trajectory import Trajectory
from ceb.stages.asking import Answer, ask, bounded_text
from ceb.stages.templates import DATA_INDENT, PromptSet, fence

__all__ = [
    "CRITIQUE",
    "REGENERATE_FORMAT_RETRIES",
    "REGENERATE_MAX_TOKENS",
    "REGENERATE_TEMPERATURE",
    "RegeneratedAction",
    "Regenerator",
    "action_schema",
    "action_space",
    "parse_action",
    "regenerate_context",
]

CRITIQUE = "A reviewer flagged this step; reconsider."
"""The one critique every flagged step gets (the paper's "a reviewer flagged this step; reconsider")."""

REGENERATE_TEMPERATURE = 0.0
"""Greedy decoding: one regeneration per step, the same whichever method flagged it."""

REGENERATE_FORMAT_RETRIES = 1
"""An unreadable reply is re-asked once; after that the step keeps its original action (never a guessed one)."""

REGENERATE_MAX_TOKENS = 128
"""Output budget of one reply: the schema's fields hold at most 32 + 128 characters."""

_ELEMENT_CHARS = 32
_VALUE_CHARS = 128


@dataclass(frozen=True, slots=True)
class RegeneratedAction:
    """The actor's new action: ``element_id`` as the state names it (``None``: none), ``value`` ``""`` for a click."""

    element_id: str | None
    op: str
    value: str


def action_schema(operations: Sequence[str], element_ids: Sequence[str] = ()) -> dict[str, Any]:
    """JSON Schema of a regenerated action: ``{"element_id": str, "op": one of operations, "value": str}``.

    With ``element_ids`` (those the state shows) the element is one of them or ``""``, else a bounded string; the
    value is bounded so a small model's reply closes.
    """
    element: dict[str, Any] = (
        {"type": "string", "enum": [*element_ids, ""]} if element_ids else bounded_text(_ELEMENT_CHARS)
    )
    return {
        "type": "object",
        "properties": {
            "element_id": element,
            "op": {"type": "string", "enum": list(operations)},
            "value": bounded_text(_VALUE_CHARS),
        },
        "required": ["element_id", "op", "value"],
        "additionalProperties": False,
    }


def parse_action(raw: str, operations: Sequence[str]) -> RegeneratedAction:
    """Read a reply of :func:`action_schema` (an ``element_id`` of digits in quotes or bare both read).

    Raises:
        ValueError: Not a JSON object, a field missing or of the wrong type, or an unknown operation.
    """
    try:
        doc = orjson.loads(raw.strip())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object with element_id, op and value")
    element, op, value = doc.get("element_id"), doc.get("op"), doc.get("value", "")
    if isinstance(element, int) and not isinstance(element, bool):
        element = str(element)
    if not isinstance(element, str) and element is not None:
        raise ValueError("element_id must be a string")
    if not isinstance(op, str) or op.strip().upper() not in operations:
        raise ValueError(f"op must be one of {', '.join(operations)}")
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValueError("value must be a string")
    element = element.strip() if element else None
    return RegeneratedAction(element or None, op.strip().upper(), value.strip())


def regenerate_context(trajectory: Trajectory, t: int, history_steps: int, operations: Sequence[str]) -> dict[str, Any]:
    """The regeneration prompt's variables for step ``t``: the situation, the original action, the critique.

    ``history``: the last ``history_steps`` earlier steps with their observations, never step ``t``'s own.
    """
    step = trajectory.steps[t]
    start = max(0, t - history_steps)
    return {
        "task": trajectory.task,
        "step_number": t + 1,
        "state": step.state,
        "action": step.action,
        "critique": CRITIQUE,
        "operations": tuple(operations),
        "history": [
            {"number": i + 1, "action": h.action, "observation": h.observation}
            for i, h in enumerate(trajectory.steps[start:t], start=start)
        ],
        "history_omitted": start,
    }


class Regenerator:
    """Asks the actor (``chat``) for a new action on one flagged step: greedy, schema-constrained, one re-ask."""

    def __init__(self, chat: ChatBackend, prompts: PromptSet) -> None:
        self.chat = chat
        self.prompts = prompts

    def request(self, trajectory: Trajectory, t: int) -> ChatRequest:
        """The one request for step ``t`` of ``trajectory``.

        Raises:
            ValueError: The trajectory's domain has no action space (neither ``web`` nor ``mobile``).
        """
        space = action_space(trajectory.domain)
        ctx = regenerate_context(trajectory, t, self.prompts.limits.history_steps, space.operations)
        return ChatRequest(
            messages=(
                {"role": "system", "content": self.prompts.render_or_base(trajectory.domain, "regenerate_system", ctx)},
                {"role": "user", "content": self.prompts.render_or_base(trajectory.domain, "regenerate_user", ctx)},
            ),
            temperature=REGENERATE_TEMPERATURE,
            max_tokens=REGENERATE_MAX_TOKENS,
            json_schema=action_schema(space.operations, space.element_ids(self.shown_state(trajectory.steps[t].state))),
            schema_name="regenerated_action",
            stage="regenerate",
        )

    def shown_state(self, state: str) -> str:
        """``state`` as the prompt shows it: cut to ``limits.state_chars`` by the template's ``fence``.

        The schema offers only the elements named here (one cut out was never shown); the fence's indentation
        is taken off so that line-anchored names (AMEX's ``[i]``) read as in the stream.
        """
        return fence(state, self.prompts.limits.state_chars).replace("\n" + DATA_INDENT, "\n")

    async def regenerate(self, trajectory: Trajectory, t: int) -> Answer[RegeneratedAction]:
        """Step ``t``'s new action, or ``value=None`` with ``error``; an unreadable reply is re-asked once.

        Raises:
            FatalBackendError: The endpoint refuses every request (bad key, unknown model).
        """
        operations = action_space(trajectory.domain).operations
        return await ask(
            self.chat, self.request(trajectory, t), lambda raw: parse_action(raw, operations), REGENERATE_FORMAT_RETRIES
        )


def action_space(domain: str) -> ActionSpace:
    """The regenerated actions of ``domain``'s streams (:data:`~ceb.data.references.ACTION_SPACES`).

    Raises:
        ValueError: No action space for ``domain`` (only Mind2Web's ``web`` and AMEX's ``mobile`` have one).
    """
    space = ACTION_SPACES.get(domain)
    if space is None:
        raise ValueError(f"no regeneration action space for domain {domain!r} (web and mobile have one)")
    return space
