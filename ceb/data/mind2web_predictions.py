"""Reading an agent's Mind2Web predictions: the keys of :mod:`ceb.data.mind2web`'s predictions format, checked.

The container rules shared with AMEX (JSONL or ``.json`` list, strict keys, actor, log-probs) are
:func:`~ceb.data.predictions.read_predictions`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ceb.data.predictions import read_predictions
from ceb.data.sources import kind, optional_str, required_str

__all__ = ["PREDICTION_KEYS", "Prediction", "load_predictions"]

PREDICTION_KEYS = ("annotation_id", "action_uid", "element_id", "op", "value", "reasoning", "actor", "actor_logprobs")
"""Every key a prediction record may hold."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """One predicted step, checked; ``line``, ``prefix`` and ``where`` place it in its file."""

    line: int
    prefix: str
    where: str
    element_id: str | None
    op: str
    value: str | None
    reasoning: str | None
    actor_logprobs: tuple[float, ...] | None


def load_predictions(path: Path, default_actor: str | None) -> dict[str, dict[str, dict[str, Prediction]]]:
    """``actor -> annotation_id -> action_uid -> prediction``, in file order.

    Args:
        path: The predictions file.
        default_actor: The actor of records without an ``actor`` key.

    Raises:
        DataError: The file breaks the predictions format, or a step is predicted twice by one actor (names
            the file, the line or item, and the field).
    """
    out: dict[str, dict[str, dict[str, Prediction]]] = {}
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
