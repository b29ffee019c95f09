"""The live gate as an inspect_ai approver (https://inspect.aisi.org.uk/approval.html; ``inspect`` extra).

:func:`ceb_approver` scores each tool call with :meth:`Gate.score <ceb.gate.Gate.score>` before it runs::

    async with Gate(config, state_dir="gate-state") as gate:  # in the event loop the eval runs in
        logs = await eval_async(task, model=model, approval=[ApprovalPolicy(ceb_approver(gate, "my-eval"), "*")])

``allow`` -> ``approve``, ``review`` -> ``escalate`` (the policy's next approver; with none, inspect rejects),
``block`` -> ``reject``. The explanation and metadata (score, decision, status, step, repetition flag, bank size)
land in the sample's approval events. Steps are read from the conversation as ``ceb convert inspect`` reads a log
(:func:`ceb.data.chat.chat_steps`); at ``on_sample_end`` a sample whose calls were scored is banked with
:meth:`Gate.finish <ceb.gate.Gate.finish>`. Trajectory ids are ``<sample id>/epoch-<n>/<sample uuid>``.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog

from ceb.errors import ConfigError
from ceb.version import install_command

try:
    from inspect_ai.approval import Approval, Approver, approver
    from inspect_ai.hooks import Hooks, SampleEnd, hooks
    from inspect_ai.log._samples import sample_active  # the running sample: inspect's own hooks read it this way
    from inspect_ai.model import ChatMessage
    from inspect_ai.tool import ToolCall, ToolCallView
except ImportError as exc:  # pragma: no cover - the inspect extra is in the test environment
    raise ConfigError("the ceb approver for inspect_ai needs inspect_ai: " + install_command("inspect")) from exc

from ceb.data.chat import chat_steps
from ceb.data.chat_transcripts import DEFAULT_DOMAIN
from ceb.data.inspect_logs import openai_message, sample_trajectory
from ceb.gate.api import Gate
from ceb.gate.types import Banked, Confidence, Decision, StepContext

__all__ = ["INSPECT_DECISIONS", "ceb_approver"]

log = structlog.get_logger(__name__)

INSPECT_DECISIONS: dict[Decision, str] = {"allow": "approve", "review": "escalate", "block": "reject"}
"""The gate's decision -> inspect_ai's ``ApprovalDecision``."""


@dataclass(eq=False)
class _GatedEval:
    """One approver's gate and stream, and the samples it scored (sample uuid -> trajectory id, model)."""

    gate: Gate
    stream: str
    domain: str
    scored: dict[str, tuple[str, str]] = field(default_factory=dict)
    banked: list[Banked] = field(default_factory=list)

    async def approve(self, message: str, call: ToolCall, history: list[ChatMessage]) -> Approval:
        active = sample_active()
        if active is None:  # called outside a running sample: nothing to score it in
            return Approval(decision="escalate", explanation="ceb: no running sample to score this call in")
        tid = f"{active.sample.id}/epoch-{active.epoch}/{active.sample_uuid}"
        self.scored[active.sample_uuid] = (tid, active.model)
        chat = chat_steps([openai_message(m) for m in history], field="history")
        # The history ends with the assistant message holding this call (and any parallel ones): its steps are last.
        calls = [c.id for c in history[-1].tool_calls or []] if history and history[-1].role == "assistant" else []
        at = len(chat.steps) - len(calls) + calls.index(call.id) if call.id in calls else None
        if at is None:
            return Approval(decision="escalate", explanation="ceb: the call is not in the conversation; not scored")
        proposal = replace(chat.steps[at], reasoning=message or chat.steps[at].reasoning)
        task = chat.task if chat.task is not None else str(active.sample.input)
        context = StepContext(tid, task, self.domain, proposal, chat.steps[:at], chat.system)
        confidence = await self.gate.score(self.stream, context)
        return Approval(
            decision=INSPECT_DECISIONS[confidence.decision],
            explanation=self._explain(confidence),
            metadata={
                "ceb_score": confidence.score,
                "ceb_decision": confidence.decision,
                "ceb_status": confidence.status,
                "ceb_step": confidence.step,
                "ceb_repetition_flag": confidence.repetition_flag,
                "ceb_bank_size": confidence.bank_size,
                "ceb_stream": self.stream,
            },
        )

    def _explain(self, c: Confidence) -> str:
        g = self.gate.config.gate
        score = "no score" if c.score is None else f"score {c.score:.2f}"
        why = [f"{score} (allow >= {g.allow}, block < {g.block})"]
        if c.repetition_flag:
            why.append("it repeats a recent call")
        if c.error:
            why.append(f"the critic failed: {c.error}")
        return f"ceb {c.decision}: " + "; ".join(why)

    async def bank(self, sample: Any) -> None:
        found = self.scored.pop(str(sample.uuid), None)
        if found is None:
            return
        tid, model = found
        trajectory = sample_trajectory(sample, Path("inspect-sample"), model, None, self.domain)
        if not trajectory.steps:
            return
        self.banked.append(await self.gate.finish(self.stream, replace(trajectory, id=tid, source=tid)))


_LIVE: weakref.WeakSet[_GatedEval] = weakref.WeakSet()
"""Every approver's state, for the hook that banks a sample when it ends."""


@hooks(name="ceb_gate", description="Banks each sample a ceb approver scored in its gate's stream when it ends.")
class _BankEndedSamples(Hooks):
    async def on_sample_end(self, data: SampleEnd) -> None:
        for gated in list(_LIVE):
            try:
                await gated.bank(data.sample)
            except Exception as exc:  # a hook's failure would end the eval; the sample stays scored, not banked
                log.error("sample not banked", stream=gated.stream, sample=data.sample.id, error=str(exc))


@approver(name="ceb")
def ceb_approver(gate: Gate, stream: str = "inspect", domain: str = DEFAULT_DOMAIN) -> Approver:
    """An inspect_ai approver deciding each tool call by ``gate`` (module docstring), banking each sample.

    Args:
        gate: An open gate, entered in the eval's event loop; its ``gate`` section sets the thresholds.
        stream: The gate's stream (one bank) for this eval's samples.
        domain: The samples' prompt family, as ``ceb convert inspect --domain``.

    Returns:
        The approver; ``approver.banked`` holds one :class:`~ceb.gate.Banked` per sample, in ending order.
    """
    gated = _GatedEval(gate, stream, domain)
    _LIVE.add(gated)

    async def approve(message: str, call: ToolCall, view: ToolCallView, history: list[ChatMessage]) -> Approval:
        return await gated.approve(message, call, history)

    approve.banked = gated.banked  # type: ignore[attr-defined]
    approve.gated = gated  # type: ignore[attr-defined]  # keeps it alive (the set holds it weakly) while in use
    return approve
