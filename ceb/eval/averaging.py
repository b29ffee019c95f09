"""Multi-order stream averaging: cumulative ECE as the bank fills, averaged over stream orders (section 4.4)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ceb.eval._arrays import FloatArray, IntArray, checked_pair
from ceb.eval.lanes import ScoredLane
from ceb.eval.metrics import ece

__all__ = [
    "STREAM_CHECKPOINTS",
    "OrderCurves",
    "cumulative_ece",
    "stream_averaging",
    "task_count_grid",
]

STREAM_CHECKPOINTS: tuple[int, ...] = (30, 50, 150)
"""Task counts at which section 4.4 quotes the cumulative-ECE gap; always part of :func:`task_count_grid`."""


def task_count_grid(n_tasks: int, *, n_points: int = 50, checkpoints: Sequence[int] = STREAM_CHECKPOINTS) -> IntArray:
    """Task counts at which section 4.4's cumulative ECE is evaluated, shape ``(G,)``, increasing.

    ``round(linspace(1, n_tasks, min(n_points, n_tasks)))`` and the ``checkpoints <= n_tasks``; always holds 1 and
    ``n_tasks``, empty when ``n_tasks == 0``.

    Raises:
        ValueError: ``n_tasks < 0`` or ``n_points < 2``.
    """
    if n_tasks < 0:
        raise ValueError(f"n_tasks must be >= 0, got {n_tasks}")
    if n_points < 2:
        raise ValueError(f"n_points must be >= 2, got {n_points}")
    if n_tasks == 0:
        return np.zeros(0, dtype=np.int64)
    even = np.rint(np.linspace(1, n_tasks, min(n_points, n_tasks))).astype(np.int64)
    extra = np.array([c for c in checkpoints if 1 <= c <= n_tasks], dtype=np.int64)
    return np.unique(np.concatenate([even, extra]))


def cumulative_ece(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    positions: npt.ArrayLike,
    task_counts: npt.ArrayLike,
    *,
    n_bins: int = 10,
) -> FloatArray:
    """ECE of the usable steps with ``position < n`` for each ``n`` of ``task_counts`` (section 4.4), shape ``(G,)``.

    ``NaN`` where no usable step precedes a count. Raises ``ValueError`` on arrays of different lengths or invalid
    values.
    """
    y, p = checked_pair(y_true, y_prob)
    pos = np.asarray(positions)
    if pos.shape != y.shape:
        raise ValueError(f"positions has shape {pos.shape}, expected {y.shape}")
    keep = ~np.isnan(y) & ~np.isnan(p)
    y, p, pos = y[keep], p[keep], pos[keep]
    counts = np.asarray(task_counts, dtype=np.int64)
    out = np.full(counts.shape[0], np.nan)
    for i, n in enumerate(counts):
        prefix = pos < n
        if prefix.any():
            out[i] = ece(y[prefix], p[prefix], n_bins=n_bins)
    return out


@dataclass(frozen=True, slots=True, eq=False)
class OrderCurves:
    """Cumulative-ECE curves of one (stream, critic, method) over ``R`` stream orders and ``G`` task counts.

    Attributes:
        ece: Per order and grid point, shape ``(R, G)``; ``NaN`` where undefined.
        std: Sample standard deviation over orders (``ddof=1``), shape ``(G,)``; ``NaN`` with one order.
        reference: The method compared against (``"static"``), or ``None``.
        gap: ``ECE(reference) - ECE(method)`` order by order on the same steps, shape ``(len(gap_orders), G)``.
    """

    stream: str
    critic: str
    method: str
    orders: tuple[int, ...]
    task_counts: IntArray
    ece: FloatArray
    mean: FloatArray
    std: FloatArray
    reference: str | None
    gap_orders: tuple[int, ...]
    gap: FloatArray
    gap_mean: FloatArray
    gap_std: FloatArray

    def at(self, n: int) -> tuple[float, float, float, float] | None:
        """``(mean, std, gap_mean, gap_std)`` at task count ``n`` (NaN where undefined), or ``None`` off-grid."""
        hits = np.flatnonzero(self.task_counts == n)
        if hits.size == 0:
            return None
        i = int(hits[0])
        return (float(self.mean[i]), float(self.std[i]), float(self.gap_mean[i]), float(self.gap_std[i]))


def stream_averaging(
    lanes: Iterable[ScoredLane],
    *,
    n_bins: int = 10,
    n_points: int = 50,
    reference: str = "static",
) -> list[OrderCurves]:
    """Multi-order stream averaging (section 4.4): cumulative ECE per order, mean and std across orders.

    Per (stream, critic) the grid is :func:`task_count_grid` of its smallest lane, so every order and method is
    evaluated at the same counts; the gap to ``reference`` is taken order by order. Methods without a usable step
    are left out.
    """
    groups: dict[tuple[str, str], list[ScoredLane]] = {}
    for lane in lanes:
        groups.setdefault((lane.stream, lane.critic), []).append(lane)
    out: list[OrderCurves] = []
    for (stream, critic), group in groups.items():
        usable = [lane for lane in group if lane.usable.any()]
        if not usable:
            continue
        grid = task_count_grid(min(lane.n_tasks for lane in usable), n_points=n_points)
        by_method: dict[str, dict[int, FloatArray]] = {}
        for lane in usable:
            curve = cumulative_ece(lane.label, lane.score, lane.position, grid, n_bins=n_bins)
            by_method.setdefault(lane.method, {})[lane.order] = curve
        ref = by_method.get(reference)
        for method, curves in by_method.items():
            orders = tuple(sorted(curves))
            matrix = np.vstack([curves[o] for o in orders])
            mean, std = _mean_std(matrix)
            shared = tuple(o for o in orders if ref is not None and method != reference and o in ref)
            if shared and ref is not None:
                gap = np.vstack([ref[o] - curves[o] for o in shared])
            else:
                gap = np.zeros((0, grid.shape[0]))
            gap_mean, gap_std = _mean_std(gap)
            out.append(
                OrderCurves(
                    stream=stream,
                    critic=critic,
                    method=method,
                    orders=orders,
                    task_counts=grid,
                    ece=matrix,
                    mean=mean,
                    std=std,
                    reference=reference if shared else None,
                    gap_orders=shared,
                    gap=gap,
                    gap_mean=gap_mean,
                    gap_std=gap_std,
                )
            )
    return out


def _mean_std(matrix: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Column mean and sample std (ddof=1) over the non-NaN entries; NaN where too few, without warnings."""
    finite = ~np.isnan(matrix)
    count = finite.sum(axis=0)
    values = np.where(finite, matrix, 0.0)
    mean = np.full(matrix.shape[1], np.nan)
    std = np.full(matrix.shape[1], np.nan)
    some = count > 0
    mean[some] = values.sum(axis=0)[some] / count[some]
    two = count > 1
    if two.any():
        dev = np.where(finite, matrix - mean, 0.0)
        std[two] = np.sqrt((dev**2).sum(axis=0)[two] / (count[two] - 1))
    return mean, std
