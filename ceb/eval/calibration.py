"""Calibration analyses: Table 1's metric rows (section 4.2), depth (Figure 1), label shift (appendix A)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ceb.eval._arrays import checked_pair
from ceb.eval.bootstrap import BootstrapResult, bootstrap_metrics
from ceb.eval.lanes import POOLED, ScoredLane, base_lanes
from ceb.eval.metrics import MetricSummary, summarize

__all__ = [
    "DEPTH_BUCKETS",
    "DepthBucket",
    "LabelShift",
    "MetricRow",
    "depth_calibration",
    "label_shift",
    "metric_rows",
]

DEPTH_BUCKETS: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
"""Lower bounds of the within-trajectory depth buckets of Figure 1: steps 0, 1, 2, 3, 4 and 5 or later."""


@dataclass(frozen=True, slots=True)
class MetricRow:
    """ECE, Brier and AUROC of one (stream, critic, method) with bootstrap intervals (paper Table 1).

    Attributes:
        stream: Stream name, or :data:`POOLED`.
        n: Steps with both a score and a label (the sample).
        n_trajectories: Trajectories with a usable step (the resampling units).
        summary: The metrics, ``None`` when ``n == 0``.
        ci: Intervals over trajectories, ``None`` when ``n == 0``.
        note: Why there are no numbers, else ``None``.
        order: Stream order of the steps; on a pooled row the one its lanes share, else ``None``.
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
    order: int | None = None


def metric_rows(
    lanes: Iterable[ScoredLane], *, n_bins: int = 10, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> list[MetricRow]:
    """Table 1: a row per lowest-order lane, then per (critic, method) pooled over its streams.

    A pooled row concatenates the streams' steps and resamples (stream, trajectory) pairs; it exists for a
    method scored on several streams, without numbers when one of them has none (pooling fewer streams would
    compare other steps). Streams are never pooled across critics. Every row's bootstrap starts from ``seed``, so
    methods on the same trajectories are resampled identically.
    """
    chosen = base_lanes(lanes)
    out = [_metric_row(lane.stream, lane.critic, lane.method, [lane], n_bins, n_boot, seed, level) for lane in chosen]
    by_method: dict[tuple[str, str], list[ScoredLane]] = {}
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
            order = _shared_order(group)
            out.append(MetricRow(POOLED, critic, method, 0, failed, unlabeled, 0, None, None, note, order))
        else:
            out.append(_metric_row(POOLED, critic, method, group, n_bins, n_boot, seed, level))
    return out


def _metric_row(
    stream: str, critic: str, method: str, lanes: list[ScoredLane], n_bins: int, n_boot: int, seed: int, level: float
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
        return MetricRow(stream, critic, method, 0, failed, unlabeled, 0, None, None, note, _shared_order(lanes))
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
        order=_shared_order(lanes),
    )


def _shared_order(lanes: Sequence[ScoredLane]) -> int | None:
    orders = {lane.order for lane in lanes}
    return orders.pop() if len(orders) == 1 else None


@dataclass(frozen=True, slots=True)
class DepthBucket:
    """Calibration of the steps in one depth bucket (Figure 1); ``label`` ``"3"``, ``"2-4"`` or open ``"5+"``.

    ``high`` is ``None`` for the open bucket; the numbers are ``None`` when ``n == 0``.
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
    """ECE, mean confidence and positive rate per within-trajectory depth bucket (Figure 1).

    Bucket ``i`` holds ``buckets[i] <= step < buckets[i + 1]``, the last one open; empty buckets are kept.

    Raises:
        ValueError: ``buckets`` is empty, does not start at 0 or does not increase, or the arrays differ in length.
    """
    bounds = [int(b) for b in buckets]
    if not bounds or bounds[0] != 0 or any(b >= c for b, c in zip(bounds, bounds[1:], strict=False)):
        raise ValueError(f"buckets must be strictly increasing lower bounds starting at 0, got {list(buckets)}")
    y, p = checked_pair(y_true, y_prob)
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


@dataclass(frozen=True, slots=True)
class LabelShift:
    """Agreement of strict and alternative labels (appendix A), as fractions of the ``n`` steps with both."""

    n: int
    strict_positive_rate: float
    alt_positive_rate: float
    agreement: float
    zero_to_one: float
    one_to_zero: float


def label_shift(strict: npt.ArrayLike, alt: npt.ArrayLike) -> LabelShift | None:
    """Compare strict labels with alternative ones (appendix A); ``None`` when no step carries both.

    Raises:
        ValueError: The arrays differ in shape or hold values other than 0, 1 and ``NaN``.
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
