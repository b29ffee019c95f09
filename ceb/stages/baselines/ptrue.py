"""P(True): the probability the critic puts on "True" when asked whether the action is correct (section 4.1)."""

from __future__ import annotations

import math
import string
from collections.abc import Iterable

from ceb.backends.base import ChatBackend, ChatRequest, TokenLogprob
from ceb.config import BaselineConfig, RunConfig
from ceb.stages.assembly import Stages, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import evidence, need_chat, not_available, prompt_messages, send
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet

__all__ = ["PTrueCritic", "answer_class", "p_true"]

_EDGES = string.whitespace + string.punctuation


def answer_class(token: str) -> str | None:
    """``"true"`` or ``"false"`` when ``token`` is a variant of that word, else ``None``.

    A variant differs only in case and in white space or punctuation around the word: ``" true"``, ``"TRUE"``,
    ``"True."``, ``"**False"``. Partial words (``"Tr"``) and synonyms (``"Yes"``) are not variants.
    """
    word = token.strip(_EDGES).casefold()
    return word if word in ("true", "false") else None


def p_true(first: TokenLogprob) -> tuple[float, float, float]:
    """``P(True) = m_T / (m_T + m_F)`` for the first answer token.

    ``m_T`` (``m_F``) is the summed probability of every True (False) variant (:func:`answer_class`) among the
    token's listed alternatives (each a distinct vocabulary token), and of the token itself when it is not
    listed among them.

    Returns:
        ``(P(True), m_T, m_F)``.

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


def _shown(tokens: Iterable[str], limit: int = 8) -> str:
    tokens = list(tokens)
    more = f", ... {len(tokens) - limit} more" if len(tokens) > limit else ""
    return ", ".join(repr(t) for t in tokens[:limit]) + more


class PTrueCritic:
    """Asks the critic "is the proposed action correct? True or False" and reads ``P(True)`` off its first token.

    Source: P(True) of Kadavath et al., 2022 ("Language Models (Mostly) Know What They Know"), as adapted in
    paper section 4.1: the critic sees ``(q, s_t, h_<t, a_t)`` (``ptrue_system.j2`` / ``ptrue_user.j2``) and the
    score is the probability mass on True, renormalised against False (:func:`p_true`).

    One request per step: ``max_tokens`` 1 (``settings.ptrue_max_tokens``), temperature 0, ``logprobs=True``,
    ``top_logprobs=settings.ptrue_top_logprobs``. A reply without log-probs, or whose first token lists no
    True or False variant, is not available (:data:`~ceb.stages.base.NOT_AVAILABLE`) with the reason; it is not
    re-asked, since the same request would get the same distribution.

    Args:
        chat: The critic's endpoint (it must return ``logprobs`` with ``top_logprobs``).
        prompts: Templates.
        settings: ``ptrue_top_logprobs`` and ``ptrue_max_tokens`` are read.
    """

    def __init__(self, chat: ChatBackend, prompts: PromptSet, settings: BaselineConfig | None = None) -> None:
        self.chat = chat
        self.prompts = prompts
        self.settings = settings or BaselineConfig()

    def request(self, inp: CriticInput) -> ChatRequest:
        """The P(True) request for ``inp``."""
        return ChatRequest(
            messages=prompt_messages(self.prompts, inp, "ptrue"),
            temperature=0.0,
            max_tokens=self.settings.ptrue_max_tokens,
            logprobs=True,
            top_logprobs=self.settings.ptrue_top_logprobs,
            stage="critic",
        )

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return ``P(True)`` for ``inp.action``; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        sent = await send(self.chat, self.request(inp))
        if sent.completion is None:
            return CriticResult(score=None, raw="", error=sent.error, stats=sent.stats)
        c = sent.completion
        text = c.texts[0] if c.texts else ""
        tokens = c.logprobs[0] if c.logprobs else None
        if not tokens:
            return not_available("the endpoint returned no log-probs for the answer", raw=text, stats=sent.stats)
        try:
            z, m_t, m_f = p_true(tokens[0])
        except ValueError as exc:
            return not_available(str(exc), raw=text, stats=sent.stats)
        raw = evidence(answer=text, first_token=tokens[0].token, true_mass=m_t, false_mass=m_f)
        return CriticResult(score=z, raw=raw, stats=sent.stats)


def build(config: RunConfig, stages: Stages) -> Critic:
    """P(True) over the critic's endpoint."""
    return PTrueCritic(need_chat(stages.chat), prompt_set(config), config.baselines)


METHOD = register_method(
    MethodSpec(
        "ptrue",
        label="P(True)",
        group="baseline",
        order=14,
        description="P(True) of the critic asked whether the action is correct",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=("chat", "logprobs"),
    )
)
