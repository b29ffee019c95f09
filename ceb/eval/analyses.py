"""The analyses behind the paper's result tables and figures, as pure functions over a run's scored steps.

Every function here reads arrays (or :class:`Lane` objects built from the rows of ``scores.jsonl``) and
returns numbers; nothing is read from or written to disk. The metrics themselves (ECE, Brier, AUROC) come
from :mod:`ceb.eval.metrics`.

Conventions shared by all functions:

- Confidences ``y_prob`` and labels ``y_true`` are float arrays in which ``NaN`` marks a missing value: a
  step whose critic failed (``score`` is ``null`` in ``scores.jsonl``) or a step without a label. Such steps
  are left out of every metric and counted where the result has a field for it, never imputed.
- A *lane* is the stream of steps one method scored for one (stream, critic, order). Unless a function says
  otherwise, the single-order analyses use each (stream, critic, method)'s lowest order, normally order 0
  (the order of the input files), so that every step counts once; see :func:`base_lanes`.
- Per-stream analyses of a method that scored nothing on a stream (for example a baseline that is "not
  available" for it) return ``None`` in place of numbers; tables print those as ``n/a``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ceb.eval.bootstrap import BootstrapResult, bootstrap_metrics
from ceb.eval.metrics import MetricSummary, ece, summarize

__all__ = [
    "DEPTH_BUCKETS",
    "POOLED",
    "REVIEW_BUDGETS",
    "SELECTIVE_BUDGETS",
    "STREAM_CHECKPOINTS",
    "DepthBucket",
    "Lane",
    "LabelShift",
    "MetricRow",
    "OrderCurves",
    "TaskSuccess",
    "alt_label_names",
    "base_lanes",
    "comparable_masks",
    "cumulative_ece",
    "depth_calibration",
    "label_shift",
    "lanes_from_rows",
    "metric_rows",
    "oracle_task_success",
    "reference_method",
    "relabel",
    "selective_execution",
    "stream_averaging",
    "task_count_grid",
    "task_success",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

POOLED = "(pooled)"
"""Stream name of the rows that pool every stream of one (critic, method)."""

DEPTH_BUCKETS: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
"""Lower bounds of the within-trajectory depth buckets of Figure 1: steps 0, 1, 2, 3, 4 and 5 or later."""

SELECTIVE_BUDGETS: tuple[int, ...] = (0, 10, 25, 50)
"""Abstention budgets ``b`` of the selective execution table (percent of steps deferred; section 4.5)."""

REVIEW_BUDGETS: tuple[int, ...] = (0, 1, 2, 3)
"""Per-task review budgets ``m`` of the task success table (steps reviewed per trajectory; section 4.5)."""

STREAM_CHECKPOINTS: tuple[int, ...] = (30, 50, 150)
"""Task counts at which section 4.4 quotes the cumulative-ECE gap; always part of :func:`task_count_grid`."""

_REFERENCE_METHODS = ("ceb", "static")


# --- lanes ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Lane:
    """The steps one method scored for one (stream, critic, order), in stream order.

    Every array has shape ``(N,)``, one entry per row of ``scores.jsonl``, sorted by ``(position, step)``.

    Attributes:
        stream: Stream name.
        critic: Critic label (``""`` when the run has one critic).
        method: Method name.
        order: Stream order: 0 is the input-file order, ``r >= 1`` the seeded permutation ``r`` (section 4.4).
        trajectory: Trajectory ids (``str``), dtype object.
        position: 0-based position of each step's trajectory in this order of the stream.
        step: 0-based step index ``t`` within the trajectory.
        score: Confidence in [0, 1]; ``NaN`` where the critic failed.
        label: Ground-truth label 0.0 / 1.0; ``NaN`` where the step has none.
        alt_labels: A second label column per name (for example ``"judge"``, the LLM-as-judge relabelling of
            appendix A), each shaped like ``label`` with ``NaN`` where missing.
        errors: The distinct ``error`` messages of the failed steps, in the order first seen.
        input_tokens: ``cl100k_base`` tokens of the LLM critic's prompt for each step (``NaN`` where the row
            has no count: a baseline, counting off, or a row written before the field existed). Failed steps
            keep their count: the call was made.
        bank_tokens: The part of ``input_tokens`` the precedent section adds (0 without a bank), ``NaN`` where
            the row has no count.
    """

    stream: str
    critic: str
    method: str
    order: int
    trajectory: npt.NDArray[np.object_]
    position: IntArray
    step: IntArray
    score: FloatArray
    label: FloatArray
    alt_labels: Mapping[str, FloatArray]
    errors: tuple[str, ...]
    input_tokens: FloatArray
    bank_tokens: FloatArray

    @property
    def n_rows(self) -> int:
        """Number of rows (scored, failed and unlabeled steps)."""
        return int(self.score.shape[0])

    @property
    def n_failed(self) -> int:
        """Steps whose critic failed (no score)."""
        return int(np.isnan(self.score).sum())

    @property
    def n_unlabeled(self) -> int:
        """Scored steps without a label (failed steps are counted in :attr:`n_failed` only)."""
        return int((~np.isnan(self.score) & np.isnan(self.label)).sum())

    @property
    def usable(self) -> npt.NDArray[np.bool_]:
        """Mask, shape ``(N,)``, of the steps with both a score and a label: the ones metrics use."""
        return ~np.isnan(self.score) & ~np.isnan(self.label)

    @property
    def n_tasks(self) -> int:
        """Number of distinct trajectories in the lane."""
        return int(np.unique(self.position).shape[0]) if self.n_rows else 0

    @property
    def note(self) -> str | None:
        """Why the lane has no numbers (the first error of a lane with no scored step), else ``None``."""
        if np.isnan(self.score).all():
            return self.errors[0] if self.errors else "no scored step"
        return None


def lanes_from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Lane]:
    """Group the rows of ``scores.jsonl`` into lanes.

    Rows of different lanes may interleave. Rows written before the multi-order fields existed default to
    ``order = 0`` and ``critic = ""``; without ``position``, a trajectory's position is the rank of its first
    row within the lane. ``alt_labels`` may be absent or empty; ``input_tokens`` and ``bank_tokens`` may be
    absent or ``null`` (``NaN`` in the lane).

    Args:
        rows: Decoded rows with at least ``stream``, ``method``, ``trajectory``, ``step``, ``score`` and
            ``label`` (see :class:`ceb.pipeline.results.StepRow`).

    Returns:
        One lane per (stream, critic, method, order), in the order each lane first appears.

    Raises:
        KeyError: A row lacks one of the required fields.
    """
    grouped: dict[tuple[str, str, str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        key = (str(row["stream"]), str(row.get("critic") or ""), str(row["method"]), int(row.get("order") or 0))
        grouped.setdefault(key, []).append(row)
    return [_lane(key, lane_rows) for key, lane_rows in grouped.items()]


def _lane(key: tuple[str, str, str, int], rows: list[Mapping[str, Any]]) -> Lane:
    first_seen: dict[str, int] = {}
    for row in rows:
        first_seen.setdefault(str(row["trajectory"]), len(first_seen))
    position = np.array(
        [
            int(row["position"]) if row.get("position") is not None else first_seen[str(row["trajectory"])]
            for row in rows
        ],
        dtype=np.int64,
    )
    step = np.array([int(row["step"]) for row in rows], dtype=np.int64)
    # lexsort: last key is primary; it is stable, so duplicate (position, step) keep file order.
    order = np.lexsort((step, position))
    names = sorted({name for row in rows for name in (row.get("alt_labels") or {})})
    alt = {name: _floats([(row.get("alt_labels") or {}).get(name) for row in rows])[order] for name in names}
    errors: dict[str, None] = {}
    for row in rows:
        if row["score"] is None:
            errors.setdefault(str(row.get("error") or "no score"), None)
    for array in (position, step):
        array.setflags(write=False)
    stream, critic, method, lane_order = key
    return Lane(
        stream=stream,
        critic=critic,
        method=method,
        order=lane_order,
        trajectory=np.array([str(row["trajectory"]) for row in rows], dtype=object)[order],
        position=position[order],
        step=step[order],
        score=_floats([row["score"] for row in rows])[order],
        label=_floats([row["label"] for row in rows])[order],
        alt_labels=alt,
        errors=tuple(errors),
        input_tokens=_floats([row.get("input_tokens") for row in rows])[order],
        bank_tokens=_floats([row.get("bank_tokens") for row in rows])[order],
    )


def _floats(values: Sequence[Any]) -> FloatArray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def base_lanes(lanes: Iterable[Lane]) -> list[Lane]:
    """Keep, for each (stream, critic, method), the lane of its lowest order (normally 0, the file order).

    The single-order analyses (main table, depth, reliability, selective execution, task success, label
    shift) use these lanes so that each step is counted once even when a run scored several orders.
    """
    best: dict[tuple[str, str, str], Lane] = {}
    for lane in lanes:
        key = (lane.stream, lane.critic, lane.method)
        if key not in best or lane.order < best[key].order:
            best[key] = lane
    return list(best.values())


def alt_label_names(lanes: Iterable[Lane]) -> list[str]:
    """Sorted names of the alternative label columns present in any lane."""
    return sorted({name for lane in lanes for name in lane.alt_labels})


def relabel(lane: Lane, name: str) -> Lane:
    """Return ``lane`` with its labels replaced by the alternative label column ``name``.

    Steps without that label get ``NaN`` (left out of the metrics). The returned lane has no alternative
    labels of its own.
    """
    alt = lane.alt_labels.get(name)
    label = alt if alt is not None else np.full(lane.n_rows, np.nan)
    return replace(lane, label=label, alt_labels={})


def reference_method(methods: Iterable[str]) -> str:
    """The method whose rows supply a stream's step labels for the label-only analyses.

    Labels are a property of the step, but the methods that generate their own action (verbalized, PRO)
    carry labels of those actions; ``ceb`` (else ``static``) scores the frozen actions. Falls back to the
    alphabetically first method.

    Raises:
        ValueError: If ``methods`` is empty.
    """
    names = sorted(set(methods))
    if not names:
        raise ValueError("no methods to choose a reference from")
    for preferred in _REFERENCE_METHODS:
        if preferred in names:
            return preferred
    return names[0]


def comparable_masks(
    lanes: Sequence[Lane], *, whole_trajectories: bool
) -> tuple[list[npt.NDArray[np.bool_]], int, int]:
    """Restrict the lanes of one (stream, critic) to the steps every method can be judged on.

    The selective-execution and task-success tables compare methods at a shared base rate (``b = 0``,
    ``m = 0``), which needs a shared step set. A lane is *available* when it has a usable step (score and
    label); lanes that are not (a "not available" baseline) keep all their rows and come out as n/a.

    Args:
        lanes: Lanes of one (stream, critic), any methods.
        whole_trajectories: ``False``: keep the ``(trajectory, step)`` pairs usable in every available lane.
            ``True``: keep the trajectories whose every row is usable in every available lane (task success
            needs whole tasks).

    Returns:
        ``(masks, kept, total)``: one boolean mask per lane, shape ``(N_lane,)``; the number of kept units
        (steps or trajectories) and the number present in any available lane. When the available lanes
        share no unit at all (their step ids do not match), every mask keeps the lane's own usable rows and
        ``kept == 0``.
    """

    def units(lane: Lane) -> tuple[set[Any], set[Any]]:
        if whole_trajectories:
            present = set(lane.trajectory.tolist())
            return present, present - set(lane.trajectory[~lane.usable].tolist())
        keys = list(zip(lane.trajectory.tolist(), lane.step.tolist(), strict=True))
        return set(keys), {k for k, ok in zip(keys, lane.usable.tolist(), strict=True) if ok}

    available = [lane for lane in lanes if lane.usable.any()]
    seen: set[Any] = set()
    common: set[Any] | None = None
    for lane in available:
        present, good = units(lane)
        seen |= present
        common = good if common is None else common & good
    masks = []
    for lane in lanes:
        if lane not in available:
            masks.append(np.ones(lane.n_rows, dtype=bool))
        elif not common:
            masks.append(lane.usable.copy())
        elif whole_trajectories:
            masks.append(np.array([t in common for t in lane.trajectory.tolist()], dtype=bool))
        else:
            pairs = zip(lane.trajectory.tolist(), lane.step.tolist(), strict=True)
            masks.append(np.array([k in common for k in pairs], dtype=bool))
    return masks, len(common or ()), len(seen)


# --- 1. main table ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricRow:
    """ECE, Brier and AUROC of one (stream, critic, method) with bootstrap CIs (paper Table 1, section 4.2).

    Attributes:
        stream: Stream name, or :data:`POOLED` for the row that pools every stream of the method.
        critic: Critic label.
        method: Method name.
        n: Steps with both a score and a label (the metrics' sample).
        failed: Steps whose critic failed (left out).
        unlabeled: Scored steps without a label (left out).
        n_trajectories: Trajectories with at least one usable step (the bootstrap's resampling units).
        summary: The metrics, or ``None`` when ``n == 0``.
        ci: Percentile bootstrap intervals over trajectories, or ``None`` when ``n == 0``.
        note: Why there are no numbers (for example the first "not available" error), else ``None``.
    """

    stream: str
    critic: str
    method: str
    n: int
    failed: int
    unlabeled: int
    n_trajectories: int
    summary: MetricSummary | None
    ci: BootstrapResult | None
    note: str | None = None


def metric_rows(
    lanes: Iterable[Lane], *, n_bins: int = 10, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> list[MetricRow]:
    """The main table: metrics per (stream, critic, method), then pooled over streams per (critic, method).

    ECE uses ``n_bins`` equal-width bins (:func:`ceb.eval.metrics.ece`). Each lane's lowest order is used
    (:func:`base_lanes`). The pooled rows (``stream == POOLED``) exist only for a (critic, method) scored on
    more than one stream; they concatenate the steps of its streams and resample (stream, trajectory)
    pairs. A method without numbers on one of its streams (e.g. "not available" there) gets a pooled row
    without numbers, since pooling fewer streams would compare it on other steps. Streams are not pooled
    across critics: the paper compares methods within one critic's block.

    Args:
        lanes: The run's lanes.
        n_bins: ECE bins.
        n_boot: Bootstrap replicates per row (0 disables the intervals).
        seed: Seed of every row's bootstrap (each row starts from the same seed, so two methods scored on
            the same trajectories are resampled identically).
        level: Confidence level of the intervals, in (0, 1).

    Returns:
        The per-stream rows in lane order, then the pooled rows.
    """
    chosen = base_lanes(lanes)
    out = [_metric_row(lane.stream, lane.critic, lane.method, [lane], n_bins, n_boot, seed, level) for lane in chosen]
    by_method: dict[tuple[str, str], list[Lane]] = {}
    for lane in chosen:
        by_method.setdefault((lane.critic, lane.method), []).append(lane)
    for (critic, method), group in by_method.items():
        if len(group) < 2:
            continue
        missing = [lane.stream for lane in group if not lane.usable.any()]
        if missing:
            # Pooling over fewer streams than the other methods would compare different step sets.
            note = f"not pooled: no numbers on {', '.join(missing)}"
            failed = sum(lane.n_failed for lane in group)
            unlabeled = sum(lane.n_unlabeled for lane in group)
            out.append(MetricRow(POOLED, critic, method, 0, failed, unlabeled, 0, None, None, note))
        else:
            out.append(_metric_row(POOLED, critic, method, group, n_bins, n_boot, seed, level))
    return out


def _metric_row(
    stream: str, critic: str, method: str, lanes: list[Lane], n_bins: int, n_boot: int, seed: int, level: float
) -> MetricRow:
    masks = [lane.usable for lane in lanes]
    y = np.concatenate([lane.label[m] for lane, m in zip(lanes, masks, strict=True)])
    p = np.concatenate([lane.score[m] for lane, m in zip(lanes, masks, strict=True)])
    groups = np.concatenate(
        [
            np.array([f"{lane.stream}\x1f{t}" for t in lane.trajectory[m]], dtype=object)
            for lane, m in zip(lanes, masks, strict=True)
        ]
    )
    failed = sum(lane.n_failed for lane in lanes)
    unlabeled = sum(lane.n_unlabeled for lane in lanes)
    notes = [lane.note for lane in lanes if lane.note is not None]
    if y.shape[0] == 0:
        note = notes[0] if notes else "no step with both a score and a label"
        return MetricRow(stream, critic, method, 0, failed, unlabeled, 0, None, None, note)
    return MetricRow(
        stream=stream,
        critic=critic,
        method=method,
        n=int(y.shape[0]),
        failed=failed,
        unlabeled=unlabeled,
        n_trajectories=len(set(groups.tolist())),
        summary=summarize(y, p, n_bins=n_bins),
        ci=bootstrap_metrics(y, p, groups, n_boot=n_boot, seed=seed, level=level, n_bins=n_bins),
        note="; ".join(notes) if notes else None,
    )


# --- 2. multi-order stream averaging ----------------------------------------------------------------------


def task_count_grid(n_tasks: int, *, n_points: int = 50, checkpoints: Sequence[int] = STREAM_CHECKPOINTS) -> IntArray:
    """Task counts at which the cumulative ECE of section 4.4 is evaluated.

    The grid is ``round(linspace(1, n_tasks, min(n_points, n_tasks)))`` (every count when the stream has
    at most ``n_points`` trajectories), together with the ``checkpoints`` that are ``<= n_tasks``, sorted and
    without duplicates. It always holds 1 and ``n_tasks``.

    Args:
        n_tasks: Trajectories in the stream, ``>= 0``.
        n_points: Evenly spaced points, ``>= 2``.
        checkpoints: Extra task counts to include when within range.

    Returns:
        Increasing task counts, shape ``(G,)``; empty when ``n_tasks == 0``.

    Raises:
        ValueError: If ``n_tasks < 0`` or ``n_points < 2``.
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
    """Cumulative ECE over a stream as the bank fills (paper section 4.4, Figure "learning").

    The value at task count ``n`` is the ECE (equal width, ``n_bins`` bins) of every usable step of the first
    ``n`` trajectories of the stream, i.e. the steps with ``position < n``.

    Args:
        y_true: Labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        y_prob: Confidences in [0, 1], shape ``(N,)``, ``NaN`` when the critic failed.
        positions: 0-based position of each step's trajectory in the stream order, shape ``(N,)``.
        task_counts: Task counts ``n >= 1`` to evaluate at, shape ``(G,)``.
        n_bins: ECE bins.

    Returns:
        ECE per task count, shape ``(G,)``; ``NaN`` where no usable step precedes that count.

    Raises:
        ValueError: If the arrays differ in length or hold invalid labels or confidences.
    """
    y, p = _pair(y_true, y_prob)
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
    """Cumulative-ECE curves of one (stream, critic, method) over several stream orders (section 4.4).

    Attributes:
        stream: Stream name.
        critic: Critic label.
        method: Method name.
        orders: The orders averaged over, shape ``(R,)`` as a tuple.
        task_counts: The grid of :func:`task_count_grid`, shape ``(G,)``.
        ece: Cumulative ECE per order and grid point, shape ``(R, G)``; ``NaN`` where undefined.
        mean: Mean over orders, shape ``(G,)``.
        std: Sample standard deviation over orders (``ddof=1``), shape ``(G,)``; ``NaN`` with one order.
        reference: The method compared against (``"static"``), or ``None`` when there is no gap.
        gap_orders: Orders in which both this method and the reference were scored.
        gap: ``ECE(reference) - ECE(method)`` on the identical step stream (same stream, critic and order),
            shape ``(len(gap_orders), G)``; positive means this method is better calibrated.
        gap_mean: Mean gap over ``gap_orders``, shape ``(G,)``.
        gap_std: Sample standard deviation of the gap, shape ``(G,)``; ``NaN`` with one order.
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
    lanes: Iterable[Lane],
    *,
    n_bins: int = 10,
    n_points: int = 50,
    reference: str = "static",
) -> list[OrderCurves]:
    """Multi-order stream averaging (section 4.4): cumulative ECE per order, mean and std across orders.

    For every (stream, critic), the grid is :func:`task_count_grid` of the smallest number of trajectories
    any of its lanes holds, so every order and method is evaluated at the same task counts. Every order
    present is averaged (order 0 included). For each method other than ``reference``, the gap
    ``ECE(reference) - ECE(method)`` is taken order by order on the identical step stream, then averaged.
    Methods without a single usable step are left out.

    Args:
        lanes: The run's lanes, all orders.
        n_bins: ECE bins.
        n_points: Evenly spaced grid points (see :func:`task_count_grid`).
        reference: The bank-free method the gap is measured against.

    Returns:
        One entry per (stream, critic, method) with a usable step, in lane order.
    """
    groups: dict[tuple[str, str], list[Lane]] = {}
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


# --- 3. calibration by within-trajectory depth ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DepthBucket:
    """Calibration of the steps in one within-trajectory depth bucket (paper Figure 1).

    Attributes:
        label: The step indices of the bucket: ``"3"``, ``"2-4"`` or, for the last, open bucket, ``"5+"``.
        low: Smallest step index of the bucket.
        high: Largest step index, or ``None`` for the open last bucket.
        n: Usable steps in the bucket.
        ece: Equal-width ECE of the bucket, or ``None`` when ``n == 0``.
        mean_score: Mean confidence, or ``None`` when ``n == 0``.
        positive_rate: Fraction of label-1 steps, or ``None`` when ``n == 0``.
    """

    label: str
    low: int
    high: int | None
    n: int
    ece: float | None
    mean_score: float | None
    positive_rate: float | None


def depth_calibration(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    steps: npt.ArrayLike,
    *,
    buckets: Sequence[int] = DEPTH_BUCKETS,
    n_bins: int = 10,
) -> list[DepthBucket]:
    """ECE, mean confidence and positive rate per within-trajectory depth bucket (paper Figure 1).

    Bucket ``i`` holds the steps with ``buckets[i] <= step < buckets[i + 1]``; the last bucket is open
    (``step >= buckets[-1]``). The default buckets are the steps 0, 1, 2, 3, 4 and 5+.

    Args:
        y_true: Labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        y_prob: Confidences in [0, 1], shape ``(N,)``, ``NaN`` when the critic failed.
        steps: 0-based step index of each step within its trajectory, shape ``(N,)``.
        buckets: Strictly increasing lower bounds, the first 0.
        n_bins: ECE bins.

    Returns:
        One entry per bucket, empty buckets included (``n == 0``, numbers ``None``).

    Raises:
        ValueError: If ``buckets`` is empty, does not start at 0 or is not strictly increasing, or the
            arrays differ in length.
    """
    bounds = [int(b) for b in buckets]
    if not bounds or bounds[0] != 0 or any(b >= c for b, c in zip(bounds, bounds[1:], strict=False)):
        raise ValueError(f"buckets must be strictly increasing lower bounds starting at 0, got {list(buckets)}")
    y, p = _pair(y_true, y_prob)
    t = np.asarray(steps)
    if t.shape != y.shape:
        raise ValueError(f"steps has shape {t.shape}, expected {y.shape}")
    keep = ~np.isnan(y) & ~np.isnan(p)
    y, p, t = y[keep], p[keep], t[keep]
    out = []
    for i, low in enumerate(bounds):
        high = bounds[i + 1] - 1 if i + 1 < len(bounds) else None
        inside = (t >= low) if high is None else ((t >= low) & (t <= high))
        label = f"{low}+" if high is None else (str(low) if high == low else f"{low}-{high}")
        n = int(inside.sum())
        if n == 0:
            out.append(DepthBucket(label, low, high, 0, None, None, None))
            continue
        s = summarize(y[inside], p[inside], n_bins=n_bins)
        out.append(DepthBucket(label, low, high, n, s.ece, s.mean_score, s.positive_rate))
    return out


# --- 5. selective execution -------------------------------------------------------------------------------


def selective_execution(
    y_true: npt.ArrayLike, y_prob: npt.ArrayLike, budgets: Sequence[int] = SELECTIVE_BUDGETS
) -> list[float | None]:
    """GT positive rate among the retained steps after deferring the lowest-confidence ``b%`` (section 4.5).

    With ``N`` usable steps, ``k = floor(b * N / 100)`` steps are deferred: all steps whose confidence is
    below the ``k``-th lowest, and as many as needed from the group of steps tied at it. Ties are broken
    uniformly at random and the *expected* retained positive rate is returned: a tied group of ``g`` steps
    with ``q`` positives from which ``d`` are deferred contributes ``d * q / g`` deferred positives. The
    result is therefore deterministic, independent of the order of the steps, and a constant confidence
    keeps the base rate at every budget. ``b = 0`` gives the base rate.

    Args:
        y_true: Labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        y_prob: Confidences in [0, 1], shape ``(N,)``, ``NaN`` when the critic failed.
        budgets: Abstention budgets in percent, integers in [0, 100).

    Returns:
        Retained positive rate per budget, in [0, 1]; ``None`` for every budget when no step is usable.

    Raises:
        ValueError: If a budget is not an integer in [0, 100) or the arrays differ in length.
    """
    for b in budgets:
        if isinstance(b, bool) or not isinstance(b, int | np.integer) or not 0 <= b < 100:
            raise ValueError(f"budgets must be integer percentages in [0, 100), got {b!r}")
    y, p = _pair(y_true, y_prob)
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


# --- 6. task success under a review budget ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSuccess:
    """Final task success under a per-task review budget (paper section 4.5, table "tasksucc").

    Attributes:
        budgets: The review budgets ``m`` (steps reviewed per trajectory).
        rates: Success rate per budget, fractions in [0, 1]; ``None`` when no trajectory qualifies.
        n_tasks: Trajectories evaluated.
        n_dropped: Trajectories left out because a step lacks a label (or, for a method, a score).
    """

    budgets: tuple[int, ...]
    rates: tuple[float | None, ...]
    n_tasks: int
    n_dropped: int


def task_success(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    trajectories: npt.ArrayLike,
    budgets: Sequence[int] = REVIEW_BUDGETS,
) -> TaskSuccess:
    """Task success when each trajectory's ``m`` lowest-confidence steps are reviewed and fixed (section 4.5).

    A trajectory succeeds when every step is correct (label 1) after its ``m`` lowest-confidence steps are
    corrected by a reviewer, the Mind2Web Task Success criterion. ``m = 0`` is the un-reviewed base rate, and
    ``m >= T`` reviews the whole trajectory. Ties in confidence at the review cut are broken uniformly at
    random and the success *probability* is averaged: with ``d`` review slots left for a tied group of ``g``
    steps holding ``w`` wrong ones (and no wrong step above the group), the trajectory succeeds with
    probability ``C(g - w, d - w) / C(g, d)``.

    Unlabeled and failed steps: a trajectory with any step lacking a label or a score is dropped (counted in
    ``n_dropped``), since its success or its review order is undefined; no confidence or label is imputed.

    Args:
        y_true: Labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        y_prob: Confidences in [0, 1], shape ``(N,)``, ``NaN`` when the critic failed.
        trajectories: Trajectory id of each step, shape ``(N,)``.
        budgets: Review budgets ``m >= 0``.

    Returns:
        The success rate per budget with the task counts.

    Raises:
        ValueError: If a budget is negative or the arrays differ in length.
    """
    y, p = _pair(y_true, y_prob)
    return _task_success(y, p, trajectories, budgets, oracle=False)


def oracle_task_success(
    y_true: npt.ArrayLike, trajectories: npt.ArrayLike, budgets: Sequence[int] = REVIEW_BUDGETS
) -> TaskSuccess:
    """The Oracle row of the task success table: the reviewer is sent exactly the wrong steps (section 4.5).

    A trajectory succeeds under budget ``m`` iff it holds at most ``m`` wrong steps. Trajectories with an
    unlabeled step are dropped, as in :func:`task_success`.

    Args:
        y_true: Labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        trajectories: Trajectory id of each step, shape ``(N,)``.
        budgets: Review budgets ``m >= 0``.

    Returns:
        The oracle success rate per budget with the task counts.

    Raises:
        ValueError: If a budget is negative or the arrays differ in length.
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
    n_tasks = dropped = 0
    for idx in members.values():
        yt, pt = y[idx], p[idx]
        if np.isnan(yt).any() or np.isnan(pt).any():
            dropped += 1
            continue
        n_tasks += 1
        wrong = int((yt == 0).sum())
        for j, m in enumerate(ms):
            totals[j] += float(wrong <= m) if oracle else _review_success(yt, pt, m)
    rates = tuple(float(v / n_tasks) if n_tasks else None for v in totals)
    return TaskSuccess(budgets=ms, rates=rates, n_tasks=n_tasks, n_dropped=dropped)


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


# --- 7. label shift ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LabelShift:
    """Agreement of the strict labels with an alternative labelling (appendix A, table "judge-shift-main").

    All rates are fractions of ``n``, the steps carrying both labels.

    Attributes:
        n: Steps with both labels.
        strict_positive_rate: Fraction with strict label 1.
        alt_positive_rate: Fraction with alternative label 1.
        agreement: Fraction where the two labels agree.
        zero_to_one: Fraction with strict label 0 and alternative label 1 (relabelled productive).
        one_to_zero: Fraction with strict label 1 and alternative label 0.
    """

    n: int
    strict_positive_rate: float
    alt_positive_rate: float
    agreement: float
    zero_to_one: float
    one_to_zero: float


def label_shift(strict: npt.ArrayLike, alt: npt.ArrayLike) -> LabelShift | None:
    """Compare strict step labels with an alternative labelling (appendix A, LLM-as-judge label shift).

    Args:
        strict: Strict (reference-matching) labels, shape ``(N,)``, 0/1 or ``NaN`` when missing.
        alt: Alternative labels of the same steps, shape ``(N,)``, 0/1 or ``NaN`` when missing.

    Returns:
        The rates over the steps with both labels, or ``None`` when there is none.

    Raises:
        ValueError: If the arrays differ in shape or hold values other than 0, 1 and ``NaN``.
    """
    s = np.asarray(strict, dtype=np.float64)
    a = np.asarray(alt, dtype=np.float64)
    if s.shape != a.shape or s.ndim != 1:
        raise ValueError(f"strict and alt must be 1-D arrays of one shape, got {s.shape} and {a.shape}")
    for name, values in (("strict", s), ("alt", a)):
        bad = ~np.isnan(values) & (values != 0) & (values != 1)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{name}[{i}] = {values[i]!r} is not a binary label")
    both = ~np.isnan(s) & ~np.isnan(a)
    n = int(both.sum())
    if n == 0:
        return None
    s, a = s[both], a[both]
    return LabelShift(
        n=n,
        strict_positive_rate=float(s.mean()),
        alt_positive_rate=float(a.mean()),
        agreement=float((s == a).mean()),
        zero_to_one=float(((s == 0) & (a == 1)).mean()),
        one_to_zero=float(((s == 1) & (a == 0)).mean()),
    )


# --- helpers ----------------------------------------------------------------------------------------------


def _pair(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Both arrays as float64, checked: 1-D, one length, labels 0/1/NaN, confidences in [0, 1] or NaN."""
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_prob, dtype=np.float64)
    if y.ndim != 1 or y.shape != p.shape:
        raise ValueError(f"y_true and y_prob must be 1-D arrays of one length, got shapes {y.shape} and {p.shape}")
    bad = np.flatnonzero(~np.isnan(y) & (y != 0) & (y != 1))
    if bad.size:
        raise ValueError(f"y_true[{bad[0]}] = {y[bad[0]]!r} is not a binary label (0, 1 or NaN)")
    bad = np.flatnonzero(~np.isnan(p) & ((p < 0) | (p > 1)))
    if bad.size:
        raise ValueError(f"y_prob[{bad[0]}] = {p[bad[0]]!r} is outside [0, 1]")
    return y, p
