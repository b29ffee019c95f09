"""One trajectory of the stream contract (``docs/stream-format.md``, version 1).

``label``, ``reward`` and ``meta`` are evaluation-only: stages get :meth:`Trajectory.blinded` copies, so no
prompt, retrieval key or bank record sees them (paper section 3.1, the information constraint).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

__all__ = ["Step", "Trajectory"]


@dataclass(frozen=True, slots=True)
class Step:
    """One step ``(s_t, a_t, o_t)`` (paper section 3.1).

    Attributes:
        state: Compact pre-action state ``s_t`` (may be empty).
        action: ``a_t``, never empty.
        observation: ``o_t``, what the environment showed after the action (may be empty).
        op: Web/GUI operation (``CLICK``, ``TYPE``), with ``element`` and ``value``, if logged.
        reward: Environment reward after the step; evaluation only.
        actor_logprobs: Natural-log token probabilities of the action.
        label: Ground-truth step label 0, 1 or ``None``; evaluation only.
    """

    state: str
    action: str
    observation: str
    reasoning: str | None = None
    op: str | None = None
    element: str | None = None
    value: str | None = None
    reward: float | None = None
    actor_logprobs: tuple[float, ...] | None = None
    label: int | None = None


@dataclass(frozen=True, slots=True)
class Trajectory:
    """A task and the steps an agent took for it.

    Attributes:
        id: Unique within its stream.
        task: The task ``q``.
        domain: Prompt family: ``web``, ``mobile``, ``shell``, ``sql`` or another lower-case word.
        env: Environment, website or file-system id.
        meta: Carried through; never shown to a stage.
        source: ``path:line`` it was read from (empty when built in code).
    """

    id: str
    task: str
    domain: str
    steps: tuple[Step, ...]
    actor: str | None = None
    env: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def labels(self) -> tuple[int | None, ...]:
        """Ground-truth labels per step, shape ``(T,)`` (evaluation only)."""
        return tuple(s.label for s in self.steps)

    def blinded(self) -> Trajectory:
        """A copy without ``label``, ``reward`` and ``meta``; ``actor_logprobs`` stay (known before execution)."""
        steps = tuple(replace(s, label=None, reward=None) for s in self.steps)
        return replace(self, steps=steps, meta={})
