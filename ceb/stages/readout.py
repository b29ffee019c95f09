"""The probability readout of a verbal score: its expectation under the model's token probabilities.

Beyond the paper, whose critic reads its score from the reply's text (``readout = "text"``). The ``expected``
readout weights each number the model could have written at the score's digits by its probability, as G-Eval
does (Liu et al., 2023, EMNLP, section 2.3: ``score = sum_i p(s_i) * s_i``); the request only adds
``logprobs=True, top_logprobs=N`` (:func:`logprob_fields`).

The positions read are the generated tokens holding the number's characters (found by the method's own text
reader) and the token right after it. At each, every listed alternative gives a candidate number (the prefix
written so far, its own number characters, then the written digits after it or the next position's expectation);
a candidate must be a plain decimal the method's value function accepts, clipped to [0, 1] (Eq. 6), and the
position's value is the probability-weighted mean over the candidates, renormalised over them. The score is the
text score, marked ``text_fallback``, when there are no log-probs, the tokens do not spell the reply around the
number, the number has an exponent, a position has no candidate, or the readout mass (the least, over the
positions, of the unrenormalised probability on candidates) is below ``min_mass``. A re-asked reply is read from
the last reply. The rule with worked examples: docs/readout.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ceb.backends.base import TokenLogprob
from ceb.config import CriticConfig

__all__ = ["ScoreReadout", "Expected", "Reading", "expected_value", "logprob_fields", "read_score"]

ScoreReadout = Literal["text", "expected", "text_fallback"]
"""Which readout produced a step's score (:attr:`~ceb.stages.base.CriticResult.readout`): the reply's text, the
expectation over its log-probs, or the text because the expectation could not be had (see the module docstring)."""

_NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
_NUMBER_CHARS = re.compile(r"-?[0-9.]*")
_DIGITS_ON = re.compile(r"[0-9.]*")


@dataclass(frozen=True, slots=True)
class Expected:
    """An expectation in [0, 1] read from log-probs (:func:`expected_value`), over ``positions`` token positions.

    ``mass`` is the readout mass: the least, over the positions, of the probability on candidates, in [0, 1].
    """

    value: float
    mass: float
    positions: int


@dataclass(frozen=True, slots=True)
class Reading:
    """A verbal score in [0, 1] as the configured readout gives it (:func:`read_score`).

    ``note`` says why the expectation was not used (``text_fallback``); ``mass`` is its mass when computed.
    """

    score: float
    readout: ScoreReadout
    note: str | None = None
    mass: float | None = None


def logprob_fields(settings: CriticConfig) -> dict[str, Any]:
    """The request fields a verbal method adds: ``logprobs``, ``top_logprobs`` for ``expected``, none for ``text``."""
    if settings.readout == "expected":
        return {"logprobs": True, "top_logprobs": settings.top_logprobs}
    return {}


def _offsets(tokens: Sequence[TokenLogprob], text: str, start: int, end: int) -> tuple[list[int], int]:
    """Each token's first character in ``text`` (laid from its start, else from its end), and the one at ``start``."""
    lengths = [len(t.token) for t in tokens]
    joined = "".join(t.token for t in tokens)
    forward = [0]
    for n in lengths[:-1]:
        forward.append(forward[-1] + n)
    backward = [len(text) - sum(lengths[k:]) for k in range(len(tokens))]
    for offsets in (forward, backward):
        first = next((k for k, o in enumerate(offsets) if o <= start < o + lengths[k]), None)
        if first is None:
            continue
        span = "".join(t.token for t in tokens[first:])
        tail = text[offsets[first] :]
        # From the number's first token through the character after it, the texts must agree.
        need = min(end + 1, len(text)) - offsets[first]
        if span[:need] == tail[:need]:
            return offsets, first
    if joined == text:
        raise ValueError("no token holds the number's first character")
    raise ValueError("the token texts do not spell the reply around the number")


def expected_value(
    tokens: Sequence[TokenLogprob], text: str, span: tuple[int, int], value_of: Callable[[str], float]
) -> Expected:
    """The expectation of a number written in a reply, over the top log-probs at the positions that decide it.

    The positions and the candidates are those of the module docstring; ``span`` is the number's ``(start, end)``
    in ``text``, and ``value_of`` the method's value of a candidate's text (``"85"``) before clipping, raising
    ``ValueError`` for a number it does not take.

    Raises:
        ValueError: The number is not a plain decimal, the tokens do not spell the reply there, or a position
            lists no candidate that reads.
    """
    start, end = span
    written = text[start:end]
    if not _NUMBER.fullmatch(written):
        raise ValueError(f"the number {written[:40]!r} is not a plain decimal")
    if not tokens:
        raise ValueError("the reply has no token log-probs")
    offsets, first = _offsets(tokens, text, start, end)
    last = first
    while last + 1 < len(tokens) and offsets[last + 1] <= end and offsets[last + 1] < len(text):
        last += 1

    def value(candidate: str) -> float | None:
        if not _NUMBER.fullmatch(candidate):
            return None
        try:
            x = value_of(candidate)
        except ValueError:
            return None
        return min(1.0, max(0.0, x)) if math.isfinite(x) else None

    later: float | None = None
    masses: list[float] = []
    for k in range(last, first - 1, -1):
        tok = tokens[k]
        begin = offsets[k]
        stop = begin + len(tok.token)
        lead = text[begin:start] if k == first else ""
        before = text[start:begin] if k > first else ""
        after = text[stop:end] if stop < end else ""
        alternatives = list(tok.top)
        if all(alt != tok.token for alt, _ in alternatives):
            alternatives.append((tok.token, tok.logprob))
        weighted = mass = 0.0
        for alt, lp in alternatives:
            if not alt.startswith(lead):
                continue
            rest = alt[len(lead) :]
            chars = (_NUMBER_CHARS if not before else _DIGITS_ON).match(rest)
            part = chars.group() if chars else ""
            if k == first and not part:
                continue  # the number has not started: what the model writes next is unknown
            if alt == tok.token and k < last:
                v = later
            elif part == rest and alt != tok.token:
                v = value(before + part + after)
            else:
                v = value(before + part)
            if v is None:
                continue
            p = math.exp(lp)
            weighted += p * v
            mass += p
        if mass == 0.0:
            where = "its first token" if k == first else f"token {k - first} of it"
            raise ValueError(f"no alternative at {where} ({tok.token!r}) reads as a number")
        later = weighted / mass
        masses.append(mass)
    assert later is not None  # the loop ran at least once: first <= last
    return Expected(value=later, mass=min(masses), positions=last - first + 1)


def read_score(
    text_score: float,
    settings: CriticConfig,
    *,
    tokens: Sequence[TokenLogprob] | None,
    text: str,
    span: Callable[[str], tuple[int, int]],
    value_of: Callable[[str], float],
) -> Reading:
    """The score of a verbal method under ``settings.readout`` (``text_score`` already in [0, 1]).

    The expectation under ``expected`` when it has ``readout_min_mass``; else the text score, marked
    ``text_fallback`` with the reason. ``span`` finds the number in ``text`` (raising ``ValueError`` when it
    cannot); ``value_of`` is :func:`expected_value`'s.
    """
    if settings.readout == "text":
        return Reading(text_score, "text")
    if not tokens:
        return Reading(text_score, "text_fallback", "the endpoint returned no log-probs for the reply")
    try:
        got = expected_value(tokens, text, span(text), value_of)
    except ValueError as exc:
        return Reading(text_score, "text_fallback", str(exc))
    if got.mass < settings.readout_min_mass:
        note = f"readout mass {got.mass:.3f} is below readout_min_mass {settings.readout_min_mass}"
        return Reading(text_score, "text_fallback", note, got.mass)
    return Reading(got.value, "expected", None, got.mass)
