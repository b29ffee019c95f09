"""P(True): the probability the critic puts on "True" when asked whether the action is correct (section 4.1)."""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from dataclasses import dataclass, field

import anyio

from ceb.backends.base import ChatBackend, ChatRequest, TokenLogprob
from ceb.config import BaselineConfig, RunConfig
from ceb.stages.asking import Answer, ask
from ceb.stages.assembly import Stages, prompt_set
from ceb.stages.base import NOT_AVAILABLE, Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import continuation_extra, evidence, need_chat, prompt_messages
from ceb.stages.baselines.teacher_forcing import action_span
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.templates import PromptSet

__all__ = ["ANSWERS", "PTrueCritic", "answer_class", "forced_p_true", "p_true"]

ANSWERS = ("True", "False")
"""The two answers whose teacher-forced log-probabilities P(True) compares."""

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


def forced_p_true(logprob_true: float, logprob_false: float) -> float:
    """``P(True) = p_T / (p_T + p_F)`` from the log-probabilities of the two whole answers.

    Args:
        logprob_true: ``log p("True" | prompt)``, summed over the answer's tokens (natural log).
        logprob_false: ``log p("False" | prompt)``, likewise.

    Returns:
        The normalised probability of True, in [0, 1]; computed as a logistic of the difference, so two very
        unlikely answers do not underflow to 0 / 0.
    """
    diff = logprob_false - logprob_true
    return 0.0 if diff > 700 else 1.0 / (1.0 + math.exp(diff))


def _shown(tokens: Iterable[str], limit: int = 8) -> str:
    tokens = list(tokens)
    more = f", ... {len(tokens) - limit} more" if len(tokens) > limit else ""
    return ", ".join(repr(t) for t in tokens[:limit]) + more


@dataclass
class PTrueCritic:
    """Asks the critic "is the proposed action correct? True or False" and compares the answers' probabilities.

    Source: P(True) of Kadavath et al., 2022 ("Language Models (Mostly) Know What They Know"), as adapted in
    paper section 4.1: the critic sees ``(q, s_t, h_<t, a_t)`` (``ptrue_system.j2`` / ``ptrue_user.j2``) and the
    score is the probability it puts on True, renormalised against False.

    Teacher-forced (``settings.ptrue_forced``, the default): two requests, the question followed by the open
    answer "True" and by "False" (``continue_final_message`` with ``prompt_logprobs``, as teacher forcing for
    PPL does), give each answer's whole log-probability, however it is tokenized and wherever it ranks, and
    ``P(True) = p_T / (p_T + p_F)`` (:func:`forced_p_true`). So the score never depends on the answer tokens
    being among the top alternatives. This needs a vLLM-style server; elsewhere the step is not available.

    First token (``ptrue_forced=False``): one request, ``max_tokens`` 1 (``settings.ptrue_max_tokens``),
    ``logprobs=True``, ``top_logprobs=settings.ptrue_top_logprobs``, and the True/False mass among the first
    token's alternatives (:func:`p_true`); for servers that have ``logprobs`` but not ``prompt_logprobs``
    (OpenAI). A first token that lists neither answer is not available.

    No reply is re-asked: the same request would get the same distribution.

    Attributes:
        chat: The critic's endpoint.
        prompts: Templates.
        settings: ``ptrue_forced``, ``ptrue_top_logprobs`` and ``ptrue_max_tokens`` are read.
    """

    chat: ChatBackend
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)

    def request(self, inp: CriticInput) -> ChatRequest:
        """The first-token P(True) request for ``inp`` (``ptrue_forced=False``)."""
        return ChatRequest(
            messages=prompt_messages(self.prompts, inp, "ptrue"),
            temperature=0.0,
            max_tokens=self.settings.ptrue_max_tokens,
            logprobs=True,
            top_logprobs=self.settings.ptrue_top_logprobs,
            stage="critic",
        )

    def forced_requests(self, inp: CriticInput) -> tuple[ChatRequest, ChatRequest]:
        """The teacher-forcing requests for ``inp``: the question answered "True", and answered "False".

        Each ends with the answer as the open assistant message; ``prompt_logprobs=1`` returns every prompt
        token's own log-prob, and the one generated token is not read.
        """
        messages = prompt_messages(self.prompts, inp, "ptrue")
        true, false = (
            ChatRequest(
                messages=(*messages, {"role": "assistant", "content": answer}),
                temperature=0.0,
                max_tokens=1,
                extra={"prompt_logprobs": 1, **continuation_extra()},
                stage="critic",
            )
            for answer in ANSWERS
        )
        return true, false

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return ``P(True)`` for ``inp.action``; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        if self.settings.ptrue_forced:
            return await self._forced(inp)
        return await self._first_token(inp)

    async def _forced(self, inp: CriticInput) -> CriticResult:
        sent: list[Answer[str] | None] = [None, None]

        async def one(i: int, request: ChatRequest) -> None:
            sent[i] = await ask(self.chat, request, str)

        async with anyio.create_task_group() as tg:
            for i, request in enumerate(self.forced_requests(inp)):
                tg.start_soon(one, i, request)
        results = [s for s in sent if s is not None]
        stats = results[0].stats + results[1].stats
        logprobs: list[float] = []
        for answer, result in zip(ANSWERS, results, strict=True):
            if result.completion is None:
                return result.failure(stats)
            positions = result.completion.prompt_logprobs
            if not positions:
                reason = "the endpoint returned no prompt_logprobs (teacher forcing needs a vLLM-style server)"
                return CriticResult.not_available(reason, stats=stats)
            try:
                span = action_span(positions, answer)
            except ValueError as exc:
                return CriticResult(score=None, raw="", error=f"{NOT_AVAILABLE}: {answer}: {exc}", stats=stats)
            logprobs.append(sum(t.logprob for t in span))
        z = forced_p_true(logprobs[0], logprobs[1])
        raw = evidence(method="forced", logprob_true=logprobs[0], logprob_false=logprobs[1])
        return CriticResult(score=z, raw=raw, stats=stats)

    async def _first_token(self, inp: CriticInput) -> CriticResult:
        sent = await ask(self.chat, self.request(inp), str)
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
        needs=("chat",),
        uses=("prompt_logprobs", "continue_final_message", "logprobs"),
        fallback="forced (default) needs prompt_logprobs and continue_final_message; with ptrue_forced = false, "
        "logprobs, and answers outside the top-k are not available",
    )
)
