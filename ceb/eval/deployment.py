"""Deployment analyses: selective execution under an abstention budget and task success under review (4.5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ceb.eval._arrays import FloatArray, checked_pair

__all__ = [
    "REVIEW_BUDGETS",
    "SELECTIVE_BUDGETS",
    "TaskSuccess",
    "oracle_task_success",
    "selective_execution",
    "task_success",
]

SELECTIVE_BUDGETS: tuple[int, ...] = (0, 10, 25, 50)
"""Abstention budgets ``b`` of the selective execution table (percent of steps deferred; section 4.5)."""

REVIEW_BUDGETS: tuple[int, ...] = (0, 1, 2, 3)
"""Per-task review budgets ``m`` of the task success table (steps reviewed per trajectory; section 4.5)."""


def selective_execution(
    y_true: npt.ArrayLike, y_prob: npt.ArrayLike, budgets: Sequence[int] = SELECTIVE_BUDGETS
) -> list[float | None]:
    """Retained GT positive rate after deferring the ``floor(b N / 100)`` lowest-confidence steps (section 4.5).

    Ties at the cut are broken uniformly at random in expectation (a tied group of ``g`` steps with ``q`` positives
    that loses ``d`` gives ``d q / g`` deferred positives), so the result is deterministic and a constant
    confidence keeps the base rate. ``None`` per budget when no step is usable.

    Raises:
        ValueError: A budget is not an integer in [0, 100), or the arrays differ in length.
    """
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or not 0 <= b < 100:
            raise ValueError(f"budgets must be integer percentages in [0, 100), got {b!r}")
    y, p = checked_pair(y_true, y_prob)
    keep = ~np.isnan(y) & ~np.isnan(p)
    y, p = y[keep], p[keep]
    n = int(y.shape[0])
    if n == 0:
        return [None for _ in budgets]
    order = np.argsort(p, kind="stable")
    ys, ps = y[order], p[order]
    total = float(ys.sum())
    out: list[float | None] = []
    for b in budgets:
        k = (int(b) * n) // 100
        out.append((total - _deferred_positives(ys, ps, k)) / (n - k))
    return out


def _deferred_positives(ys: FloatArray, ps: FloatArray, k: int) -> float:
    """Expected positives among the ``k`` lowest of sorted ``ps``, ties at the cut broken uniformly at random."""
    if k == 0:
        return 0.0
    cut = ps[k - 1]
    below = ps < cut
    tied = ps == cut
    d = k - int(below.sum())
    return float(ys[below].sum()) + d * float(ys[tied].sum()) / int(tied.sum())


@dataclass(frozen=True, slots=True)
class TaskSuccess:
    """Task success per review budget ``m`` (section 4.5, table "tasksucc"); ``None`` where no trajectory qualifies.

    Attributes:
        n_dropped: Trajectories left out because a labelled step lacks a score.
        n_unlabelled: Trajectories left out because no step has a label.
    """

    budgets: tuple[int, ...]
    rates: tuple[float | None, ...]
    n_tasks: int
    n_dropped: int
    n_unlabelled: int = 0


def task_success(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    trajectories: npt.ArrayLike,
    budgets: Sequence[int] = REVIEW_BUDGETS,
) -> TaskSuccess:
    """Task success when each trajectory's ``m`` lowest-confidence steps are reviewed and fixed (section 4.5).

    A trajectory succeeds when every labelled step is correct after review (Mind2Web's Task Success; AMEX scores
    TAP steps only, appendix "Experimental Details"). Ties at the cut are averaged: ``d`` slots for a tied group of
    ``g`` steps with ``w`` wrong ones succeed with probability ``C(g - w, d - w) / C(g, d)``. Nothing is imputed.

    Raises:
        ValueError: A budget is negative or the arrays differ in length.
    """
    y, p = checked_pair(y_true, y_prob)
    return _task_success(y, p, trajectories, budgets, oracle=False)


def oracle_task_success(
    y_true: npt.ArrayLike, trajectories: npt.ArrayLike, budgets: Sequence[int] = REVIEW_BUDGETS
) -> TaskSuccess:
    """The Oracle row: the reviewer gets exactly the wrong steps, so a task succeeds iff it has at most ``m``.

    Raises:
        ValueError: A budget is negative or the arrays differ in length.
    """
    y = np.asarray(y_true, dtype=np.float64)
    return _task_success(y, np.zeros_like(y), trajectories, budgets, oracle=True)


def _task_success(
    y: FloatArray, p: FloatArray, trajectories: npt.ArrayLike, budgets: Sequence[int], *, oracle: bool
) -> TaskSuccess:
    ms = tuple(int(m) for m in budgets)
    if any(m < 0 for m in ms):
        raise ValueError(f"review budgets must be >= 0, got {list(budgets)}")
    ids = np.asarray(trajectories, dtype=object)
    if ids.shape != y.shape or p.shape != y.shape:
        raise ValueError(f"trajectories has shape {ids.shape}, expected {y.shape}")
    members: dict[object, list[int]] = {}
    for i, t in enumerate(ids.tolist()):
        members.setdefault(t, []).append(i)
    totals = np.zeros(len(ms))
    n_tasks = dropped = unlabelled = 0
    for idx in members.values():
        yt, pt = y[idx], p[idx]
        scored = ~np.isnan(yt)
        if not scored.any():
            unlabelled += 1
            continue
        yt, pt = yt[scored], pt[scored]
        if np.isnan(pt).any():
            dropped += 1
            continue
        n_tasks += 1
        wrong = int((yt == 0).sum())
        for j, m in enumerate(ms):
            totals[j] += float(wrong <= m) if oracle else _review_success(yt, pt, m)
    rates = tuple(float(v / n_tasks) if n_tasks else None for v in totals)
    return TaskSuccess(budgets=ms, rates=rates, n_tasks=n_tasks, n_dropped=dropped, n_unlabelled=unlabelled)


def _review_success(y: FloatArray, p: FloatArray, m: int) -> float:
    """Probability that reviewing the ``m`` lowest of ``p`` (random tie-breaking) covers every wrong step."""
    wrong = y == 0
    if not wrong.any():
        return 1.0
    if m == 0:
        return 0.0
    if m >= y.shape[0]:
        return 1.0
    cut = np.sort(p)[m - 1]
    if (wrong & (p > cut)).any():
        return 0.0
    tied = p == cut
    slots = m - int((p < cut).sum())
    g, w = int(tied.sum()), int((wrong & tied).sum())
    if w > slots:
        return 0.0
    prob = 1.0
    for i in range(w):  # C(g - w, slots - w) / C(g, slots) as a product of w ratios
        prob *= (slots - i) / (g - i)
    return prob
