"""ME: the actor's mean token entropy over its action, turned into a confidence (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ceb.backends.base import TokenLogprob
from ceb.stages.base import CallStats, CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, evidence, register_baseline
from ceb.stages.statistics import teacher_force

__all__ = ["MeanEntropyCritic", "top_k_entropy"]


def top_k_entropy(top: Sequence[tuple[str, float]]) -> float:
    """Entropy, in nats, of one token position's distribution truncated to its listed top ``K`` and renormalised.

    ``q(v) = p(v) / sum_u p(u)`` over the listed tokens, ``H = -sum_v q(v) log q(v)``; at most ``log K``, usually
    below the full-vocabulary entropy.

    Args:
        top: ``(token, logprob)`` pairs of the position, shape ``(K,)``, ``K >= 1``.

    Raises:
        ValueError: No alternatives are listed.
    """
    if not top:
        raise ValueError("no top alternatives listed for a token")
    m = max(lp for _, lp in top)
    weights = [math.exp(lp - m) for _, lp in top]
    total = math.fsum(weights)
    return -math.fsum(w / total * math.log(w / total) for w in weights if w > 0)


class MeanEntropyCritic(Baseline):
    """``s = exp(-H_mean)``, ``H_mean = (1/L) sum_i H_i`` over the action span (paper section 4.1, ME).

    As LM-Polygraph's ``MeanTokenEntropy``. ``H_i`` needs each position's alternatives, which the stream's
    ``actor_logprobs`` (chosen tokens only) do not hold, so:

    1. with an actor endpoint (``chat``), ``H_i`` is :func:`top_k_entropy` of the teacher-forced top ``K``
       (:func:`~ceb.stages.statistics.teacher_force`, ``K = settings.prompt_logprobs``);
    2. without one, with ``settings.me_surprisal`` and ``actor_logprobs``: ``H_i`` is the chosen token's surprisal
       ``-log p(x_i)``, a one-sample estimate (exact in expectation at temperature 1); then ``s`` equals PPL's,
       and ``raw`` says so;
    3. otherwise the step is not available.
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        if self.chat is not None:
            forced = await teacher_force(
                self.chat, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
            )
            if forced.span is None:
                return forced.failure()
            return self._from_span(forced.span, forced.stats)
        if inp.actor_logprobs and self.settings.me_surprisal:
            lps = inp.actor_logprobs
            h = -math.fsum(lps) / len(lps)
            raw = evidence(source="actor_logprobs (surprisal estimate of entropy)", tokens=len(lps), mean_entropy=h)
            return CriticResult(score=min(1.0, math.exp(-h)), raw=raw)
        if inp.actor_logprobs:
            return CriticResult.not_available(
                "actor_logprobs hold only the chosen tokens, not the alternatives an entropy needs, and no actor "
                "endpoint is set for teacher forcing (set me_surprisal to use the one-sample surprisal estimate)"
            )
        return CriticResult.not_available(
            "the step has no actor_logprobs and no actor endpoint is set for teacher forcing"
        )

    def _from_span(self, span: tuple[TokenLogprob, ...], stats: CallStats) -> CriticResult:
        missing = [t.token for t in span if not t.top]
        if missing:
            reason = f"the endpoint listed no top alternatives for the action's tokens {missing!r}"
            return CriticResult.not_available(reason, stats=stats)
        entropies = [top_k_entropy(t.top) for t in span]
        h = math.fsum(entropies) / len(entropies)
        raw = evidence(
            source=f"teacher_forcing (entropy truncated to the top {self.settings.prompt_logprobs})",
            tokens=[t.token for t in span],
            entropies=entropies,
            mean_entropy=h,
        )
        return CriticResult(score=min(1.0, math.exp(-h)), raw=raw, stats=stats)


METHOD = register_baseline(
    MeanEntropyCritic,
    "me",
    label="ME",
    order=11,
    description="exp(-mean token entropy) over the action's tokens",
    needs=(),
    uses=("chat", "prompt_logprobs", "continue_final_message"),
    fallback="only steps whose stream carries actor_logprobs",
)
