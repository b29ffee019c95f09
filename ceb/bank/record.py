"""The bank record ``e = (q', s', a', o~', y^', z^', chi')`` of paper section 3.2 and its retrieval key."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BankRecord", "agreement_flag", "composite_key"]


def composite_key(task: str, state: str, action: str) -> str:
    """Build the retrieval key ``task: q || state: s || action: a`` (paper section 3.3, Algorithm 1 line 5).

    The same function keys bank records and queries, so both sides are tokenised alike.
    """
    return f"task: {task} || state: {state} || action: {action}"


def agreement_flag(score: float | None, pseudo_label: int) -> bool | None:
    """Return ``chi = 1[1[z >= 1/2] = y^]`` (paper section 3.2), or ``None`` when the critic gave no score."""
    if score is None:
        return None
    return (score >= 0.5) == bool(pseudo_label)


@dataclass(frozen=True, slots=True)
class BankRecord:
    """One hindsight-labelled step of an earlier trajectory (paper section 3.2).

    Attributes:
        task: Parent task ``q'``.
        state: Compact pre-action state summary ``s'`` (already truncated to the bank budget).
        action: Executed action ``a'``.
        observation: Summary ``o~'`` of what the environment showed after the action.
        pseudo_label: Hindsight majority vote ``y^' in {0, 1}`` (Eq. 3).
        soft_vote: Mean of the hindsight votes ``y~' in [0, 1]`` (Eq. 3).
        score: The critic's pre-execution confidence ``z^' in [0, 1]``; ``None`` if the critic call failed.
        agreement: ``chi'``: whether ``1[z^' >= 1/2]`` equals ``y^'``; ``None`` when ``score`` is ``None``.
        trajectory_id: Id of the trajectory the step came from.
        step: 0-based index of the step in that trajectory.
    """

    task: str
    state: str
    action: str
    observation: str
    pseudo_label: int
    soft_vote: float
    score: float | None
    agreement: bool | None
    trajectory_id: str
    step: int

    @property
    def key(self) -> str:
        """The record's composite retrieval key ``kappa'``."""
        return composite_key(self.task, self.state, self.action)
