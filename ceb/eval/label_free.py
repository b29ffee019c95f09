"""What a run's scores say without labels (beyond the paper): spread, steps to review, deferrals, agreement.

A user scoring their own agent's logs often has no labels, and every calibration number is then n/a. Each view
reads the lowest-order lane per (stream, critic, method); :func:`agreement` is Spearman's rank correlation
(``scipy.stats.spearmanr``) of every pair of methods on the steps both scored.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations

import numpy as np

from ceb.eval.deployment import SELECTIVE_BUDGETS
from ceb.eval.lanes import POOLED, ScoredLane
from ceb.pipeline.rundir import RunDir

__all__ = [
    "Agreement",
    "Deferral",
    "ReviewStep",
    "ScoreSpread",
    "StepTexts",
    "agreement",
    "deferrals",
    "score_spreads",
    "step_texts",
    "steps_to_review",
    "with_texts",
]

StepTexts = Mapping[tuple[str, str, int], tuple[str, str]]
"""``(stream, trajectory id, step) -> (task, action)``."""


@dataclass(frozen=True, slots=True)
class ScoreSpread:
    """One method's score distribution on one stream or pooled (10th, 50th, 90th percentiles; distinct to 6 places)."""

    stream: str
    critic: str
    method: str
    n: int
    mean: float
    sd: float
    quantiles: tuple[float, float, float]
    low: float
    high: float
    distinct: int


def score_spreads(lanes: Sequence[ScoredLane]) -> list[ScoreSpread]:
    """Each lane's score distribution, then each (critic, method)'s pooled; failed steps and empty lanes left out."""
    out = []
    pooled: dict[tuple[str, str], list[np.ndarray]] = {}
    for lane in lanes:
        scores = lane.score[~np.isnan(lane.score)]
        if scores.size:
            out.append(_spread(lane.stream, lane.critic, lane.method, scores))
            pooled.setdefault((lane.critic, lane.method), []).append(scores)
    streams = {lane.stream for lane in lanes}
    if len(streams) > 1:
        out += [_spread(POOLED, c, m, np.concatenate(parts)) for (c, m), parts in pooled.items()]
    return out


def _spread(stream: str, critic: str, method: str, scores: np.ndarray) -> ScoreSpread:
    q10, q50, q90 = (float(q) for q in np.quantile(scores, (0.1, 0.5, 0.9)))
    return ScoreSpread(
        stream=stream,
        critic=critic,
        method=method,
        n=int(scores.size),
        mean=float(scores.mean()),
        sd=float(scores.std()),
        quantiles=(q10, q50, q90),
        low=float(scores.min()),
        high=float(scores.max()),
        distinct=int(np.unique(np.round(scores, 6)).size),
    )


@dataclass(frozen=True, slots=True)
class ReviewStep:
    """One step to look at; ``task`` and ``action`` are ``""`` when the stream files cannot be read here."""

    stream: str
    critic: str
    method: str
    trajectory: str
    step: int
    score: float
    task: str
    action: str


def steps_to_review(
    lanes: Sequence[ScoredLane], texts: StepTexts, k: int = 10
) -> tuple[list[ReviewStep], list[ReviewStep]]:
    """Per (critic, method): the ``k`` lowest-confidence steps and the ``k`` trajectories with the lowest step.

    Ties go by stream, trajectory and step. Returns ``(steps, trajectories)``, lowest first.
    """
    by_method: dict[tuple[str, str], list[ReviewStep]] = {}
    for lane in lanes:
        for i in np.flatnonzero(~np.isnan(lane.score)):
            key = (lane.stream, str(lane.trajectory[i]), int(lane.step[i]))
            task, action = texts.get(key, ("", ""))
            by_method.setdefault((lane.critic, lane.method), []).append(
                ReviewStep(lane.stream, lane.critic, lane.method, key[1], key[2], float(lane.score[i]), task, action)
            )
    steps: list[ReviewStep] = []
    trajectories: list[ReviewStep] = []
    for found in by_method.values():
        found.sort(key=lambda r: (r.score, r.stream, r.trajectory, r.step))
        steps += found[:k]
        weakest: dict[tuple[str, str], ReviewStep] = {}
        for r in found:  # lowest first, so the first step seen of a trajectory is its minimum
            weakest.setdefault((r.stream, r.trajectory), r)
        trajectories += list(weakest.values())[:k]
    return steps, trajectories


@dataclass(frozen=True, slots=True)
class Deferral:
    """What budget ``b`` (percent) defers: the ``floor(b N / 100)`` lowest of ``n`` steps, ``cut`` the highest."""

    stream: str
    critic: str
    method: str
    budget: int
    deferred: int
    n: int
    cut: float | None


def deferrals(lanes: Sequence[ScoredLane], budgets: Iterable[int] = SELECTIVE_BUDGETS) -> list[Deferral]:
    """For each (stream, critic, method) and budget ``b > 0``: the steps selective execution would defer."""
    out = []
    for lane in lanes:
        scores = np.sort(lane.score[~np.isnan(lane.score)])
        if not scores.size:
            continue
        for b in budgets:
            if b <= 0:
                continue
            k = math.floor(b * scores.size / 100)
            cut = float(scores[k - 1]) if k else None
            out.append(Deferral(lane.stream, lane.critic, lane.method, b, k, int(scores.size), cut))
    return out


@dataclass(frozen=True, slots=True)
class Agreement:
    """How two methods rank the ``n`` steps both scored: ``rho`` in [-1, 1], ``None`` below 3 steps or on a constant."""

    stream: str
    critic: str
    first: str
    second: str
    n: int
    rho: float | None


def agreement(lanes: Sequence[ScoredLane]) -> list[Agreement]:
    """Spearman's rank correlation of every pair of methods of a (stream, critic), on the steps both scored."""
    from scipy.stats import spearmanr

    groups: dict[tuple[str, str], list[ScoredLane]] = {}
    for lane in lanes:
        groups.setdefault((lane.stream, lane.critic), []).append(lane)
    out = []
    for (stream, critic), group in groups.items():
        scored = {lane.method: _by_step(lane) for lane in group}
        for a, b in combinations(scored, 2):
            shared = sorted(scored[a].keys() & scored[b].keys())
            x = np.array([scored[a][k] for k in shared])
            y = np.array([scored[b][k] for k in shared])
            rho = None
            if len(shared) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                rho = float(spearmanr(x, y).statistic)
            out.append(Agreement(stream, critic, a, b, len(shared), rho))
    return out


def _by_step(lane: ScoredLane) -> dict[tuple[str, int], float]:
    ok = ~np.isnan(lane.score)
    return {
        (str(t), int(s)): float(v) for t, s, v in zip(lane.trajectory[ok], lane.step[ok], lane.score[ok], strict=True)
    }


def step_texts(
    run: RunDir, wanted: Iterable[tuple[str, str, int]]
) -> tuple[dict[tuple[str, str, int], tuple[str, str]], str | None]:
    """Task and action of each ``(stream, trajectory, step)`` in ``wanted``; never raises (the second says why not)."""
    wanted = set(wanted)
    streams, missing = run.recorded_trajectories()
    out: dict[tuple[str, str, int], tuple[str, str]] = {}
    for stream, trajectories in streams.items():
        for traj in trajectories:
            for t, step in enumerate(traj.steps):
                if (stream, traj.id, t) in wanted:
                    out[(stream, traj.id, t)] = (traj.task, step.action)
    needed = {s for s, _, _ in wanted}
    why = [f"{s}: {reason}" for s, reason in missing.items() if s == "*" or s in needed]
    return out, ("; ".join(why) or None)


def with_texts(rows: Sequence[ReviewStep], texts: StepTexts) -> list[ReviewStep]:
    """``rows`` with the task and action of each step from ``texts`` (left blank where it has none)."""
    out = []
    for r in rows:
        task, action = texts.get((r.stream, r.trajectory, r.step), ("", ""))
        out.append(replace(r, task=task, action=action))
    return out
