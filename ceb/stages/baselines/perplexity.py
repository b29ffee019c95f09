"""PPL: the inverse perplexity of the actor on its own action (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from ceb.backends.base import ChatBackend
from ceb.config import BaselineConfig, RunConfig
from ceb.stages.assembly import Stages, actor_chat, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import evidence
from ceb.stages.baselines.teacher_forcing import teacher_force
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet

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


@dataclass
class PerplexityCritic:
    """Scores a step by how expected its action was to the actor: ``s = 1/PPL = exp(mean_i log p(x_i))``.

    Source: the PPL baseline of paper section 4.1 ("aggregate the agent's token uncertainty over the action
    span"), the sequence-level perplexity of token-probability uncertainty estimation (e.g. LM-Polygraph's
    ``Perplexity``).

    The log-probs are the actor's own, in this order of preference:

    1. ``inp.actor_logprobs``, logged by the stream when the actor generated the action (exact and free);
    2. teacher forcing through the actor endpoint
       (:func:`~ceb.stages.baselines.teacher_forcing.teacher_force`), which needs vLLM's ``prompt_logprobs``,
       ``continue_final_message`` and ``add_generation_prompt``.

    With neither, the step is not available (:data:`~ceb.stages.base.NOT_AVAILABLE`); no score is made up.

    Attributes:
        actor: The actor's endpoint, or ``None`` to use logged log-probs only.
        prompts: Templates of the actor prompt used for teacher forcing.
        settings: ``prompt_logprobs`` (K) and ``share_statistics`` are read.
    """

    actor: ChatBackend | None
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return ``1/PPL`` of ``inp.action`` under the actor; never raises for one step's failure.

        Raises:
            FatalBackendError: The actor endpoint refuses every request.
        """
        if inp.actor_logprobs:
            lps = inp.actor_logprobs
            z = inverse_perplexity(lps)
            raw = evidence(source="actor_logprobs", tokens=len(lps), mean_logprob=math.fsum(lps) / len(lps))
            return CriticResult(score=z, raw=raw)
        if self.actor is None:
            return CriticResult.not_available(
                "the step has no actor_logprobs and no actor endpoint is set for teacher forcing"
            )
        forced = await teacher_force(
            self.actor, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
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


def build(config: RunConfig, stages: Stages) -> Critic:
    """PPL over the actor's endpoint, or over the stream's ``actor_logprobs`` alone."""
    return PerplexityCritic(actor_chat(config, stages), prompt_set(config), config.baselines)


METHOD = register_method(
    MethodSpec(
        "ppl",
        label="PPL",
        group="baseline",
        order=10,
        description="1 / perplexity of the action's tokens",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=(),
        uses=("chat", "prompt_logprobs", "continue_final_message"),
        fallback="only steps whose stream carries actor_logprobs",
    )
)
