"""CoT (inductive): reasoning, then a stated confidence from 0 to 100 (paper section 4.1)."""

from __future__ import annotations

import math
import re

from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, register_baseline
from ceb.stages.readout import read_score
from ceb.stages.statistics import (
    COT_REASONING_MAX_CHARS,
    COT_REASONING_STEPS,
    COT_SCHEMA,
    COT_STEP_MAX_CHARS,
    cot_reply,
)

__all__ = [
    "COT_REASONING_MAX_CHARS",
    "COT_REASONING_STEPS",
    "COT_SCHEMA",
    "COT_STEP_MAX_CHARS",
    "CoTCritic",
    "confidence_span",
    "parse_confidence_line",
]

# "Confidence: 73", "**Confidence:** 73%", "Final confidence (0-100) = 73", and the JSON form
# {"confidence": 73} a re-ask may get: the word, up to 20 other characters on the same line, ":" or "=",
# then the number. A sign is matched so that a negative number is refused rather than read without it.
_CONFIDENCE = re.compile(r"confidence[^\n:=]{0,20}?[:=][\s*_`\"']*([-+]?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_confidence_line(text: str) -> float:
    """Read the stated confidence, in percent in [0, 100], from the last ``Confidence: <0-100>`` in ``text``.

    The last counts, as the reasoning before it may mention confidence too. The number is read on the 0-100 scale
    asked for, whatever its form (``0.7`` is 0.7 %, not 70 %): no scale is guessed.

    Raises:
        ValueError: No such line, or its number is outside [0, 100].
    """
    start, end = confidence_span(text)
    x = float(text[start:end])
    if not (math.isfinite(x) and 0.0 <= x <= 100.0):
        raise ValueError(f"confidence {text[start:end]} is outside 0-100")
    return x


def confidence_span(text: str) -> tuple[int, int]:
    """Where the number :func:`parse_confidence_line` reads is written in ``text``: ``(start, end)``.

    Raises:
        ValueError: No confidence line.
    """
    found = list(_CONFIDENCE.finditer(text))
    if not found:
        raise ValueError('no final line "Confidence: <0-100>" (or {"confidence": <0-100>}) in the reply')
    return found[-1].span(1)


class CoTCritic(Baseline):
    """``s = c / 100``, ``c`` the confidence stated after a zero-shot chain of thought (paper section 4.1, CoT).

    Source: the "inductive" CoT prompting of Yu et al., 2025; the critic (``chat``) sees ``(q, s_t, h_<t, a_t)``
    (``cot_system.j2`` / ``cot_user.j2``). The reply (:func:`~ceb.stages.statistics.cot_reply`) carries
    :data:`COT_SCHEMA` where the backend's ``structured_output`` mode allows; elsewhere the prompt asks for a final
    ``Confidence: c`` line. A reply without a readable confidence (:func:`parse_confidence_line`) is re-asked up to
    ``readout.format_retries`` times, then scored ``None`` with the reason in ``error``. Under ``readout.readout =
    "expected"`` ``c`` is the expectation over the top log-probs at its digits (:mod:`ceb.stages.readout`).
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        ans = await cot_reply(self.endpoint, self.prompts, inp, self.settings, self.readout, parse_confidence_line)
        if ans.value is None:
            return CriticResult(score=None, raw=ans.raw, error=ans.error, stats=ans.stats)
        reading = read_score(
            ans.value / 100.0,
            self.readout,
            tokens=ans.tokens,
            text=ans.raw,
            span=confidence_span,
            value_of=lambda number: float(number) / 100.0,
        )
        return CriticResult(score=reading.score, raw=ans.raw, stats=ans.stats, readout=reading.readout)


METHOD = register_baseline(
    CoTCritic,
    "cot",
    label="CoT",
    order=15,
    description="chain of thought, then a verbalised confidence in [0, 100]",
    endpoint="critic",
    uses=("structured_output", "schema_bounds"),
    fallback="the last 'Confidence: c' line of a free-text reply is read",
)
