"""Verbalization: the actor states its own confidence right after its action (paper section 4.1), on frozen steps."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ceb.backends.base import ChatBackend, ChatRequest
from ceb.config import BaselineConfig, CriticConfig, RunConfig
from ceb.stages.asking import ask
from ceb.stages.assembly import Stages, actor_chat, prompt_set
from ceb.stages.base import Critic, CriticInput, CriticResult
from ceb.stages.baselines._common import actor_messages, continuation_extra, evidence, need_chat
from ceb.stages.critic import situation_context
from ceb.stages.methods import MethodSpec, register_method
from ceb.stages.readout import logprob_fields, read_score
from ceb.stages.templates import PromptSet

__all__ = ["STATED_CONFIDENCE_SCHEMA", "VerbalizedCritic", "parse_stated_confidence"]

STATED_CONFIDENCE_SCHEMA: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": 100}
"""The continuation under structure: a bare integer from 0 to 100, the percentage the cue asks for. Where the
server enforces it (vLLM) the continuation cannot be anything else; JSON mode cannot express it, so there and
without structure the prompt alone asks for it."""

_STATED = re.compile(r"[\s*_`\"']*([-+]?\d+(?:\.\d+)?)\s*(%?)")


def parse_stated_confidence(text: str) -> float:
    """Read the number the actor continued its reply with, as a probability in [0, 1].

    The number must open the continuation (after white space or markdown emphasis). Its scale, 0-100 or 0-1:

    * with ``%`` it is a percentage (``85%`` -> 0.85, ``0.5%`` -> 0.005);
    * written with a decimal point and at most 1, it is a probability (``0.85`` -> 0.85, ``1.0`` -> 1.0);
    * otherwise it is on the 0-100 scale that was asked for (``85`` -> 0.85, ``1`` -> 0.01, ``42.5`` -> 0.425).

    Raises:
        ValueError: The continuation does not open with a number, or the number is outside its scale.
    """
    number, percent = _stated(text).group(1, 2)
    x = stated_value(number, percent=bool(percent))
    if x < 0:
        raise ValueError(f"stated confidence {number} is negative")
    if x > 1.0:
        raise ValueError(f"stated confidence {number}{percent} is above 100")
    return x


def stated_value(number: str, *, percent: bool) -> float:
    """The probability a stated number means under :func:`parse_stated_confidence`'s scale rule, unchecked."""
    x = float(number)
    if not math.isfinite(x):
        raise ValueError(f"stated confidence {number} is not finite")
    if not percent and "." in number and x <= 1.0:
        return x
    return x / 100.0


def _stated(text: str) -> re.Match[str]:
    m = _STATED.match(text)
    if m is None:
        raise ValueError(f"the continuation {text[:40]!r} does not start with a number")
    return m


@dataclass
class VerbalizedCritic:
    """The actor, given the frozen action as the start of its own reply, continues with its stated confidence.

    Source: verbalized confidence, "ask the model how sure it is" (Tian et al., 2023; Xiong et al., 2024), as in
    paper section 4.1, where the agent emits its action and confidence in one pass.

    Adaptation to frozen streams: the paper's actor generates a new action with its confidence and is scored on
    that action. Here the action is the stream's, so the actor is given its prompt (:func:`actor_messages`
    with a request for a confidence line) and a reply that already holds the frozen action followed by the cue
    ``verbalized_cue.j2`` ("Confidence (0-100):"). With ``continue_final_message`` the actor continues that same
    reply, so the confidence it writes is conditioned on the frozen action as if it had written it. The
    continuation's number is read by :func:`parse_stated_confidence` (0-100, or 0-1 when written as a
    probability). The request carries :data:`STATED_CONFIDENCE_SCHEMA`, so a server that enforces it can only
    continue with an integer from 0 to 100.

    A continuation without a readable number gives ``score=None`` with the reason; it is not re-asked (a
    corrective turn would close the reply that is being continued).

    Under ``readout.readout = "expected"`` the score is the expectation of the stated number over the
    continuation's top log-probs (:mod:`ceb.stages.readout`), each candidate read on the scale above with the
    written ``%`` kept (a written ``85`` whose first digit had ``9`` as an alternative counts ``95``).

    Attributes:
        actor: The actor's endpoint (it must honour vLLM's ``continue_final_message``).
        prompts: Templates.
        settings: ``verbalized_max_tokens`` is read.
        readout: The critic's ``readout``, ``top_logprobs`` and ``readout_min_mass`` are read.
    """

    actor: ChatBackend
    prompts: PromptSet
    settings: BaselineConfig = field(default_factory=BaselineConfig)
    readout: CriticConfig = field(default_factory=CriticConfig)

    def request(self, inp: CriticInput) -> ChatRequest:
        """The request for ``inp``: the actor prompt, then the action, a line break and the cue, left open."""
        cue = self.prompts.render_or_base(inp.domain, "verbalized_cue", situation_context(inp)).strip()
        reply = {"role": "assistant", "content": f"{inp.action}\n{cue}"}
        return ChatRequest(
            messages=(*actor_messages(self.prompts, inp, ask_confidence=True), reply),
            temperature=0.0,
            max_tokens=self.settings.verbalized_max_tokens,
            json_schema=STATED_CONFIDENCE_SCHEMA,
            schema_name="stated_confidence",
            extra=continuation_extra(),
            stage="critic",
            **logprob_fields(self.readout),
        )

    async def score(self, inp: CriticInput) -> CriticResult:
        """Return the actor's stated confidence in ``inp.action``; never raises for one step's failure.

        Raises:
            FatalBackendError: The endpoint refuses every request.
        """
        sent = await ask(self.actor, self.request(inp), str)
        if sent.completion is None:
            return sent.failure()
        c = sent.completion
        text = c.texts[0] if c.texts else ""
        try:
            z = parse_stated_confidence(text)
        except ValueError as exc:
            return CriticResult(score=None, raw=text, error=f"unreadable reply: {exc}", stats=sent.stats)
        percent = bool(_stated(text).group(2))
        reading = read_score(
            z,
            self.readout,
            tokens=c.logprobs[0] if c.logprobs else None,
            text=text,
            span=lambda t: _stated(t).span(1),
            value_of=lambda number: stated_value(number, percent=percent),
        )
        raw = evidence(continuation=text, confidence=z, readout=reading.readout, mass=reading.mass, note=reading.note)
        return CriticResult(score=reading.score, raw=raw, stats=sent.stats, readout=reading.readout)


def build(config: RunConfig, stages: Stages) -> Critic:
    """Verbalized confidence from the actor's endpoint."""
    return VerbalizedCritic(need_chat(actor_chat(config, stages)), prompt_set(config), config.baselines, config.critic)


METHOD = register_method(
    MethodSpec(
        "verbalized",
        label="Verbalization",
        group="baseline",
        order=13,
        description="the actor's own verbalised confidence after the frozen action",
        use_bank=False,
        use_repetition_flag=False,
        critic=build,
        needs=("chat", "continue_final_message"),
    )
)
