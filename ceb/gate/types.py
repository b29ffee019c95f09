"""What the live gate takes and answers: a proposed step's context, its confidence, a trajectory's banking.

These are the public types of :mod:`ceb.gate` (and of ``ceb serve``'s JSON bodies, :mod:`ceb.serve.payloads`).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from ceb.data.reader import check_trajectory
from ceb.data.trajectory import Step, Trajectory
from ceb.errors import DataError, Problem, StreamValidationError
from ceb.stages.base import Abstention, HindsightResult, StepStatus
from ceb.stages.step import Precedent

__all__ = [
    "STREAM_NAME",
    "Banked",
    "Confidence",
    "Decision",
    "Receipt",
    "StepContext",
    "check_context",
    "check_finished",
    "check_stream_name",
]

Decision = Literal["allow", "review", "block"]
"""What to do with a proposed action: run it, ask a person (or replan), or refuse it."""

STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
"""A stream name: it names the stream's folder in the state directory, so no path separators, at most 128."""


def check_stream_name(stream: str) -> str:
    """Return ``stream`` if it is a valid stream name (:data:`STREAM_NAME`).

    Raises:
        DataError: It is not (the problem's field is ``stream``).
    """
    if not isinstance(stream, str) or not STREAM_NAME.fullmatch(stream):
        shown = repr(stream[:40]) if isinstance(stream, str) else type(stream).__name__
        raise DataError(
            Problem("<request>", 0, "stream", f"must match [A-Za-z0-9][A-Za-z0-9_.-]{{0,127}}, got {shown}")
        )
    return stream


def check_finished(trajectory: Trajectory) -> None:
    """Check a finished trajectory by the stream-line rules (:func:`~ceb.data.reader.check_trajectory`, SCHEMA.md).

    Raises:
        DataError: The first problem, naming the field (``steps[0].action``).
    """
    try:
        check_trajectory(trajectory)
    except StreamValidationError as exc:
        raise DataError(exc.problems[0]) from None


def check_context(context: StepContext) -> None:
    """Check a proposed step's context by the stream-line rules (:func:`check_finished`).

    Fields the gate never reads (the proposal's ``observation``, labels, rewards) are not checked.

    Raises:
        DataError: The first problem, naming ``trajectory_id``, ``domain``, ``history[i].<field>`` or
            ``proposal.<field>``.
    """
    t = len(context.history)
    never_read = [s for s in context.history if s.label is not None or s.reward is not None]
    history = tuple(replace(s, label=None, reward=None) for s in context.history) if never_read else context.history
    proposal = replace(context.proposal, observation="", label=None, reward=None)
    try:
        check_trajectory(
            Trajectory(context.trajectory_id, context.task, context.domain, (*history, proposal)), "<step context>"
        )
    except StreamValidationError as exc:
        p = exc.problems[0]
        field = "trajectory_id" if p.field == "id" else p.field
        if p.step is not None:
            at = "proposal" if p.step == t else f"history[{p.step}]"
            field = field.replace(f"steps[{p.step}]", at, 1)
        raise DataError(Problem(p.path, p.line, field, p.message, p.trajectory_id)) from None


@dataclass(frozen=True, slots=True)
class StepContext:
    """A proposed action and what the agent knows before it runs: ``(q, s_t, h_<t, a_t)`` (Eq. 1).

    Attributes:
        trajectory_id: The agent's run (episode); :meth:`~ceb.gate.Gate.finish` later names it.
        task: ``q``.
        domain: Prompt family: ``web``, ``mobile``, ``shell``, ``sql`` or another lower-case word.
        proposal: ``(s_t, a_t)`` with the agent's logged fields; its ``observation``, ``label`` and ``reward`` are
            never read.
        history: ``h_<t``, with observations; ``t = len(history)``.
        actor_prompt: The actor's system prompt, if known (read by baselines that re-run the actor).
    """

    trajectory_id: str
    task: str
    domain: str
    proposal: Step
    history: tuple[Step, ...] = ()
    actor_prompt: str | None = None

    @classmethod
    def of(cls, trajectory: Trajectory, t: int) -> StepContext:
        """Step ``t`` of a recorded trajectory as the agent saw it before running it (blinded)."""
        blind = trajectory.blinded()
        prompt = trajectory.meta.get("actor_prompt")
        return cls(
            trajectory_id=blind.id,
            task=blind.task,
            domain=blind.domain,
            proposal=replace(blind.steps[t], observation=""),
            history=blind.steps[:t],
            actor_prompt=prompt if isinstance(prompt, str) else None,
        )


@dataclass(frozen=True, slots=True)
class Confidence:
    """The gate's answer for one proposed action.

    Attributes:
        step: ``t``, 0-based.
        score: ``z^_t``: probability in [0, 1] that the action is productive, or ``None`` when the critic gave none.
        decision: ``allow`` (``score >= gate.allow``), ``block`` (``score < gate.block``), ``review`` between;
            ``gate.on_failure`` without a score.
        precedents: The bank records shown to the critic, positives first, most similar first.
        repetition_flag: ``rho_t`` (section 3.3).
        bank_version: Bank updates applied when the bank was read; ``bank_size`` its records then.
        latency_s: Seconds in :meth:`~ceb.gate.Gate.score`; ``critic_s`` and ``retrieval_s`` (lock wait included) are
            parts of it.
    """

    stream: str
    trajectory_id: str
    step: int
    score: float | None
    decision: Decision
    status: StepStatus
    error: str | None
    precedents: tuple[Precedent, ...]
    repetition_flag: bool
    bank_version: int
    bank_size: int
    latency_s: float
    critic_s: float
    retrieval_s: float

    @property
    def overhead_s(self) -> float:
        """Seconds the gate added on top of the critic call."""
        return max(0.0, self.latency_s - self.critic_s)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field and :attr:`overhead_s` (what ``POST /v1/score`` answers)."""
        return {**asdict(self), "precedents": [dict(p) for p in self.precedents], "overhead_s": self.overhead_s}


@dataclass(frozen=True, slots=True)
class Banked:
    """A trajectory's hindsight votes and the bank update they made (Eq. 3, Algorithm 1 lines 11-12).

    Attributes:
        seq: Its position in the stream's accepted order, from 1; also ``bank_version`` after the update.
        votes: Valid votes; shape ``(V_valid, T_l)``. ``soft_votes`` (``y~_t``) and ``pseudo_labels`` (``y^_t``):
            shape ``(T_l,)``.
        bank_size: Records in the bank after it (eviction may hold it below the sum of additions).
        hindsight_s: Seconds the hindsight took.
        replayed: Accepted before (same id and content) and nothing banked now; the first update's fields when still
            kept, else no votes and ``records_added`` 0.
    """

    stream: str
    trajectory_id: str
    seq: int
    votes: tuple[tuple[int, ...], ...]
    soft_votes: tuple[float, ...]
    pseudo_labels: tuple[int, ...]
    failed_votes: int
    errors: tuple[str, ...]
    abstained: tuple[Abstention, ...]
    records_added: int
    bank_version: int
    bank_size: int
    hindsight_s: float
    replayed: bool = False

    @classmethod
    def from_result(
        cls,
        result: HindsightResult,
        *,
        stream: str,
        trajectory_id: str,
        seq: int,
        records_added: int,
        bank_version: int,
        bank_size: int,
        hindsight_s: float,
        replayed: bool = False,
    ) -> Banked:
        """The answer for one trajectory's hindsight ``result`` and the bank update it made."""
        return cls(
            stream=stream,
            trajectory_id=trajectory_id,
            seq=seq,
            votes=result.votes,
            soft_votes=result.soft_votes,
            pseudo_labels=result.pseudo_labels,
            failed_votes=result.failed_votes,
            errors=result.errors,
            abstained=result.abstained,
            records_added=records_added,
            bank_version=bank_version,
            bank_size=bank_size,
            hindsight_s=hindsight_s,
            replayed=replayed,
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Receipt:
    """The acknowledgement of a finished trajectory (:meth:`~ceb.gate.Gate.accept`).

    Attributes:
        seq: Its position in the stream's accepted order, from 1.
        replayed: Accepted before (same id and content): ``seq`` is the first acknowledgement's.
    """

    seq: int
    replayed: bool
