"""An agent's AMEX predictions (format: :mod:`ceb.data.amex`); container rules are :mod:`ceb.data.predictions`'."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ceb.data.amex_screen import TAP, read_point
from ceb.data.predictions import read_predictions
from ceb.data.sources import kind, optional_str, required_str

__all__ = ["PREDICTION_KEYS", "Prediction", "load_predictions"]

PREDICTION_KEYS = (
    "episode_id",
    "step_id",
    "action",
    "touch_coord",
    "lift_coord",
    "type_text",
    "reasoning",
    "actor",
    "actor_logprobs",
)


@dataclass(frozen=True, slots=True)
class Prediction:
    """One predicted step, checked; points still in the ``coords`` frame; ``line``, ``prefix``, ``where`` place it."""

    line: int
    prefix: str
    where: str
    action: str
    touch: tuple[float, float] | None
    lift: tuple[float, float] | None
    type_text: str | None
    reasoning: str | None
    actor_logprobs: tuple[float, ...] | None


def load_predictions(path: Path, default_actor: str | None) -> dict[str, dict[str, dict[int, Prediction]]]:
    """``actor -> episode_id -> step_id -> prediction``, in file order.

    Raises:
        DataError: The file breaks the format, a ``TAP`` has no touch point, or one actor predicts a step twice
            (names file, line or item, field).
    """
    out: dict[str, dict[str, dict[int, Prediction]]] = {}
    for p in read_predictions(path, PREDICTION_KEYS, default_actor):
        record, obj, fail, name, logprobs = p.record, p.obj, p.fail, p.actor, p.logprobs
        eid = required_str(obj, "episode_id", fail)
        step_id = obj.get("step_id")
        if type(step_id) is not int:
            raise fail("step_id", f"missing or not an integer, got {kind(step_id)}")
        action = required_str(obj, "action", fail).strip().upper()
        touch = read_point(obj.get("touch_coord"), "touch_coord", fail)
        if action == TAP and touch is None:
            raise fail("touch_coord", "missing: a TAP prediction needs its [x, y] touch point")
        lift = read_point(obj.get("lift_coord"), "lift_coord", fail)
        type_text = optional_str(obj, "type_text", fail)
        reasoning = optional_str(obj, "reasoning", fail)
        per_step = out.setdefault(name, {}).setdefault(eid, {})
        if step_id in per_step:
            raise fail("step_id", f"repeats the prediction at {per_step[step_id].where} (actor {name!r})")
        per_step[step_id] = Prediction(
            record.line, record.prefix, record.where, action, touch, lift, type_text, reasoning, logprobs
        )
    return out
