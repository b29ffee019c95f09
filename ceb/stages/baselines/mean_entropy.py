"""ME: the actor's mean token entropy over its action, turned into a confidence (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ceb.backends.base import ChatBackend, TokenLogprob
from ceb.config import BaselineConfig, RunConfig
from ceb.stages.assembly import Stages, actor_chat, prompt_set
from ceb.stages.base import CallStats, Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import evidence
from ceb.stages.baselines.teacher_forcing import teacher_force
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet

__all__ = ["MeanEntropyCritic", "top_k_entropy"]


def top_k_entropy(top: Sequence[tuple[str, float]]) -> float:
    """Entropy, in nats, of one token position's distribution truncated to its listed top ``K`` and renormalised.

    ``q(v) = p(v) / sum_u p(u)`` over the listed tokens, ``H = -sum_v q(v) log q(v)``. Truncation drops the tail
    beyond ``K``, so ``H`` is at most ``log K`` and usually below the full-vocabulary entropy.

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


@dataclass
class MeanEntropyCritic:
    """Scores a step by the actor's certainty over its action: ``s = exp(-H_mean)``, ``H_mean = (1/L) sum_i H_i``.

    Source: the ME baseline of paper section 4.1 (``s = exp(-H_mean)`` over the action span), the mean token
    entropy of token-probability uncertainty estimation (e.g. LM-Polygraph's ``MeanTokenEntropy``).

    ``H_i`` needs each position's alternatives, which the stream's ``actor_logprobs`` (the chosen tokens only)
    do not hold. So, in this order:

    1. With an actor endpoint, the action is teacher-forced
       (:func:`~ceb.stages.baselines.teacher_forcing.teacher_force`) and ``H_i`` is :func:`top_k_entropy` of the
       top ``K`` tokens at each position of the span (``K = settings.prompt_logprobs``): an entropy truncated
       to the top ``K`` and renormalised over them.
    2. Without one, if ``settings.me_surprisal`` is set and the step has ``actor_logprobs``: ``H_i`` is
       estimated by the chosen token's surprisal ``-log p(x_i)``, a one-sample estimate of the entropy (exact in
       expectation when the action was sampled at temperature 1). Then ``s = exp(mean_i log p(x_i))``, the same
       number as PPL; the result says so in ``raw``.
    3. Otherwise the step is not available (:data:`~ceb.stages.base.NOT_AVAILABLE`).

    Attributes:
        actor: The actor's endpoint, or ``None``.
        prompts: Templates of the actor prompt used for teacher forcing.
        settings: ``prompt_logprobs`` (K), ``me_surprisal`` and ``share_statistics`` are read.
    """

    actor: ChatBackend | None
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return ``exp(-H_mean)`` of ``inp.action`` under the actor; never raises for one step's failure.

        Raises:
            FatalBackendError: The actor endpoint refuses every request.
        """
        if self.actor is not None:
            forced = await teacher_force(
                self.actor, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
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


def build(config: RunConfig, stages: Stages) -> Critic:
    """ME over the actor's endpoint, or over the stream's ``actor_logprobs`` alone."""
    return MeanEntropyCritic(actor_chat(config, stages), prompt_set(config), config.baselines)


METHOD = register_method(
    MethodSpec(
        "me",
        label="ME",
        group="baseline",
        order=11,
        description="exp(-mean token entropy) over the action's tokens",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=(),
        uses=("chat", "prompt_logprobs", "continue_final_message"),
        fallback="only steps whose stream carries actor_logprobs",
    )
)
