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
    """One hindsight-labelled step of an earlier trajectory (paper section 3.2)."""

    task: str  # q'
    state: str  # s', already truncated to the bank budget
    action: str  # a'
    observation: str  # o~', what the environment showed after the action
    pseudo_label: int  # y^' in {0, 1}, the hindsight majority vote (Eq. 3)
    soft_vote: float  # y~' in [0, 1], the mean of the hindsight votes (Eq. 3)
    score: float | None  # z^' in [0, 1], the critic's pre-execution confidence; None: the call failed
    agreement: bool | None  # chi' = 1[1[z^' >= 1/2] = y^']; None when score is None
    trajectory_id: str
    step: int  # 0-based, within the trajectory

    @property
    def key(self) -> str:
        """The record's composite retrieval key ``kappa'``."""
        return composite_key(self.task, self.state, self.action)
