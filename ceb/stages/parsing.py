"""Reading the JSON objects the critic and hindsight stages ask for out of free model text.

Models wrap JSON in code fences, add prose before or after, or write numbers as strings. The readers
here find the first JSON object that has the wanted key and check its value strictly; they never guess a
scale (a critic score of 85 is not read as 0.85) and never invent a value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["find_json_object", "parse_labels", "parse_score"]

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()


def find_json_object(text: str, key: str) -> dict[str, Any]:
    """Return the first JSON object in ``text`` that has ``key``, looking inside code fences first.

    Raises:
        ValueError: No such object.
    """
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for chunk in candidates:
        start = chunk.find("{")
        while start != -1:
            try:
                obj, _ = _DECODER.raw_decode(chunk, start)
            except json.JSONDecodeError:
                obj = None
            if isinstance(obj, dict) and key in obj:
                return obj
            start = chunk.find("{", start + 1)
    raise ValueError(f'no JSON object with "{key}" in the reply')


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} is a boolean, not a number")
    if isinstance(value, int | float):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a number") from None
    else:
        raise ValueError(f"{what} has type {type(value).__name__}, not a number")
    if not math.isfinite(x):
        raise ValueError(f"{what} is {x}, not a finite number")
    return x


def parse_score(text: str) -> float:
    """Read ``r_t`` from a critic reply ``{"score": x, ...}`` (paper section 3.3).

    Accepts code fences, text around the object, and a number written as a string (``"0.8"``).

    Returns:
        The raw value ``r_t`` (not yet clipped to [0, 1]; see Eq. 6).

    Raises:
        ValueError: No object with ``score``, or its value is not a finite number.
    """
    return _number(find_json_object(text, "score")["score"], "score")


def parse_labels(text: str, n_steps: int) -> tuple[int, ...]:
    """Read one 0/1 label per step from a hindsight reply ``{"labels": [...]}``.

    Each label may be written ``0``/``1``, ``0.0``/``1.0`` or ``"0"``/``"1"``; booleans are refused.

    Returns:
        Labels, shape ``(n_steps,)``.

    Raises:
        ValueError: No object with ``labels``, a label that is not 0 or 1, or the wrong count.
    """
    labels = find_json_object(text, "labels")["labels"]
    if not isinstance(labels, list):
        raise ValueError(f"labels is a {type(labels).__name__}, not a list")
    out = []
    for i, v in enumerate(labels):
        x = _number(v, f"labels[{i}]")
        if x not in (0.0, 1.0):
            raise ValueError(f"labels[{i}] = {v!r} is not 0 or 1")
        out.append(int(x))
    if len(out) != n_steps:
        raise ValueError(f"expected {n_steps} labels, got {len(out)}")
    return tuple(out)
