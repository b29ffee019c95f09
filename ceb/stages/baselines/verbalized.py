"""Verbalization: the actor states its own confidence right after its action (paper section 4.1), on frozen steps."""

from __future__ import annotations

import math
import re

from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, evidence, register_baseline
from ceb.stages.readout import read_score
from ceb.stages.statistics import STATED_CONFIDENCE_SCHEMA, verbalized_reply

__all__ = ["STATED_CONFIDENCE_SCHEMA", "VerbalizedCritic", "parse_stated_confidence"]

_STATED = re.compile(r"[\s*_`\"']*([-+]?\d+(?:\.\d+)?)\s*(%?)")


def parse_stated_confidence(text: str) -> float:
    """Read the number the actor continued its reply with, as a probability in [0, 1].

    The number must open the continuation (after white space or markdown emphasis). Its scale, 0-100 or 0-1:

    * with ``%`` it is a percentage (``85%`` -> 0.85, ``0.5%`` -> 0.005);
    * written with a decimal point and at most 1, it is a probability (``0.85`` -> 0.85, ``1.0`` -> 1.0);
    * otherwise it is on the 0-100 scale that was asked for (``85`` -> 0.85, ``1`` -> 0.01, ``42.5`` -> 0.425).

    Raises:
        ValueError: The continuation does not open with a number, or the number is outside its scale.
    """
    number, percent = _stated(text).group(1, 2)
    x = stated_value(number, percent=bool(percent))
    if x < 0:
        raise ValueError(f"stated confidence {number} is negative")
    if x > 1.0:
        raise ValueError(f"stated confidence {number}{percent} is above 100")
    return x


def stated_value(number: str, *, percent: bool) -> float:
    """The probability a stated number means under :func:`parse_stated_confidence`'s scale rule, unchecked."""
    x = float(number)
    if not math.isfinite(x):
        raise ValueError(f"stated confidence {number} is not finite")
    if not percent and "." in number and x <= 1.0:
        return x
    return x / 100.0


def _stated(text: str) -> re.Match[str]:
    m = _STATED.match(text)
    if m is None:
        raise ValueError(f"the continuation {text[:40]!r} does not start with a number")
    return m


class VerbalizedCritic(Baseline):
    """``s`` = the confidence the actor states right after the frozen action (paper section 4.1, Verbalization).

    Source: verbalized confidence (Tian et al., 2023; Xiong et al., 2024). Adaptation to frozen streams: the
    paper's actor emits a new action and its confidence in one pass; here the actor (``chat``, which must honour
    ``continue_final_message``) continues a reply that already holds the stream's action and the cue
    ``verbalized_cue.j2`` (:func:`~ceb.stages.statistics.verbalized_reply`), so its confidence is conditioned on
    that action as if it had written it. The number is read by :func:`parse_stated_confidence`; an unreadable
    continuation scores ``None`` and is not re-asked. Under ``readout.readout = "expected"`` it is the expectation
    over the continuation's top log-probs, each candidate read on the same scale with the written ``%`` kept.
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        sent = await verbalized_reply(self.endpoint, self.prompts, inp, self.settings, self.readout)
        if sent.completion is None:
            return sent.failure()
        c = sent.completion
        text = c.texts[0] if c.texts else ""
        try:
            z = parse_stated_confidence(text)
        except ValueError as exc:
            return CriticResult(score=None, raw=text, error=f"unreadable reply: {exc}", stats=sent.stats)
        percent = bool(_stated(text).group(2))
        reading = read_score(
            z,
            self.readout,
            tokens=c.logprobs[0] if c.logprobs else None,
            text=text,
            span=lambda t: _stated(t).span(1),
            value_of=lambda number: stated_value(number, percent=percent),
        )
        raw = evidence(continuation=text, confidence=z, readout=reading.readout, mass=reading.mass, note=reading.note)
        return CriticResult(score=reading.score, raw=raw, stats=sent.stats, readout=reading.readout)


METHOD = register_baseline(
    VerbalizedCritic,
    "verbalized",
    label="Verbalization",
    order=13,
    description="the actor's own verbalised confidence after the frozen action",
    needs=("chat", "continue_final_message"),
)
