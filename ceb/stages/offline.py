"""The embedded default backend: a critic and a hindsight labeler that are NOT language models.

They let ``ceb`` run end to end on a laptop with no server, exercise every part of the pipeline (bank,
retrieval, ordering, hindsight, metrics) on real data, and give a floor any LLM critic should beat. They
read only what an LLM stage would read: the blinded trajectory and the critic's input. Never ``label``,
``reward`` or ``meta``.

Offline critic (a retrieval-only estimator of the productive rate)::

    z_t = (sum_i w_i * y^_i + m * p0) / (sum_i w_i + m),   w_i = cos(kappa_t, kappa_i) ** gamma

over the retrieved precedents ``i`` (both classes), where ``p0 = (|B+| + 1) / (|B| + 2)`` is the bank's
smoothed pseudo-label base rate and ``m`` the prior strength. If the repetition flag is set, ``z_t`` is
multiplied by ``repetition_factor``. With an empty bank (or the bank-free ``static`` method) it is the
uninformed prior 0.5 (times the repetition factor when set).

Offline hindsight labeler (rules over observations; one deterministic vote copied ``V`` times). A step is
unproductive (0) when any of these holds, else productive (1):

1. error: its observation matches :data:`ERROR_PATTERN` (shell and SQL error messages);
2. repeat: its action equals an earlier action of the trajectory (white space and case folded);
3. no change: its observation equals the previous step's observation;
4. retried: the next action repeats it (same first 40 characters), i.e. the agent had to try again.
"""

from __future__ import annotations

import re

import orjson

from ceb.data.trajectory import Trajectory
from ceb.stages.base import CriticInput, CriticResult, HindsightResult
from ceb.stages.critic import repetition_flag
from ceb.stages.hindsight import majority_vote

__all__ = ["ERROR_PATTERN", "OfflineCritic", "OfflineHindsight"]

ERROR_PATTERN = re.compile(
    r"(?im)(^|\b)(error|errno|exception|traceback|not found|no such file|command not found|"
    r"permission denied|syntax error|invalid option|unrecognized option|illegal option|usage:|"
    r"doesn't exist|does not exist|unknown column|you have an error in your sql)"
)
"""Observation text that marks a failed command or query."""


class OfflineCritic:
    """Similarity-weighted productive rate of the retrieved precedents, shrunk toward the base rate.

    Args:
        prior_strength: ``m``, weight of the base rate in units of one perfectly similar precedent.
        sharpness: ``gamma``, exponent on cosine similarity (higher trusts the closest precedents more).
        repetition_factor: Multiplier applied when ``rho_t = 1``.
    """

    def __init__(self, prior_strength: float = 1.0, sharpness: float = 2.0, repetition_factor: float = 0.6) -> None:
        self.prior_strength = prior_strength
        self.sharpness = sharpness
        self.repetition_factor = repetition_factor

    async def score(self, inp: CriticInput) -> CriticResult:
        """Score ``inp`` from its precedents alone (see the module docstring for the formula)."""
        p0 = (inp.bank_positive + 1) / (inp.bank_size + 2) if inp.use_bank else 0.5
        hits = inp.retrieval.hits if inp.use_bank else ()
        w = [max(h.similarity, 0.0) ** self.sharpness for h in hits]
        num = sum(wi * h.record.pseudo_label for wi, h in zip(w, hits, strict=True)) + self.prior_strength * p0
        z = num / (sum(w) + self.prior_strength)
        if inp.repetition_flag:
            z *= self.repetition_factor
        raw = orjson.dumps(
            {
                "score": round(z, 6),
                "base_rate": round(p0, 6),
                "precedents": len(hits),
                "weight": round(sum(w), 6),
            }
        ).decode()
        return CriticResult(score=z, raw=raw)


class OfflineHindsight:
    """Rule-based hindsight labels from observations (see the module docstring for the rules)."""

    @staticmethod
    def rules(trajectory: Trajectory) -> list[tuple[int, str]]:
        """Label and the first rule that fired (``""`` for productive) per step, shape ``(T,)``."""
        steps = trajectory.steps
        out: list[tuple[int, str]] = []
        for t, s in enumerate(steps):
            earlier = [p.action for p in steps[:t]]
            if ERROR_PATTERN.search(s.observation):
                out.append((0, "error"))
            elif repetition_flag(earlier, s.action, window=len(earlier), prefix_chars=10**9):
                out.append((0, "repeat"))
            elif t > 0 and s.observation.strip() == steps[t - 1].observation.strip():
                out.append((0, "no change"))
            elif t + 1 < len(steps) and repetition_flag([s.action], steps[t + 1].action, window=1):
                out.append((0, "retried"))
            else:
                out.append((1, ""))
        return out

    async def label(self, trajectory: Trajectory, votes: int) -> HindsightResult:
        """Apply the rules once; the ``votes`` votes are identical copies, so soft votes are 0 or 1."""
        fired = self.rules(trajectory)
        vote = tuple(label for label, _ in fired)
        all_votes = (vote,) * max(votes, 1)
        soft, pseudo = majority_vote(all_votes)
        raw = orjson.dumps({"labels": list(vote), "rules": [r for _, r in fired]}).decode()
        return HindsightResult(votes=all_votes, soft_votes=soft, pseudo_labels=pseudo, raws=(raw,) * len(all_votes))
