"""OpenAI chat messages as trajectory steps: the one mapping behind ``ceb serve``'s ``messages`` and ``ceb convert``.

A chat transcript in the shape of OpenAI's Chat Completions API (``messages``: ``system`` / ``developer``,
``user``, ``assistant`` with ``tool_calls``, ``tool`` with ``tool_call_id``; the API reference's "Create chat
completion" request body, https://platform.openai.com/docs/api-reference/chat/create) reads as steps so:

- each **tool call** of an assistant message is one step: its action is the call as :func:`tool_action` renders
  it, ``name {arguments as canonical JSON}``; the message's text is the step's ``reasoning``;
- an assistant message with text and **no tool call** (the agent's answer) is one step whose action is the text;
  an assistant message with neither is not a step;
- a **tool** message is the observation of the call it answers (``tool_call_id``, a string; without one, of the
  latest step); two answers to one call are joined in order. Two calls with one id, and an id that is not a
  string, are refused: the answer's call would be a guess;
- a step's **state** is the observation of the last step of the previous assistant message (empty for the
  first): what the agent had just seen when it chose the action. Parallel calls of one message share it;
- the **first user message** is the task; later user messages are turns of the conversation, not steps;
  system and developer messages are the actor's prompt, never a step.

Message content may be a string, null, or a list of content parts, whose ``text`` parts are joined by newlines
(images and audio are left out). Fields a message carries beyond these (``name``, ``refusal``, ``annotations``)
are ignored: they change no step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from ceb.data.sources import kind
from ceb.data.trajectory import Step
from ceb.errors import DataError, Problem

__all__ = ["ROLES", "Chat", "chat_steps", "outcome_label", "tool_action"]

ROLES = ("system", "developer", "user", "assistant", "tool")
"""The message roles a transcript may hold."""


@dataclass(frozen=True, slots=True)
class Chat:
    """A transcript read as steps.

    Attributes:
        task: The text of the first user message; ``None`` when there is none.
        system: The system and developer messages' text joined by newlines (the actor's prompt); ``None`` when
            there is none.
        steps: The steps in the order the assistant took them.
    """

    task: str | None
    system: str | None
    steps: tuple[Step, ...]


def _fail(path: str, line: int, field: str, message: str) -> DataError:
    return DataError(Problem(path, line, field, message))


def tool_action(call: Any, field: str, path: str = "<request>", line: int = 0) -> str:
    """The action string of a tool call: ``name {arguments as canonical JSON}``.

    The form the bank keys and the critic reads: identical for identical calls however the client spelled the
    JSON (keys sorted, no spaces). Arguments that are not valid JSON text are kept as the agent wrote them.

    Args:
        call: ``{"name": ..., "arguments": {...} or "<JSON>"}``, or OpenAI's ``{"id": ..., "type": "function",
            "function": {"name": ..., "arguments": "<JSON>"}}``.
        field: Where the call is (``messages[2].tool_calls[0]``), the prefix of a problem's field.
        path: The file (or ``<request>``) for the problem.
        line: The line for the problem (0 for a request).

    Raises:
        DataError: The call is not an object, has a field a call does not have, its ``name`` is missing or
            blank, or its ``arguments`` are neither an object nor a string or cannot be encoded (names
            ``field.name`` / ``field.arguments``).
    """
    if not isinstance(call, dict):
        raise _fail(path, line, field, f"must be a string or a tool call object {{name, arguments}}, got {kind(call)}")
    if "function" in call and isinstance(call["function"], dict):  # OpenAI's {"type": "function", "function": ...}
        call, field = call["function"], f"{field}.function"
    unknown = sorted(set(call) - {"name", "arguments", "id", "type"})
    if unknown:
        raise _fail(path, line, f"{field}.{unknown[0]}", "unknown field; a tool call has name and arguments")
    name = call.get("name")
    if not isinstance(name, str) or not name.strip():
        raise _fail(path, line, f"{field}.name", f"must be a non-empty string, got {kind(name)}")
    args = call.get("arguments", {})
    if not isinstance(args, dict | str):  # OpenAI's tool calls carry an object, or one as a JSON string
        raise _fail(path, line, f"{field}.arguments", f"must be an object or a string, got {kind(args)}")
    if isinstance(args, str):
        try:
            args = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError:
            return f"{name} {args}"  # not JSON: kept as the agent wrote it
    try:
        return f"{name} {orjson.dumps(args, option=orjson.OPT_SORT_KEYS).decode()}"
    except TypeError as exc:  # nests too deep for orjson
        raise _fail(path, line, f"{field}.arguments", f"cannot be encoded: {exc}") from None


def chat_steps(messages: Any, *, path: str = "<request>", line: int = 0, field: str = "messages") -> Chat:
    """Read a list of chat messages as steps, by the rules of the module docstring.

    Args:
        messages: The decoded ``messages`` list.
        path: The file (or ``<request>``) named by a problem.
        line: The line named by a problem (0 for a request).
        field: The list's place in its document (``messages``, ``samples[3].messages``), the prefix of every
            problem's field.

    Returns:
        The task, the actor's prompt and the steps.

    Raises:
        DataError: ``messages`` is not a list, a message is not an object or has an unknown role, content
            that is neither a string, null nor a list of parts, ``tool_calls`` that is not a list, a bad tool
            call (:func:`tool_action`), a call id that is not a string or is an earlier call's, or a tool message
            whose ``tool_call_id`` is not a string or answers no earlier call. The problem names the field:
            ``messages[4].tool_call_id``.
    """
    if not isinstance(messages, list):
        raise _fail(path, line, field, f"must be a list of chat messages, got {kind(messages)}")
    steps: list[Step] = []
    turns: list[int] = []  # the assistant message (index) each step came from
    by_call: dict[str, int] = {}
    task: str | None = None
    system: str | None = None
    for i, m in enumerate(messages):
        at = f"{field}[{i}]"
        if not isinstance(m, dict):
            raise _fail(path, line, at, f"must be a message object, got {kind(m)}")
        role = m.get("role")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            content = _text_parts(content, f"{at}.content", path, line)
        if role == "system" or role == "developer":
            system = content if system is None else f"{system}\n{content or ''}"
        elif role == "user":
            if task is None:
                task = content or ""
        elif role == "assistant":
            calls = m.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise _fail(path, line, f"{at}.tool_calls", f"must be a list, got {kind(calls)}")
            if not calls:
                if content and content.strip():
                    steps.append(Step(state="", action=content, observation=""))
                    turns.append(i)
                continue
            for j, call in enumerate(calls):
                action = tool_action(call, f"{at}.tool_calls[{j}]", path, line)
                steps.append(Step(state="", action=action, observation="", reasoning=content or None))
                turns.append(i)
                call_id = call.get("id") if isinstance(call, dict) else None
                if call_id is None:
                    continue
                if not isinstance(call_id, str):
                    raise _fail(path, line, f"{at}.tool_calls[{j}].id", f"must be a string, got {kind(call_id)}")
                if call_id in by_call:  # a tool message could not say which of the two it answers
                    first = f"{field}[{turns[by_call[call_id]]}]"
                    raise _fail(path, line, f"{at}.tool_calls[{j}].id", f"{call_id!r} is also a call's id in {first}")
                by_call[call_id] = len(steps) - 1
        elif role == "tool":
            call_id = m.get("tool_call_id")
            if call_id is not None and not isinstance(call_id, str):  # never the latest call's by default
                raise _fail(path, line, f"{at}.tool_call_id", f"must be a string (a call's id), got {kind(call_id)}")
            target = by_call.get(call_id) if call_id is not None else (len(steps) - 1 if steps else None)
            if target is None:
                raise _fail(path, line, f"{at}.tool_call_id", "answers no earlier assistant tool call")
            step = steps[target]
            steps[target] = replace(step, observation=step.observation + (content or ""))
        else:
            raise _fail(path, line, f"{at}.role", f"must be {', '.join(ROLES[:-1])} or {ROLES[-1]}")
    return Chat(task, system, _with_states(steps, turns))


def outcome_label(value: Any) -> int | None:
    """A trajectory's outcome as a label: 1 (succeeded), 0 (failed) or ``None`` (not a pass/fail value).

    ``True``, the number 1 and inspect_ai's ``"C"`` (``CORRECT``) are 1; ``False``, the number 0 and ``"I"``
    (``INCORRECT``) are 0. Anything else (a partial score such as 0.5 or inspect's ``"P"``, ``"N"`` for no
    answer, text, a list) is no label: a threshold would be a guess about the scorer.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if value in ("C", "I"):
        return 1 if value == "C" else 0
    return None


def _with_states(steps: list[Step], turns: list[int]) -> tuple[Step, ...]:
    """Each step's state: the observation of the last step of the previous assistant message."""
    out: list[Step] = []
    state = ""
    for t, step in enumerate(steps):
        if t > 0 and turns[t] != turns[t - 1]:
            state = steps[t - 1].observation
        out.append(replace(step, state=state))
    return tuple(out)


def _text_parts(content: Any, field: str, path: str, line: int) -> str:
    """The text of a content-parts list (``[{"type": "text", "text": ...}]``); other parts are left out."""
    if not isinstance(content, list):
        raise _fail(path, line, field, f"must be a string or a list of content parts, got {kind(content)}")
    texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))
