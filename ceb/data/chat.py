"""OpenAI Chat Completions ``messages`` read as trajectory steps: the one mapping of ``ceb serve`` and ``ceb convert``.

Rules (table in ``docs/data.md``; API: https://platform.openai.com/docs/api-reference/chat/create): each
assistant tool call is a step (action :func:`tool_action`, reasoning the message text); an assistant text
without calls is a step whose action is the text; a ``tool`` message is the observation of the call its
``tool_call_id`` names (else the latest step), answers joined in order; a step's state is the observation of
the previous assistant message's last step (parallel calls share it); the first user message is the task;
system/developer messages are the actor's prompt. Repeated call ids and non-string ids are refused (the
answered call would be a guess). Content parts: ``text`` parts joined by newlines, others dropped; extra
message fields (``name``, ``refusal``) are ignored.
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


@dataclass(frozen=True, slots=True)
class Chat:
    """A transcript read as steps; ``task`` and ``system`` (system/developer text joined) may be ``None``."""

    task: str | None
    system: str | None
    steps: tuple[Step, ...]


def _fail(path: str, line: int, field: str, message: str) -> DataError:
    return DataError(Problem(path, line, field, message))


def tool_action(call: Any, field: str, path: str = "<request>", line: int = 0) -> str:
    """A tool call as ``name {arguments as canonical JSON}`` (keys sorted, no spaces), the form the bank keys.

    ``call`` is ``{"name", "arguments"}`` (object or JSON string; invalid JSON kept verbatim) or OpenAI's
    ``{"id", "type": "function", "function": {...}}``; ``field`` prefixes problem fields.

    Raises:
        DataError: Not an object, an unknown field, a blank ``name``, or ``arguments`` neither object nor string
            or not encodable (names ``field.name`` / ``field.arguments``).
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
    """Read a ``messages`` list as steps by the module docstring's rules; ``field`` prefixes problem fields.

    Raises:
        DataError: Not a list; a non-object message or unknown role; bad content or ``tool_calls``; a bad tool
            call (:func:`tool_action`); a non-string or repeated call id; a ``tool_call_id`` that is not a string
            or answers no earlier call. Names the field (``messages[4].tool_call_id``).
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
    """An outcome as a label: ``True``/1/``"C"`` -> 1, ``False``/0/``"I"`` -> 0, else ``None``.

    A partial score (0.5, inspect's ``"P"``), ``"N"`` or text gets no label: a threshold would guess the scorer.
    """
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float) and value in (0, 1):
        return int(value)
    if value in ("C", "I"):
        return 1 if value == "C" else 0
    return None


def _with_states(steps: list[Step], turns: list[int]) -> tuple[Step, ...]:
    """Set each step's state to the previous assistant message's last observation."""
    out: list[Step] = []
    state = ""
    for t, step in enumerate(steps):
        if t > 0 and turns[t] != turns[t - 1]:
            state = steps[t - 1].observation
        out.append(replace(step, state=state))
    return tuple(out)


def _text_parts(content: Any, field: str, path: str, line: int) -> str:
    """The joined ``text`` parts of a content-parts list."""
    if not isinstance(content, list):
        raise _fail(path, line, field, f"must be a string or a list of content parts, got {kind(content)}")
    texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(t for t in texts if isinstance(t, str))
