"""Reading Mind2Web task files: every field the converter uses, checked, with errors naming where it failed.

The layout read is given in :mod:`ceb.data.mind2web`'s docstring ("Task files").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.data.sources import Fail, kind, natural_key, optional_str, required_str
from ceb.errors import ConfigError, DataError, Problem

__all__ = ["Action", "Task", "load_task_list", "read_task", "task_files"]


@dataclass(frozen=True, slots=True)
class Action:
    """One recorded step of a task, checked.

    Attributes:
        uid: ``action_uid``.
        op: ``operation.op``, the gold operation.
        html: ``cleaned_html``, the page the step acted on.
        positive: ``backend_node_id`` of every positive candidate.
        candidates: ``(field, candidate object)`` of every candidate, positives first; ``field`` places it
            in the task file for errors.
        reference: ``action_reprs[t]``, or ``None`` when it is not read.
    """

    uid: str
    op: str
    html: str
    positive: frozenset[str]
    candidates: tuple[tuple[str, dict[str, Any]], ...]
    reference: str | None


@dataclass(frozen=True, slots=True)
class Task:
    """One Mind2Web task, checked.

    Attributes:
        annotation_id: The task's id, unique over all task files.
        task: ``confirmed_task``.
        website: ``website``.
        domain: ``domain``, if given.
        subdomain: ``subdomain``, if given.
        actions: Its steps, in order.
        file: The task file it came from.
    """

    annotation_id: str
    task: str
    website: str
    domain: str | None
    subdomain: str | None
    actions: tuple[Action, ...]
    file: str


def task_files(tasks: str | Path | Sequence[str | Path]) -> list[Path]:
    """The task files to read, in stream order: a directory stands for its ``*.json`` files in natural order.

    Raises:
        ConfigError: No file is given.
        DataError: A directory holds no ``*.json`` file.
    """
    given = [Path(tasks)] if isinstance(tasks, str | Path) else [Path(t) for t in tasks]
    if not given:
        raise ConfigError("convert_mind2web needs at least one task file")
    files: list[Path] = []
    for path in given:
        if path.is_dir():
            found = sorted(path.glob("*.json"), key=natural_key)
            if not found:
                raise DataError(Problem(str(path), 0, "<file>", "a task directory must hold Mind2Web *.json files"))
            files.extend(found)
        else:
            files.append(path)
    return files


def load_task_list(path: Path) -> list[Any]:
    """The task objects of one task file, unchecked.

    Raises:
        DataError: The file cannot be read, is not valid JSON, or is not a list.
    """
    try:
        data = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise DataError(Problem(str(path), 0, "<file>", f"cannot read the file: {exc.strerror or exc}")) from exc
    except orjson.JSONDecodeError as exc:
        raise DataError(Problem(str(path), exc.lineno, "<file>", f"not valid JSON: {exc.msg}")) from exc
    if not isinstance(data, list):
        raise DataError(
            Problem(str(path), 0, "<file>", f"must be a JSON list of Mind2Web task objects, got {kind(data)}")
        )
    return data


def read_task(path: Path, index: int, record: Any, *, need_reprs: bool) -> Task:
    """Check one task's shape.

    Args:
        path: The task file.
        index: The task's index in the file's list.
        record: The decoded task object.
        need_reprs: Read ``action_reprs`` (``observation="reference"`` shows them).

    Raises:
        DataError: The task breaks the layout (names the file, the ``annotation_id``, the step and the field).
    """
    aid: str | None = None

    def fail(field: str, message: str, step: int | None = None) -> DataError:
        return DataError(Problem(str(path), 0, f"[{index}].{field}", message, aid, step))

    if not isinstance(record, dict):
        raise fail("<task>", f"must be an object, got {kind(record)}")
    aid = required_str(record, "annotation_id", fail)
    task = required_str(record, "confirmed_task", fail)
    website = required_str(record, "website", fail)
    domain = optional_str(record, "domain", fail)
    subdomain = optional_str(record, "subdomain", fail)
    actions = record.get("actions")
    if not isinstance(actions, list) or not actions:
        raise fail("actions", "missing, empty or not a list")
    reprs = record.get("action_reprs")
    if need_reprs and (
        not isinstance(reprs, list) or len(reprs) != len(actions) or not all(isinstance(r, str) for r in reprs)
    ):
        raise fail(
            "action_reprs",
            f"must be a list of {len(actions)} strings, one per action (observation='reference' reads it)",
        )
    read = tuple(
        _read_action(action, t, reprs[t] if need_reprs and isinstance(reprs, list) else None, fail)
        for t, action in enumerate(actions)
    )
    return Task(aid, task, website, domain, subdomain, read, str(path))


def _read_action(action: Any, t: int, reference: str | None, fail: Fail) -> Action:
    at = f"actions[{t}]"
    if not isinstance(action, dict):
        raise fail(at, f"must be an object, got {kind(action)}", t)
    uid = action.get("action_uid")
    if not isinstance(uid, str) or not uid:
        raise fail(f"{at}.action_uid", "missing or not a non-empty string", t)
    operation = action.get("operation")
    if not isinstance(operation, dict):
        raise fail(f"{at}.operation", f"missing or not an object (action_uid {uid!r})", t)
    op = operation.get("op")
    if not isinstance(op, str) or not op:
        raise fail(f"{at}.operation.op", f"missing or not a non-empty string (action_uid {uid!r})", t)
    html = action.get("cleaned_html")
    if not isinstance(html, str):
        raise fail(f"{at}.cleaned_html", f"missing or not a string (action_uid {uid!r})", t)
    candidates: list[tuple[str, dict[str, Any]]] = []
    positive: set[str] = set()
    for key in ("pos_candidates", "neg_candidates"):
        found = action.get(key)
        if not isinstance(found, list):
            raise fail(f"{at}.{key}", f"missing or not a list (action_uid {uid!r})", t)
        for j, cand in enumerate(found):
            node = cand.get("backend_node_id") if isinstance(cand, dict) else None
            if type(node) is int:
                node = str(node)
            if not isinstance(node, str):
                raise fail(f"{at}.{key}[{j}].backend_node_id", f"missing or not a string (action_uid {uid!r})", t)
            if key == "pos_candidates":
                positive.add(node)
            candidates.append((f"{at}.{key}[{j}]", cand))
    return Action(uid, op, html, frozenset(positive), tuple(candidates), reference)
