"""PPL: the inverse perplexity of the actor on its own action (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, evidence, register_baseline
from ceb.stages.statistics import teacher_force

__all__ = ["PerplexityCritic", "inverse_perplexity"]


def inverse_perplexity(logprobs: Sequence[float]) -> float:
    """``1 / PPL = exp((1/L) sum_i log p(x_i))`` over a span of ``L`` tokens, in (0, 1].

    Args:
        logprobs: Natural-log probabilities of the span's tokens, shape ``(L,)``, ``L >= 1``.

    Raises:
        ValueError: The span is empty.
    """
    if not logprobs:
        raise ValueError("no tokens to average over")
    return min(1.0, math.exp(math.fsum(logprobs) / len(logprobs)))


class PerplexityCritic(Baseline):
    """``s = 1/PPL = exp((1/L) sum_i log p(x_i))`` over the action span (paper section 4.1, PPL).

    As LM-Polygraph's ``Perplexity``. The log-probs are ``inp.actor_logprobs`` when the stream logged them (exact
    and free), else the teacher-forced ones (:func:`~ceb.stages.statistics.teacher_force`, K =
    ``settings.prompt_logprobs``); with neither the step is not available. ``chat``: the actor's endpoint, or
    ``None``.
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        if inp.actor_logprobs:
            lps = inp.actor_logprobs
            z = inverse_perplexity(lps)
            raw = evidence(source="actor_logprobs", tokens=len(lps), mean_logprob=math.fsum(lps) / len(lps))
            return CriticResult(score=z, raw=raw)
        if self.chat is None:
            return CriticResult.not_available(
                "the step has no actor_logprobs and no actor endpoint is set for teacher forcing"
            )
        forced = await teacher_force(
            self.chat, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
        )
        if forced.span is None:
            return forced.failure()
        lps = tuple(t.logprob for t in forced.span)
        raw = evidence(
            source="teacher_forcing",
            tokens=[t.token for t in forced.span],
            logprobs=list(lps),
            mean_logprob=math.fsum(lps) / len(lps),
        )
        return CriticResult(score=inverse_perplexity(lps), raw=raw, stats=forced.stats)


METHOD = register_baseline(
    PerplexityCritic,
    "ppl",
    label="PPL",
    order=10,
    description="1 / perplexity of the action's tokens",
    needs=(),
    uses=("chat", "prompt_logprobs", "continue_final_message"),
    fallback="only steps whose stream carries actor_logprobs",
)
