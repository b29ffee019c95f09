"""PRO: the frozen action's softmax weight among actions sampled from the actor (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from ceb.backends.base import TokenLogprob
from ceb.stages.base import CriticInput, CriticResult
from ceb.stages.baselines._common import Baseline, evidence, register_baseline
from ceb.stages.statistics import SAMPLE_SLACK_TOKENS, sample_budget, sampled_answers, teacher_force

__all__ = ["SAMPLE_SLACK_TOKENS", "PROCritic", "action_key", "sample_budget", "softmax_weight"]


def action_key(action: str) -> str:
    """The class an action falls in when candidates are deduplicated: its text with white space collapsed.

    Case is kept: in shell commands, SQL literals and typed values it changes the action.
    """
    return " ".join(action.split())


def softmax_weight(target: float, others: Sequence[float]) -> float:
    """``exp(target) / (exp(target) + sum_j exp(others_j))``, computed stably; in (0, 1]."""
    m = max((target, *others))
    total = math.fsum(math.exp(x - m) for x in (target, *others))
    return math.exp(target - m) / total


def _sequence_logprob(tokens: Sequence[TokenLogprob]) -> float:
    return math.fsum(t.logprob for t in tokens)


class PROCritic(Baseline):
    """``s = exp(l_a) / sum_c exp(l_c)`` over the distinct classes ``c`` of candidate actions (paper section 4.1).

    Source: PRO, Nguyen, Gupta and Le, "Probabilities Are All You Need" (AAAI 2026). ``l_c`` is a sequence
    log-prob: of ``N = settings.pro_samples`` actions sampled from the actor
    (:func:`~ceb.stages.statistics.sampled_answers`; samples without log-probs are dropped), and ``l_a`` of the
    frozen action, teacher-forced (:func:`~ceb.stages.statistics.teacher_force`, shared with PPL and ME). Classes
    are :func:`action_key`: the frozen action's keeps its own ``l_a`` (samples equal to it add nothing), every
    other keeps its first sample's log-prob.

    Adaptation to frozen streams: the score is the weight of the stream's action, not of one the actor generates,
    so all methods score the same actions. When the stream's actor prompt asks for reasoning before the action,
    the samples hold that whole text and their log-probs are not comparable with the action's; the generic actor
    prompt asks for the action alone for that reason.
    """

    async def score(self, inp: CriticInput) -> CriticResult:
        """The formula above for ``inp``; a step's failure is a result, not an exception."""
        actor = self.endpoint
        sent = await sampled_answers(actor, self.prompts, inp, self.settings)
        if sent.completion is None:
            return sent.failure()
        c = sent.completion
        per_choice = c.logprobs or (None,) * len(c.texts)
        samples = [(text, _sequence_logprob(lps)) for text, lps in zip(c.texts, per_choice, strict=False) if lps]
        if not samples:
            return CriticResult.not_available(
                "the endpoint returned no log-probs for the sampled actions", stats=sent.stats
            )
        forced = await teacher_force(
            actor, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
        )
        stats = sent.stats + forced.stats
        if forced.span is None:
            return replace(forced.failure(), stats=stats)
        own = _sequence_logprob(forced.span)
        frozen = action_key(inp.action)
        classes: dict[str, float] = {}
        for text, lp in samples:
            key = action_key(text)
            if key != frozen:
                classes.setdefault(key, lp)
        z = softmax_weight(own, list(classes.values()))
        raw = evidence(
            action_logprob=own,
            samples=[{"action": text, "logprob": lp} for text, lp in samples],
            matched=sum(action_key(text) == frozen for text, _ in samples),
            distinct_others=len(classes),
        )
        return CriticResult(score=z, raw=raw, stats=stats)


METHOD = register_baseline(
    PROCritic,
    "pro",
    label="PRO",
    order=12,
    description="softmax weight of the frozen action among N sampled actor actions",
    needs=("chat", "n", "logprobs", "prompt_logprobs", "continue_final_message"),
)
