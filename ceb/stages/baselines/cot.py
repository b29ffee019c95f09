"""CoT (inductive): reasoning, then a stated confidence from 0 to 100 (paper section 4.1)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.config import BaselineConfig, CriticConfig, RunConfig
from ceb.stages.asking import ask, bounded_text
from ceb.stages.assembly import Stages, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import need_chat, prompt_messages
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.readout import logprob_fields, read_score
from ceb.stages.templates import PromptSet

__all__ = [
    "COT_REASONING_MAX_CHARS",
    "COT_REASONING_STEPS",
    "COT_SCHEMA",
    "COT_STEP_MAX_CHARS",
    "CoTCritic",
    "confidence_span",
    "parse_confidence_line",
]

COT_REASONING_STEPS = 12
"""Most reasoning steps (lines) the CoT critic may write under structure."""

COT_STEP_MAX_CHARS = 100
"""Longest reasoning step, in characters."""

COT_REASONING_MAX_CHARS = COT_REASONING_STEPS * COT_STEP_MAX_CHARS
"""Longest reasoning the CoT critic may write under structure, in characters (1,200): room to think, while the
reply still closes within the default 1,300-token budget (``baselines.cot_max_tokens``) at one character per
token, about what a 135M model's degenerate "1.1.1.1..." takes. It is a list of at most
:data:`COT_REASONING_STEPS` lines of :data:`COT_STEP_MAX_CHARS`, not one string, because vLLM's xgrammar cannot
compile a string bound that long (:data:`~ceb.stages.asking.BOUNDED_TEXT_MAX_CHARS`)."""

COT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {
            "type": "array",
            "items": bounded_text(COT_STEP_MAX_CHARS, min_chars=1),
            "minItems": 1,
            "maxItems": COT_REASONING_STEPS,
        },
        "confidence": {"type": "integer", "minimum": 0, "maximum": 100},
    },
    "required": ["reasoning", "confidence"],
    "additionalProperties": False,
}
"""The CoT reply under structure: the reasoning steps first, so the confidence is still stated after them, then the
confidence in percent. Where the server enforces it (``json_schema`` and ``vllm`` modes), the reasoning holds at
least one non-empty step and ends within its bound, and the final confidence cannot be missing or out of range;
elsewhere the free-text reply is read by :func:`parse_confidence_line`, which reads both forms. Without the lower
bounds a small model skips the chain of thought the method is named for: SmolLM2-135M answered
``{"reasoning": [], "confidence": 0}`` on 14 of 16 steps."""

# "Confidence: 73", "**Confidence:** 73%", "Final confidence (0-100) = 73", and the JSON form
# {"confidence": 73} a re-ask may get: the word, up to 20 other characters on the same line, ":" or "=",
# then the number. A sign is matched so that a negative number is refused rather than read without it.
_CONFIDENCE = re.compile(r"confidence[^\n:=]{0,20}?[:=][\s*_`\"']*([-+]?\d+(?:\.\d+)?)", re.IGNORECASE)


def parse_confidence_line(text: str) -> float:
    """Read the stated confidence, in percent, from the last ``Confidence: <0-100>`` in ``text``.

    The last occurrence counts, since the reasoning before it may mention confidence too. The number is read
    on the 0-100 scale that was asked for, whatever its form (``0.7`` is 0.7 %, not 70 %): no scale is guessed.

    Returns:
        The confidence in [0, 100].

    Raises:
        ValueError: No such line, or its number is outside [0, 100].
    """
    start, end = confidence_span(text)
    x = float(text[start:end])
    if not (math.isfinite(x) and 0.0 <= x <= 100.0):
        raise ValueError(f"confidence {text[start:end]} is outside 0-100")
    return x


def confidence_span(text: str) -> tuple[int, int]:
    """Where the number :func:`parse_confidence_line` reads is written in ``text``: ``(start, end)``.

    Raises:
        ValueError: No confidence line.
    """
    found = list(_CONFIDENCE.finditer(text))
    if not found:
        raise ValueError('no final line "Confidence: <0-100>" (or {"confidence": <0-100>}) in the reply')
    return found[-1].span(1)


@dataclass
class CoTCritic:
    """Zero-shot chain-of-thought about the proposed action, then ``Confidence: c``; score ``c / 100``.

    Source: the "inductive" CoT prompting of Yu et al., 2025 (verbalized confidence for embodied agents), as used
    in paper section 4.1: reasoning without examples, then a confidence in [0, 100], rescaled to [0, 1]. The
    critic sees ``(q, s_t, h_<t, a_t)`` (``cot_system.j2`` / ``cot_user.j2``).

    The request carries :data:`COT_SCHEMA`, which the backend sends as structured output where its
    ``structured_output`` mode allows, so a server that enforces it returns ``{"reasoning": ..., "confidence":
    c}`` with ``c`` an integer in [0, 100]; where nothing is enforced, the prompt asks for the final line.

    A reply without a readable confidence (:func:`parse_confidence_line`) is re-asked up to
    ``critic.format_retries`` times through :func:`~ceb.stages.asking.ask`; its correction asks for a JSON
    object, which the parser also reads (``{"confidence": 73}``). After that, or when the endpoint fails, the
    result has ``score=None`` and the reason in ``error``.

    Under ``readout.readout = "expected"`` the score is the expectation of that final confidence over the
    reply's top log-probs at its digits (:mod:`ceb.stages.readout`), each candidate read as percent; the
    reasoning is read as text.

    Attributes:
        chat: The critic's endpoint.
        prompts: Templates.
        settings: ``cot_temperature`` and ``cot_max_tokens`` are read.
        readout: The critic's ``readout``, ``top_logprobs``, ``readout_min_mass`` and ``format_retries`` are read.
    """

    chat: ChatBackend
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)
    readout: CriticConfig = field(default_factory=CriticConfig)

    def request(self, inp: CriticInput) -> ChatRequest:
        """The CoT request for ``inp``."""
        return ChatRequest(
            messages=prompt_messages(self.prompts, inp, "cot"),
            temperature=self.settings.cot_temperature,
            max_tokens=self.settings.cot_max_tokens,
            json_schema=COT_SCHEMA,
            schema_name="cot_confidence",
            stage="critic",
            **logprob_fields(self.readout),
        )

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return the stated confidence of ``inp.action``, rescaled to [0, 1]; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        ans = await ask(self.chat, self.request(inp), parse_confidence_line, self.readout.format_retries)
        if ans.value is None:
            return CriticResult(score=None, raw=ans.raw, error=ans.error, stats=ans.stats)
        reading = read_score(
            ans.value / 100.0,
            self.readout,
            tokens=ans.tokens,
            text=ans.raw,
            span=confidence_span,
            value_of=lambda number: float(number) / 100.0,
        )
        return CriticResult(score=reading.score, raw=ans.raw, stats=ans.stats, readout=reading.readout)


def build(config: RunConfig, stages: Stages) -> Critic:
    """The CoT critic over the critic's endpoint."""
    return CoTCritic(need_chat(stages.chat), prompt_set(config), config.baselines, config.critic)


METHOD = register_method(
    MethodSpec(
        "cot",
        label="CoT",
        group="baseline",
        order=15,
        description="chain of thought, then a verbalised confidence in [0, 100]",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=("chat",),
        uses=("structured_output", "schema_bounds"),
        fallback="the last 'Confidence: c' line of a free-text reply is read",
    )
)
