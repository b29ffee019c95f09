"""An agent's Mind2Web predictions, in ceb's format or MindAct's (both in :mod:`ceb.data.mind2web`), checked.

ceb's container rules are :func:`~ceb.data.predictions.read_predictions`'s; MindAct's file is what its
evaluator writes (OSU-NLP-Group/Mind2Web ``src/action_prediction/metric.py``, ``ActionEvaluatorMultiChoice``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.data.predictions import read_predictions
from ceb.data.sources import kind, optional_str, required_str
from ceb.errors import ConfigError, DataError, Problem

__all__ = ["NO_ACTION", "PREDICTION_FORMATS", "PREDICTION_KEYS", "Prediction", "load_predictions"]

PREDICTION_KEYS = ("annotation_id", "action_uid", "element_id", "op", "value", "reasoning", "actor", "actor_logprobs")

PREDICTION_FORMATS: tuple[str, ...] = ("auto", "ceb", "mindact")
"""``auto`` reads a ``.json`` list whose first item is a list as MindAct's."""

NO_ACTION = "NONE"
"""``op`` of a MindAct row that chose nothing ("None of the above")."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """One predicted step, checked; ``line``, ``prefix``, ``where`` place it in its file."""

    line: int
    prefix: str
    where: str
    element_id: str | None
    op: str
    value: str | None
    reasoning: str | None
    actor_logprobs: tuple[float, ...] | None


Predictions = dict[str, dict[str, dict[str, Prediction]]]
"""``actor -> annotation_id -> action_uid -> prediction``."""


def load_predictions(path: Path, default_actor: str | None, fmt: str = "auto") -> Predictions:
    """``actor -> annotation_id -> action_uid -> prediction``, in file order; ``default_actor`` for rows naming none.

    Raises:
        ConfigError: An unknown ``fmt``.
        DataError: The file breaks its format, one actor predicts a step twice, or MindAct without an actor
            (names file, line or item, field).
    """
    if fmt not in PREDICTION_FORMATS:
        raise ConfigError(f"unknown predictions format {fmt!r}; choose {', '.join(PREDICTION_FORMATS)}")
    if fmt == "mindact" or (fmt == "auto" and _looks_like_mindact(path)):
        return _load_mindact(path, default_actor)
    out: Predictions = {}
    for p in read_predictions(path, PREDICTION_KEYS, default_actor):
        record, obj, fail, name, logprobs = p.record, p.obj, p.fail, p.actor, p.logprobs
        aid = required_str(obj, "annotation_id", fail)
        uid = required_str(obj, "action_uid", fail)
        if "element_id" not in obj:
            raise fail("element_id", "missing (use null when the agent chose no element)")
        element = obj["element_id"]
        if type(element) is int:
            element = str(element)
        if element is not None and not isinstance(element, str):
            raise fail("element_id", f"must be a string, an integer or null, got {kind(element)}")
        op = required_str(obj, "op", fail)
        value = optional_str(obj, "value", fail)
        reasoning = optional_str(obj, "reasoning", fail)
        per_step = out.setdefault(name, {}).setdefault(aid, {})
        if uid in per_step:
            raise fail("action_uid", f"repeats the prediction at {per_step[uid].where} (actor {name!r})")
        per_step[uid] = Prediction(record.line, record.prefix, record.where, element, op, value, reasoning, logprobs)
    return out


def _looks_like_mindact(path: Path) -> bool:
    """Whether a ``.json`` file is a list whose first item is a list."""
    if path.suffix != ".json":
        return False
    try:
        with path.open("rb") as f:
            head = f.read(256).lstrip()
    except OSError:
        return False  # the ceb reader names the unreadable file
    return head[:1] == b"[" and head[1:].lstrip()[:1] == b"["


def _load_mindact(path: Path, actor: str | None) -> Predictions:
    def fail(i: int | None, field: str, message: str) -> DataError:
        return DataError(Problem(str(path), 0, f"[{i}]{field}" if i is not None else field, message))

    if actor is None or not actor.strip():
        raise fail(None, "actor", "a MindAct predictions file names no agent: pass --actor (actor=)")
    try:
        rows: Any = orjson.loads(path.read_bytes())
    except OSError as exc:
        raise fail(None, "<file>", f"cannot read the file: {exc.strerror or exc}") from exc
    except orjson.JSONDecodeError as exc:
        raise DataError(Problem(str(path), exc.lineno, "<file>", f"not valid JSON: {exc.msg}")) from exc
    if not isinstance(rows, list) or not rows:
        raise fail(None, "<file>", "a MindAct predictions file must hold a non-empty list of rows")
    per_task: dict[str, dict[str, Prediction]] = {}
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != 3:
            raise fail(i, "", f"must be a row [id, element, action] of 3 items, got {kind(row)}")
        sample, element, action = row
        if not isinstance(sample, str) or sample.count("_") != 1 or sample.startswith("_") or sample.endswith("_"):
            raise fail(i, "[0]", f"must be '<annotation_id>_<action_uid>', got {sample!r}")
        aid, uid = sample.split("_")
        if type(element) is int:
            element = str(element)
        if not isinstance(element, str):
            raise fail(i, "[1]", f"must be the chosen backend_node_id (a string, '' for none), got {kind(element)}")
        if not isinstance(action, str):
            raise fail(i, "[2]", f"must be the action '<OP> <value>' (a string), got {kind(action)}")
        # MindAct writes op + " " + value; an op it could not parse leaves the string starting with " ".
        op, _, value = action.partition(" ")
        per_step = per_task.setdefault(aid, {})
        if uid in per_step:
            raise fail(i, "[0]", f"repeats the prediction at {per_step[uid].where}")
        per_step[uid] = Prediction(
            line=0,
            prefix=f"[{i}].",
            where=f"item [{i}]",
            element_id=element or None,
            op=op.strip().upper() or NO_ACTION,
            value=value.strip() or None,
            reasoning=None,
            actor_logprobs=None,
        )
    return {actor: per_task}
