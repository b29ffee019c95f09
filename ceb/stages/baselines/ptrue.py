"""P(True): the probability the critic puts on "True" when asked whether the action is correct (section 4.1)."""

from __future__ import annotations

import math
import string
from collections.abc import Iterable

from ceb.backends.base import TokenLogprob
from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, evidence, register_baseline
from ceb.stages.statistics import PTRUE_ANSWERS, forced_span, ptrue_first_token, ptrue_pair

__all__ = ["ANSWERS", "PTrueCritic", "answer_class", "forced_p_true", "p_true"]

ANSWERS = PTRUE_ANSWERS

_EDGES = string.whitespace + string.punctuation


def answer_class(token: str) -> str | None:
    """``"true"`` or ``"false"`` when ``token`` is a variant of that word, else ``None``.

    A variant differs only in case and in white space or punctuation around the word: ``" true"``, ``"TRUE"``,
    ``"True."``, ``"**False"``. Partial words (``"Tr"``) and synonyms (``"Yes"``) are not variants.
    """
    word = token.strip(_EDGES).casefold()
    return word if word in ("true", "false") else None


def p_true(first: TokenLogprob) -> tuple[float, float, float]:
    """``(P(True), m_T, m_F)``, ``P(True) = m_T / (m_T + m_F)`` for the first answer token.

    ``m_T`` (``m_F``) is the summed probability of every True (False) variant (:func:`answer_class`) among the
    token's listed alternatives, and of the token itself when it is not listed among them.

    Raises:
        ValueError: Neither a True nor a False variant is listed.
    """
    candidates = list(first.top)
    if all(token != first.token for token, _ in candidates):
        candidates.append((first.token, first.logprob))
    mass = {"true": 0.0, "false": 0.0}
    for token, lp in candidates:
        cls = answer_class(token)
        if cls is not None:
            mass[cls] += math.exp(lp)
    m_t, m_f = mass["true"], mass["false"]
    if m_t + m_f == 0.0:
        listed = _shown(token for token, _ in candidates)
        raise ValueError(f"no True or False token among the first answer token's alternatives ({listed})")
    return m_t / (m_t + m_f), m_t, m_f


def forced_p_true(logprob_true: float, logprob_false: float) -> float:
    """``P(True) = p_T / (p_T + p_F)`` from the natural-log probabilities of the two whole answers, in [0, 1].

    Computed as a logistic of the difference, so two very unlikely answers do not underflow to 0 / 0.
    """
    diff = logprob_false - logprob_true
    return 0.0 if diff > 700 else 1.0 / (1.0 + math.exp(diff))


def _shown(tokens: Iterable[str], limit: int = 8) -> str:
    tokens = list(tokens)
    more = f", ... {len(tokens) - limit} more" if len(tokens) > limit else ""
    return ", ".join(repr(t) for t in tokens[:limit]) + more


class PTrueCritic(Baseline):
    """``P(True)``, renormalised against False, of the critic asked whether ``a_t`` is correct (paper section 4.1).

    Source: Kadavath et al., 2022 ("Language Models (Mostly) Know What They Know"); the critic sees
    ``(q, s_t, h_<t, a_t)`` (``ptrue_system.j2`` / ``ptrue_user.j2``). ``chat``: the critic's endpoint.

    Teacher-forced (``settings.ptrue_forced``, the default): ``P(True) = p_T / (p_T + p_F)`` (:func:`forced_p_true`)
    from the whole answers' log-probs (:func:`~ceb.stages.statistics.ptrue_pair`), however tokenized and wherever
    they rank; needs a vLLM-style server, elsewhere the step is not available. First token
    (``ptrue_forced = false``, for servers with ``logprobs`` but not ``prompt_logprobs``): the True/False mass among
    the first token's ``ptrue_top_logprobs`` alternatives (:func:`p_true`,
    :func:`~ceb.stages.statistics.ptrue_first_token`); a first token listing neither answer is not available. No
    reply is re-asked: the same request would get the same distribution.
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        if self.settings.ptrue_forced:
            return await self._forced(inp)
        return await self._first_token(inp)

    async def _forced(self, inp: CriticInput) -> CriticResult:
        results = await ptrue_pair(self.endpoint, self.prompts, inp, self.settings)
        stats = results[0].stats + results[1].stats
        logprobs: list[float] = []
        for answer, result in zip(ANSWERS, results, strict=True):
            forced = forced_span(result, answer, label=f"{answer}: ")
            if forced.span is None:
                return forced.failure(stats)
            logprobs.append(sum(t.logprob for t in forced.span))
        z = forced_p_true(logprobs[0], logprobs[1])
        raw = evidence(method="forced", logprob_true=logprobs[0], logprob_false=logprobs[1])
        return CriticResult(score=z, raw=raw, stats=stats)

    async def _first_token(self, inp: CriticInput) -> CriticResult:
        sent = await ptrue_first_token(self.endpoint, self.prompts, inp, self.settings)
        if sent.completion is None:
            return sent.failure()
        c = sent.completion
        text = c.texts[0] if c.texts else ""
        tokens = c.logprobs[0] if c.logprobs else None
        if not tokens:
            return CriticResult.not_available(
                "the endpoint returned no log-probs for the answer", raw=text, stats=sent.stats
            )
        try:
            z, m_t, m_f = p_true(tokens[0])
        except ValueError as exc:
            return CriticResult.not_available(str(exc), raw=text, stats=sent.stats)
        raw = evidence(method="first_token", answer=text, first_token=tokens[0].token, true_mass=m_t, false_mass=m_f)
        return CriticResult(score=z, raw=raw, stats=sent.stats)


METHOD = register_baseline(
    PTrueCritic,
    "ptrue",
    label="P(True)",
    order=14,
    description="P(True) of the critic asked whether the action is correct",
    endpoint="critic",
    uses=("prompt_logprobs", "continue_final_message", "logprobs"),
    fallback="forced (default) needs prompt_logprobs and continue_final_message; with ptrue_forced = false, "
    "logprobs, and answers outside the top-k are not available",
)
