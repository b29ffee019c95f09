"""PRO: the frozen action's softmax weight among actions sampled from the actor (paper section 4.1)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ceb.backends.base import ChatBackend, ChatRequest, TokenLogprob
from ceb.config import BaselineConfig, RunConfig
from ceb.stages.asking import ask
from ceb.stages.assembly import Stages, actor_chat, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import actor_messages, evidence, need_chat
from ceb.stages.baselines.teacher_forcing import teacher_force
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet

__all__ = ["SAMPLE_SLACK_TOKENS", "PROCritic", "action_key", "sample_budget", "softmax_weight"]

SAMPLE_SLACK_TOKENS = 16
"""Tokens a sample may write beyond the frozen action's length in characters (white space, an end marker)."""


def sample_budget(action: str, cap: int) -> int:
    """Output budget of each PRO sample, in tokens: ``min(cap, len(action) + SAMPLE_SLACK_TOKENS)``.

    A sample only has to be long enough to show whether it is the frozen action: a byte-level BPE token holds at
    least one character of ASCII text, so ``len(action)`` tokens can reproduce the action, and a sample still
    going after that is another class whatever it writes next. Bounding it there keeps a small actor that
    rambles from filling ``cap`` tokens ``N`` times per step. A cut sample's log-prob covers the part it wrote.
    """
    return max(1, min(cap, len(action) + SAMPLE_SLACK_TOKENS))


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


@dataclass
class PROCritic:
    """``s`` = the frozen action's softmax weight over the sequence log-probs of distinct candidate actions.

    Source: PRO, Nguyen, Gupta and Le, "Probabilities Are All You Need: A Probability-Only Approach to
    Uncertainty Estimation in Large Language Models" (AAAI 2026), as used in paper section 4.1: sample ``N``
    completions and take a softmax over their sequence log-probabilities.

    Per step:

    1. Sample ``N = settings.pro_samples`` actions from the actor under its prompt (:func:`actor_messages`):
       one request with ``n=N``, temperature ``settings.pro_temperature`` (1), ``logprobs=True``. A sample's
       sequence log-prob is the sum of the log-probs of every token the server reports for it; samples without
       log-probs are dropped.
    2. Score the frozen action by teacher forcing
       (:func:`~ceb.stages.baselines.teacher_forcing.teacher_force`, as for PPL, and the same request, shared with
       PPL and ME when they run too): the sum over its span.
    3. Deduplicate by :func:`action_key`: the frozen action's class keeps the frozen action's own log-prob
       (samples equal to it add nothing), and each other class keeps its first sample's log-prob.
    4. ``s = exp(l_a) / sum_c exp(l_c)`` over the distinct classes ``c`` (:func:`softmax_weight`).

    Adaptation to frozen streams: in the paper PRO is scored on the action the actor generates; here the score
    is the weight of the stream's frozen action among the samples, so all methods score the same actions.
    When the stream carries the actor's own prompt and the actor answers in a richer format (reasoning before
    the action), the samples hold that whole text, and their log-probs are not comparable with the action's;
    the generic actor prompt asks for the action alone for that reason.

    Attributes:
        actor: The actor's endpoint (it must return ``logprobs`` for ``n`` samples and honour vLLM's
            ``prompt_logprobs`` and ``continue_final_message``).
        prompts: Templates of the actor prompt.
        settings: ``pro_samples``, ``pro_temperature``, ``pro_max_tokens`` (each sample's budget, further cut to
            the frozen action's length by :func:`sample_budget`), ``prompt_logprobs`` and ``share_statistics`` are read.
    """

    actor: ChatBackend
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)

    def sample_request(self, inp: CriticInput) -> ChatRequest:
        """The request that samples ``N`` actions with their log-probs for ``inp``."""
        return ChatRequest(
            messages=actor_messages(self.prompts, inp),
            temperature=self.settings.pro_temperature,
            max_tokens=sample_budget(inp.action, self.settings.pro_max_tokens),
            n=self.settings.pro_samples,
            logprobs=True,
            stage="critic",
        )

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return the frozen action's softmax weight; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        sent = await ask(self.actor, self.sample_request(inp), str)
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
            self.actor, self.prompts, inp, self.settings.prompt_logprobs, self.settings.share_statistics
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


def build(config: RunConfig, stages: Stages) -> Critic:
    """PRO over the actor's endpoint."""
    return PROCritic(need_chat(actor_chat(config, stages)), prompt_set(config), config.baselines)


METHOD = register_method(
    MethodSpec(
        "pro",
        label="PRO",
        group="baseline",
        order=12,
        description="softmax weight of the frozen action among N sampled actor actions",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=("chat", "n", "logprobs", "prompt_logprobs", "continue_final_message"),
    )
)
