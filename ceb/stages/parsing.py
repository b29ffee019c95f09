"""Reading the JSON objects the critic and hindsight stages ask for out of free model text.

Models wrap JSON in code fences, add prose before or after, or write numbers as strings. The readers
here find the first JSON object that has the wanted key and check its value strictly; they never guess a
scale (a critic score of 85 is not read as 0.85) and never invent a value.

The rule, for any reply, however hostile (a model may echo text injected into its prompt):

1. Candidates are the contents of each closed code fence (triple backticks), in order, then the whole reply.
2. In each candidate, every ``{`` is tried in order as the start of a JSON value (Python's ``json``, so
   ``NaN`` and ``Infinity`` decode, and are refused later as not finite); text after the value is ignored.
   A start that does not decode, nests too deep to decode, or holds an integer too long to convert is
   skipped, never an error.
3. The first decoded object that has the wanted key is used; later objects are never looked at, even when
   the used one's value is bad (a reply with two answers is not searched for one that parses).
4. Its value must be a finite number: a JSON number, or a string holding a plain decimal number
   (``"0.8"``, ``" 1 "``, ``"1e-3"``; not ``"1_0"``, ``"0x1"``, ``"inf"`` or non-ASCII digits). Booleans are
   refused, and so is a number too large for a float.

Every failure is a ``ValueError``; no reply text makes these readers raise anything else.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["find_json_object", "parse_labels", "parse_score", "score_prefix", "score_span"]

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_DECODER = json.JSONDecoder()
# `{"score": <JSON number>` and the character that ends the number; JSON's number grammar (RFC 8259, section 6).
_SCORE_FIRST = re.compile(r'\s*\{\s*"score"\s*:\s*(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)\s*[,}]')
# `"score": 0.75` or `"score": "0.75"` in a reply's text, the number not followed by more of a number.
_SCORE_KEY = re.compile(r'"score"\s*:\s*"?\s*(-?[0-9]+(?:\.[0-9]+)?)(?![0-9.eE])')
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def find_json_object(text: str, key: str) -> dict[str, Any]:
    """Return the first JSON object in ``text`` that has ``key``, looking inside code fences first.

    Raises:
        ValueError: No such object.
    """
    return _locate_json_object(text, key)[0]


def _locate_json_object(text: str, key: str) -> tuple[dict[str, Any], int, int]:
    """:func:`find_json_object`, with where the object's text starts and ends in ``text``."""
    candidates = [(m.start(1), m.group(1)) for m in _FENCE.finditer(text)] + [(0, text)]
    for offset, chunk in candidates:
        start = chunk.find("{")
        while start != -1:
            try:
                obj, stop = _DECODER.raw_decode(chunk, start)
            except (ValueError, RecursionError):
                # JSONDecodeError, an integer beyond the int-to-str digit limit, or nesting deeper than
                # Python's recursion limit: not a usable object, so try the next "{".
                obj, stop = None, start
            if isinstance(obj, dict) and key in obj:
                return obj, offset + start, offset + stop
            start = chunk.find("{", start + 1)
    raise ValueError(f'no JSON object with "{key}" in the reply')


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool):
        raise ValueError(f"{what} is a boolean, not a number")
    if isinstance(value, int | float):
        try:
            x = float(value)
        except OverflowError:
            raise ValueError(f"{what} is too large to be a number") from None
    elif isinstance(value, str):
        # float() alone would also take "1_0", "inf" or Arabic-Indic digits; only a plain decimal passes.
        text = value.strip()
        if not _DECIMAL.fullmatch(text):
            raise ValueError(f"{what} {value[:40]!r} is not a number")
        x = float(text)
    else:
        raise ValueError(f"{what} has type {type(value).__name__}, not a number")
    if not math.isfinite(x):
        raise ValueError(f"{what} is {x}, not a finite number")
    return x


def parse_score(text: str) -> float:
    """Read ``r_t`` from a critic reply ``{"score": x, ...}`` (paper section 3.3).

    The raw ``r_t``, not yet clipped to [0, 1] (Eq. 6); the rule is the module docstring's.

    Raises:
        ValueError: No object with ``score``, or its value is not a finite number.
    """
    return _number(find_json_object(text, "score")["score"], "score")


def score_span(text: str) -> tuple[int, int]:
    """Where the digits of the score :func:`parse_score` reads are written in ``text``: ``(start, end)``.

    The number literal after the first ``"score":`` key of that object whose value it is (inside the quotes of
    ``"score": "0.8"``), for the probability readout (:mod:`ceb.stages.readout`).

    Raises:
        ValueError: No readable score, or it is not written as a plain decimal (an exponent, a sign ``+``).
    """
    obj, start, stop = _locate_json_object(text, "score")
    value = _number(obj["score"], "score")
    for m in _SCORE_KEY.finditer(text, start, stop):
        if float(m.group(1)) == value:
            return m.start(1), m.end(1)
    raise ValueError("the score is not written as a plain decimal")


def score_prefix(text: str) -> float | None:
    """Read ``r_t`` from the start of a critic reply still being generated, once its value is complete.

    Reads only ``{"score": <number>`` followed by ``,`` or ``}`` (a number alone could still grow); any other
    start (prose, a fence, ``reason`` first, a string score) gives ``None``, as does an incomplete value. For a
    reply that closes its object, the value is the one :func:`parse_score` reads from the whole reply.
    """
    m = _SCORE_FIRST.match(text)
    if m is None:
        return None
    x = float(m.group(1))
    return x if math.isfinite(x) else None


def parse_labels(text: str, n_steps: int) -> tuple[int, ...]:
    """Read one 0/1 label per step from a hindsight reply ``{"labels": [...]}``.

    Shape ``(n_steps,)``; a label may be ``0``/``1``, ``0.0``/``1.0`` or ``"0"``/``"1"``, never a boolean.

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
