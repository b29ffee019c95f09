"""Read, validate and write trajectory streams (``docs/stream-format.md``, version 1; :data:`STREAM_SCHEMA`).

A stream is JSONL files read in order, one trajectory a line. :func:`read_stream` checks every line before it
returns and reports every problem at once with file, line and field (:class:`~ceb.errors.Problem`). Rules beyond
the field tables: blank lines are skipped; optional ``null`` equals absent; unknown fields are refused (top level
and steps); a file with no trajectory, or a UTF-8 BOM, is refused (file-level problems carry line ``0``, field
``<file>``); ``meta`` nests at most 200 levels so it can always be written back (orjson's limit is 254); a
repeated JSON key keeps the last value, undetected (orjson).
"""

from __future__ import annotations

import math
import os
import re
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from ceb.data.sources import kind
from ceb.data.trajectory import Step, Trajectory
from ceb.errors import Problem, StreamValidationError, with_path

__all__ = [
    "DOMAIN",
    "STREAM_SCHEMA",
    "check_trajectory",
    "encode_trajectory",
    "parse_step",
    "parse_trajectory",
    "read_stream",
    "trajectory_object",
    "write_stream",
]

DOMAIN = re.compile(r"[a-z][a-z0-9_-]*")
"""A trajectory's ``domain``: a lower-case word (``web``, ``shell``); ``Shell`` is refused, not folded."""
_BOM = b"\xef\xbb\xbf"
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

STREAM_SCHEMA = Path(__file__).with_name("stream.schema.json")
"""JSON Schema (draft 2020-12) of one stream line; ``tests/data/test_stream_schema.py`` checks the reader agrees."""

_META_MAX_DEPTH = 200

_TOP_REQUIRED = ("id", "task", "domain", "steps")
_TOP_OPTIONAL = ("actor", "env", "meta")
_TOP_FIELDS = frozenset(_TOP_REQUIRED + _TOP_OPTIONAL)
_STEP_REQUIRED = ("state", "action", "observation")
_STEP_OPTIONAL_STR = ("reasoning", "op", "element", "value")
_STEP_OPTIONAL = (*_STEP_OPTIONAL_STR, "reward", "actor_logprobs", "label")
_STEP_FIELDS = frozenset(_STEP_REQUIRED + _STEP_OPTIONAL)
_TOP_ALLOWED = ", ".join(_TOP_REQUIRED + _TOP_OPTIONAL)
_STEP_ALLOWED = ", ".join(_STEP_REQUIRED + _STEP_OPTIONAL)


@dataclass(frozen=True, slots=True)
class _Where:
    """The place a line came from, to stamp on its problems."""

    path: str
    line: int
    trajectory_id: str | None = None

    def problem(self, field: str, message: str, step: int | None = None) -> Problem:
        return Problem(self.path, self.line, field, message, self.trajectory_id, step)


def read_stream(paths: Sequence[str | Path]) -> list[Trajectory]:
    """Read and strictly validate a stream's files in stream order (paper Algorithm 1); all lines or nothing.

    Returns trajectories of shape ``(N,)``, each ``source`` = ``"<path>:<line>"`` (1-based, path as given).

    Raises:
        StreamValidationError: Bad lines, a repeated ``id``, or a missing, unreadable or empty file; ``problems``
            lists every one in file and line order.
        ValueError: ``paths`` is empty.
    """
    if not paths:
        raise ValueError("read_stream needs at least one path")
    problems: list[Problem] = []
    trajectories: list[Trajectory] = []
    first_seen: dict[str, str] = {}
    for path in paths:
        name = str(path)
        count = 0
        try:
            for lineno, raw in _lines(Path(path)):
                if not raw.strip():
                    continue
                count += 1
                traj, found = _parse_line(raw, name, lineno)
                # A bad line still claims its id when the id itself is readable (every problem carries it).
                tid = traj.id if traj is not None else found[0].trajectory_id
                if tid is not None and tid in first_seen:
                    where = _Where(name, lineno, tid)
                    found.append(where.problem("id", f"duplicate id {tid!r}: first at {first_seen[tid]}"))
                elif tid is not None:
                    first_seen[tid] = f"{name}:{lineno}"
                problems.extend(found)
                if traj is not None and not found:
                    trajectories.append(traj)
        except OSError as exc:
            problems.append(Problem(name, 0, "<file>", f"cannot read the file: {exc.strerror or exc}"))
            continue
        if count == 0:
            problems.append(Problem(name, 0, "<file>", "the file holds no trajectory (empty or blank lines only)"))
    if problems:
        raise StreamValidationError(problems)
    return trajectories


def parse_trajectory(obj: Any, source: str = "<request>") -> Trajectory:
    """Validate one decoded trajectory (a request body) as a stream line; problems name ``source``, line 0.

    Raises:
        StreamValidationError: Every bad field.
    """
    traj, problems = _validate(obj, _Where(source, 0))
    if problems or traj is None:
        raise StreamValidationError(problems)
    return replace(traj, source=source)


def parse_step(obj: Any, field: str, source: str = "<request>") -> Step:
    """Validate one decoded step; ``field`` (``"history[2]"``) prefixes every problem's field.

    Raises:
        StreamValidationError: Every bad field.
    """
    step, problems = _validate_step(obj, 0, _Where(source, 0), at=field)
    if problems or step is None:
        raise StreamValidationError(problems)
    return step


def write_stream(path: str | Path, trajectories: Iterable[Trajectory]) -> Path:
    """Write a stream file atomically (temporary file, then ``os.replace``); returns ``path``.

    ``None`` fields, empty ``meta`` and ``source`` are left out, and :func:`read_stream` of the result gives the
    trajectories back (tuples in ``meta`` as lists, NaN as null).

    Raises:
        StreamValidationError: A trajectory breaks the format (names ``path`` and its 1-based line); nothing written.
        OSError: The file cannot be written.
    """
    dest = Path(path)
    lines: list[bytes] = []
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for lineno, traj in enumerate(trajectories, start=1):
        where = _Where(str(dest), lineno, traj.id if isinstance(traj.id, str) else None)
        obj = trajectory_object(traj)
        # Validate before encoding: orjson would quietly write NaN as null and break the round trip.
        _, found = _validate(obj, where)
        problems.extend(found)
        if found:
            continue
        try:
            lines.append(orjson.dumps(obj))
        except TypeError as exc:  # orjson.JSONEncodeError: a value in meta that JSON cannot hold
            problems.append(where.problem("meta", f"cannot be written as JSON: {exc}"))
        if traj.id in seen:
            problems.append(where.problem("id", f"duplicate id {traj.id!r}: first at line {seen[traj.id]}"))
        seen.setdefault(traj.id, lineno)
    if problems:
        raise StreamValidationError(problems)
    if not lines:
        raise StreamValidationError([Problem(str(dest), 0, "<file>", "no trajectories to write")])
    _atomic_write(dest, b"\n".join(lines) + b"\n")
    return dest


def check_trajectory(traj: Trajectory, path: str = "<trajectory>", line: int = 0) -> None:
    """Check a trajectory built in code by :func:`read_stream`'s rules; problems carry ``path`` and ``line``.

    Raises:
        StreamValidationError: Every bad field.
    """
    where = _Where(path, line, traj.id if isinstance(traj.id, str) else None)
    _, found = _validate(trajectory_object(traj), where)
    if found:
        raise StreamValidationError(found)


def encode_trajectory(traj: Trajectory, path: str | Path, line: int) -> bytes:
    """The checked JSON line :func:`write_stream` writes for ``traj`` (no newline); ids are the caller's to keep unique.

    Raises:
        StreamValidationError: Every bad field, named at ``path``:``line``.
    """
    # Validate before encoding: orjson would quietly write NaN as null and break the round trip.
    check_trajectory(traj, str(path), line)
    try:
        return orjson.dumps(trajectory_object(traj))
    except TypeError as exc:  # orjson.JSONEncodeError: a value in meta that JSON cannot hold
        where = _Where(str(path), line, traj.id if isinstance(traj.id, str) else None)
        raise StreamValidationError([where.problem("meta", f"cannot be written as JSON: {exc}")]) from exc


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(1-based line number, bytes without newline)`` of each line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            yield lineno, raw.rstrip(b"\n")


def _parse_line(raw: bytes, path: str, lineno: int) -> tuple[Trajectory | None, list[Problem]]:
    """Decode and validate one non-blank line; never raises."""
    where = _Where(path, lineno)
    if raw.startswith(_BOM):
        return None, [where.problem("<line>", "starts with a UTF-8 byte-order mark; save the file without one")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, [where.problem("<line>", f"not valid UTF-8: byte {exc.start} ({exc.reason})")]
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        return None, [where.problem("<line>", f"not valid JSON: {exc.msg} (column {exc.colno})")]
    return _validate(obj, where)


def _validate(obj: Any, where: _Where) -> tuple[Trajectory | None, list[Problem]]:
    """Check one decoded line; the trajectory when it passes."""
    if not isinstance(obj, dict):
        return None, [where.problem("<line>", f"must be a JSON object, got {kind(obj)}")]
    tid = obj.get("id")
    if isinstance(tid, str) and tid.strip():
        where = _Where(where.path, where.line, tid)
    problems: list[Problem] = []
    for key in sorted(obj.keys() - _TOP_FIELDS):
        message = f"unknown field {_name(key)}; allowed fields: {_TOP_ALLOWED}"
        problems.append(where.problem(_field_path("", key), message))
    for key in _TOP_REQUIRED:
        if key not in obj:
            problems.append(where.problem(key, "required field is missing"))

    if "id" in obj and not (isinstance(tid, str) and tid.strip()):
        problems.append(where.problem("id", f"must be a non-empty string, got {_show(tid)}"))
    if "task" in obj and not isinstance(obj["task"], str):
        problems.append(where.problem("task", f"must be a string, got {kind(obj['task'])}"))
    if "domain" in obj:
        domain = obj["domain"]
        if not (isinstance(domain, str) and DOMAIN.fullmatch(domain)):
            problems.append(
                where.problem("domain", f"must be a lower-case word matching [a-z][a-z0-9_-]*, got {_show(domain)}")
            )
    for key in ("actor", "env"):
        if obj.get(key) is not None and not isinstance(obj[key], str):
            problems.append(where.problem(key, f"must be a string or null, got {kind(obj[key])}"))
    meta = obj.get("meta")
    if meta is not None and not isinstance(meta, dict):
        problems.append(where.problem("meta", f"must be an object or null, got {kind(meta)}"))
    elif meta is not None and _nests_deeper_than(meta, _META_MAX_DEPTH):
        problems.append(where.problem("meta", f"nests deeper than {_META_MAX_DEPTH} levels of objects and lists"))

    steps: list[Step] = []
    raw_steps = obj.get("steps")
    if "steps" in obj:
        if not isinstance(raw_steps, list):
            problems.append(where.problem("steps", f"must be a non-empty list of step objects, got {kind(raw_steps)}"))
        elif not raw_steps:
            problems.append(where.problem("steps", "must hold at least one step, got an empty list"))
        else:
            for i, raw_step in enumerate(raw_steps):
                step, found = _validate_step(raw_step, i, where)
                problems.extend(found)
                if step is not None:
                    steps.append(step)

    if problems:
        return None, problems
    return (
        Trajectory(
            id=obj["id"],
            task=obj["task"],
            domain=obj["domain"],
            steps=tuple(steps),
            actor=obj.get("actor"),
            env=obj.get("env"),
            meta=meta if meta is not None else {},
            source=f"{where.path}:{where.line}",
        ),
        [],
    )


def _validate_step(obj: Any, i: int, where: _Where, at: str | None = None) -> tuple[Step | None, list[Problem]]:
    """Check step ``i``; problem fields read ``steps[i].<field>`` (or ``at.<field>``)."""
    at = f"steps[{i}]" if at is None else at
    if not isinstance(obj, dict):
        return None, [where.problem(at, f"must be a step object, got {kind(obj)}", i)]
    problems: list[Problem] = []
    for key in sorted(obj.keys() - _STEP_FIELDS):
        problems.append(
            where.problem(_field_path(at, key), f"unknown step field {_name(key)}; allowed: {_STEP_ALLOWED}", i)
        )
    for key in _STEP_REQUIRED:
        if key not in obj:
            problems.append(where.problem(f"{at}.{key}", "required field is missing", i))
    for key in ("state", "observation"):
        if key in obj and not isinstance(obj[key], str):
            problems.append(where.problem(f"{at}.{key}", f"must be a string (may be empty), got {kind(obj[key])}", i))
    if "action" in obj:
        action = obj["action"]
        if not isinstance(action, str):
            problems.append(where.problem(f"{at}.action", f"must be a non-empty string, got {kind(action)}", i))
        elif not action.strip():
            got = "an empty string" if not action else "only whitespace"
            problems.append(where.problem(f"{at}.action", f"must be a non-empty string, got {got}", i))
    for key in _STEP_OPTIONAL_STR:
        if obj.get(key) is not None and not isinstance(obj[key], str):
            problems.append(where.problem(f"{at}.{key}", f"must be a string or null, got {kind(obj[key])}", i))

    reward = obj.get("reward")
    if reward is not None and not _is_finite_number(reward):
        problems.append(where.problem(f"{at}.reward", f"must be a finite number or null, got {_show(reward)}", i))
    logprobs = obj.get("actor_logprobs")
    if logprobs is not None:
        problems.extend(_check_logprobs(logprobs, f"{at}.actor_logprobs", i, where))
    label = obj.get("label")
    if label is not None and not (type(label) is int and label in (0, 1)):
        problems.append(where.problem(f"{at}.label", f"must be the integer 0 or 1, or null, got {_show(label)}", i))

    if problems:
        return None, problems
    return (
        Step(
            state=obj["state"],
            action=obj["action"],
            observation=obj["observation"],
            reasoning=obj.get("reasoning"),
            op=obj.get("op"),
            element=obj.get("element"),
            value=obj.get("value"),
            reward=float(reward) if reward is not None else None,
            actor_logprobs=tuple(float(x) for x in logprobs) if logprobs is not None else None,
            label=label,
        ),
        [],
    )


def _check_logprobs(value: Any, field: str, i: int, where: _Where) -> list[Problem]:
    if not isinstance(value, list):
        return [
            where.problem(field, f"must be a list of log-probabilities (numbers <= 0) or null, got {kind(value)}", i)
        ]
    if not value:
        return [where.problem(field, "must hold one log-probability per action token, got an empty list", i)]
    for j, x in enumerate(value):
        if not _is_finite_number(x) or x > 0:
            return [where.problem(f"{field}[{j}]", f"must be a finite number <= 0 (a natural log), got {_show(x)}", i)]
    return []


def _nests_deeper_than(value: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether containers nest more than ``limit`` levels (iterative: any depth is safe)."""
    todo: list[tuple[Any, int]] = [(value, 1)]
    while todo:
        item, level = todo.pop()
        if level > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        todo.extend((child, level + 1) for child in children if isinstance(child, dict | list))
    return False


def _is_finite_number(x: Any) -> bool:
    # bool is an int subclass; `true` must not pass as a reward of 1.
    return type(x) in (int, float) and math.isfinite(x)


def _field_path(prefix: str, key: str) -> str:
    """Dotted field path; a non-identifier key is quoted (``steps[1]['a.b']``)."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{prefix}.{key}" if prefix else key
    return f"{prefix}[{_name(key)}]"


def _name(key: str) -> str:
    """A key quoted for a message, cut at 60 characters."""
    return repr(key if len(key) <= 60 else key[:60] + "...")


def _show(x: Any) -> str:
    """A bad value for a message: itself when small, else its kind."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if type(x) in (int, float):
        return repr(x)
    if type(x) is str and len(x) <= 40:
        return orjson.dumps(x).decode()
    return kind(x)


def trajectory_object(traj: Trajectory) -> dict[str, Any]:
    """One trajectory's JSON object in format field order, ``None``, empty ``meta`` and ``source`` left out."""
    obj: dict[str, Any] = {"id": traj.id, "task": traj.task, "domain": traj.domain}
    if traj.actor is not None:
        obj["actor"] = traj.actor
    if traj.env is not None:
        obj["env"] = traj.env
    obj["steps"] = [_step_object(s) for s in traj.steps]
    if traj.meta:
        obj["meta"] = dict(traj.meta) if isinstance(traj.meta, Mapping) else traj.meta
    return obj


def _step_object(step: Step) -> dict[str, Any]:
    obj: dict[str, Any] = {"state": step.state, "action": step.action, "observation": step.observation}
    for key in _STEP_OPTIONAL:
        value = getattr(step, key)
        if value is not None:
            obj[key] = list(value) if key == "actor_logprobs" else value
    return obj


def _atomic_write(dest: Path, data: bytes) -> None:
    """Write beside ``dest``, fsync, ``os.replace``; errors name ``dest``."""
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    try:
        # os.open with 0o666 lets the umask decide the final mode, as a plain open() would.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except OSError as exc:
        # Name the stream, never the temporary file (a user never gave it; it is gone): a failed write names no
        # file, and os.open / os.replace name the temporary one (a directory at dest, a directory not writable).
        tmp.unlink(missing_ok=True)
        if exc.errno is None:
            raise with_path(exc, dest) from exc
        raise OSError(exc.errno, exc.strerror, os.fspath(dest)) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
