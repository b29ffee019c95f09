"""Request bodies of ``ceb serve``, checked by the reader's hostile-input rules (:mod:`ceb.data.reader`).

Every rejection is a :class:`~ceb.errors.DataError` whose problems name the field (``history[2].action``), answered
with a 422. A score request may not carry a held-out label; a finished trajectory's labels, rewards and meta are
dropped before any stage or log sees them.

A score request (``POST /v1/score``)::

    {"stream": "agent-1", "trajectory_id": "run-42", "task": "...", "domain": "shell",
     "state": "...", "action": "ls -la" | {"name": "bash", "arguments": {"command": "ls -la"}},
     "reasoning": "...", "op": ..., "element": ..., "value": ..., "actor_logprobs": [...],
     "history": [{"state": ..., "action": ..., "observation": ...}, ...]   (SCHEMA.md steps)
       or "messages": [{"role": "system" | "user" | "assistant" | "tool", ...}, ...]   (OpenAI chat format),
     "actor_prompt": "..."}

A tool call ``{name, arguments}`` becomes ``name {arguments as canonical JSON}`` (:func:`ceb.data.chat.tool_action`);
``messages`` become the history by :func:`ceb.data.chat.chat_steps`, as in ``ceb convert chat``.
"""

from __future__ import annotations

from typing import Any

from ceb.data.chat import chat_steps, tool_action
from ceb.data.reader import DOMAIN, parse_step, parse_trajectory
from ceb.data.sources import kind
from ceb.data.trajectory import Step, Trajectory
from ceb.errors import DataError, Problem, StreamValidationError
from ceb.gate import StepContext, check_stream_name

__all__ = ["MAX_HISTORY", "ScoreRequest", "parse_score_request", "parse_trajectory_request"]

MAX_HISTORY = 1000
"""Most earlier steps (or messages) a score request may carry."""

_SCORE_FIELDS = (
    "stream",
    "trajectory_id",
    "task",
    "domain",
    "state",
    "action",
    "reasoning",
    "op",
    "element",
    "value",
    "actor_logprobs",
    "history",
    "messages",
    "actor_prompt",
)
_WHERE = "<request>"


class ScoreRequest:
    """A checked score request: the stream and the step context."""

    __slots__ = ("context", "stream")

    def __init__(self, stream: str, context: StepContext) -> None:
        self.stream = stream
        self.context = context


def _problem(field: str, message: str) -> DataError:
    return StreamValidationError([Problem(_WHERE, 0, field, message)])


def _string(body: dict[str, Any], key: str, *, required: bool, default: str | None = None) -> str | None:
    value = body.get(key)
    if value is None:
        if required:
            raise _problem(key, "required field is missing")
        return default
    if not isinstance(value, str):
        raise _problem(key, f"must be a string, got {kind(value)}")
    return value


def parse_score_request(body: Any) -> ScoreRequest:
    """Check a score request body (see the module docstring) and build the gate's step context.

    Raises:
        DataError: A field is missing, unknown, of the wrong type, or out of bounds (the problem names it).
    """
    if not isinstance(body, dict):
        raise _problem("<body>", f"must be a JSON object, got {kind(body)}")
    for key in sorted(body):
        if key not in _SCORE_FIELDS:
            extra = " (held-out labels are evaluation-only: a live request may not carry one)" if key == "label" else ""
            raise _problem(str(key)[:60], f"unknown field{extra}; allowed: {', '.join(_SCORE_FIELDS)}")
    stream = check_stream_name(_string(body, "stream", required=True) or "")
    trajectory_id = _string(body, "trajectory_id", required=True) or ""
    if not trajectory_id.strip():
        raise _problem("trajectory_id", "must be a non-empty string")
    task = _string(body, "task", required=True) or ""
    domain = _string(body, "domain", required=True) or ""
    if not DOMAIN.fullmatch(domain):
        raise _problem("domain", "must be a lower-case word matching [a-z][a-z0-9_-]*")
    if "action" not in body:
        raise _problem("action", "required field is missing")
    action = body["action"] if isinstance(body["action"], str) else tool_action(body["action"], "action")
    proposal: dict[str, Any] = {"state": body.get("state") or "", "action": action, "observation": ""}
    for key in ("reasoning", "op", "element", "value", "actor_logprobs"):
        if body.get(key) is not None:
            proposal[key] = body[key]
    step = _step(proposal)
    actor_prompt = _string(body, "actor_prompt", required=False)
    if body.get("history") is not None and body.get("messages") is not None:
        raise _problem("messages", "give history or messages, not both")
    if body.get("messages") is not None:
        history, system = _from_messages(body["messages"])
        actor_prompt = actor_prompt if actor_prompt is not None else system
    else:
        history = _history(body.get("history") or [])
    context = StepContext(trajectory_id, task, domain, step, tuple(history), actor_prompt)
    return ScoreRequest(stream, context)


def _step(obj: dict[str, Any]) -> Step:
    """The proposed step; its problems name top-level fields (``state``, ``action``, ``actor_logprobs[2]``)."""
    try:
        return parse_step(obj, "@", _WHERE)
    except StreamValidationError as exc:
        fixed = [Problem(p.path, p.line, p.field.removeprefix("@.").removeprefix("@"), p.message) for p in exc.problems]
        raise StreamValidationError(fixed) from None


def _history(raw: Any) -> list[Step]:
    if not isinstance(raw, list):
        raise _problem("history", f"must be a list of steps, got {kind(raw)}")
    if len(raw) > MAX_HISTORY:
        raise _problem("history", f"holds {len(raw)} steps; at most {MAX_HISTORY}")
    steps = []
    for i, obj in enumerate(raw):
        step = parse_step(obj, f"history[{i}]", _WHERE)
        steps.append(Step(step.state, step.action, step.observation, step.reasoning, step.op, step.element, step.value))
    return steps


def _from_messages(raw: Any) -> tuple[list[Step], str | None]:
    """Earlier steps from an OpenAI-style chat (:func:`ceb.data.chat.chat_steps`), and its system prompt."""
    if isinstance(raw, list) and len(raw) > MAX_HISTORY:
        raise _problem("messages", f"holds {len(raw)} messages; at most {MAX_HISTORY}")
    chat = chat_steps(raw, path=_WHERE)
    return list(chat.steps), chat.system


def parse_trajectory_request(body: Any) -> tuple[str, Trajectory]:
    """Check a finished-trajectory body: ``{"stream": ..., "trajectory": {SCHEMA.md object}}``.

    Returns:
        The stream and the trajectory, blinded (labels, rewards and meta dropped).

    Raises:
        DataError: A field is missing, unknown or malformed (problems name ``trajectory.steps[2].action``...).
    """
    if not isinstance(body, dict):
        raise _problem("<body>", f"must be a JSON object, got {kind(body)}")
    for key in sorted(body):
        if key not in ("stream", "trajectory"):
            raise _problem(str(key)[:60], "unknown field; allowed: stream, trajectory")
    stream = check_stream_name(_string(body, "stream", required=True) or "")
    if "trajectory" not in body:
        raise _problem("trajectory", "required field is missing")
    try:
        trajectory = parse_trajectory(body["trajectory"], _WHERE)
    except StreamValidationError as exc:
        fixed = [
            Problem(p.path, p.line, f"trajectory.{p.field}" if p.field != "<line>" else "trajectory", p.message)
            for p in exc.problems
        ]
        raise StreamValidationError(fixed) from None
    return stream, trajectory.blinded()
