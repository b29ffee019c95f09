"""Paired differences on the same steps: each method against ``static`` and the best reference (beyond the paper).

"CEB beats Static" is a difference, so its interval comes from the same resampled trajectories for both
(:func:`ceb.eval.bootstrap.paired_differences`). The best reference is ``base-rate`` for ECE and Brier (the rankings
have neither) and, for AUROC, the reference with the highest point AUROC there (ties: :data:`REFERENCES` order).
A difference is ``method - other``; each side is scored on its own labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ceb.eval.bootstrap import PAIRED_METRICS, PairedDifference, paired_differences
from ceb.eval.calibration import MetricRow
from ceb.eval.lanes import POOLED, ScoredLane
from ceb.eval.reference_rules import BASE_RATE, RANK_ONLY, REFERENCES

__all__ = ["STATIC", "Comparison", "best_references", "paired_comparisons"]

STATIC = "static"
"""The method every other is compared with (the paper's bank-free critic)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """One metric's paired difference ``method - against`` on one (stream, critic), over ``n`` steps."""

    stream: str
    critic: str
    method: str
    against: str
    metric: str
    n: int
    n_trajectories: int
    difference: PairedDifference


def best_references(rows: Iterable[MetricRow]) -> dict[tuple[str, str], dict[str, str]]:
    """Per (stream, critic), the reference each metric is compared with (see the module docstring)."""
    by_pair: dict[tuple[str, str], dict[str, MetricRow]] = {}
    for r in rows:
        if r.summary is not None:
            by_pair.setdefault((r.stream, r.critic), {})[r.method] = r
    out: dict[tuple[str, str], dict[str, str]] = {}
    for key, refs in by_pair.items():
        chosen: dict[str, str] = {}
        if BASE_RATE in refs:
            chosen |= {"ece": BASE_RATE, "brier": BASE_RATE}
        ranked = []
        for i, name in enumerate(REFERENCES):
            summary = refs[name].summary if name in refs else None
            if summary is not None and summary.auroc is not None:
                ranked.append((summary.auroc, -i, name))  # -i: a tie goes to the earlier reference
        if ranked:
            chosen["auroc"] = max(ranked)[2]
        out[key] = chosen
    return out


def paired_comparisons(
    lanes: Sequence[ScoredLane],
    references: Sequence[ScoredLane],
    reference_rows: Sequence[MetricRow],
    *,
    n_bins: int = 10,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> list[Comparison]:
    """Every method against ``static`` and the best reference, per (stream, critic) in lane order, then pooled."""
    best = best_references(reference_rows)
    methods: dict[tuple[str, str], dict[str, ScoredLane]] = {}
    for lane in [*lanes, *references]:
        methods.setdefault((lane.stream, lane.critic), {})[lane.method] = lane
    by_critic: dict[str, list[str]] = {}
    for stream, critic in methods:
        by_critic.setdefault(critic, []).append(stream)
    blocks = [(stream, critic, [stream]) for stream, critic in methods]
    blocks += [(POOLED, critic, streams) for critic, streams in by_critic.items() if len(streams) > 1]
    out = []
    for stream, critic, streams in blocks:
        present = [m for m in methods[(streams[0], critic)] if m not in REFERENCES]
        for method in present:
            targets: dict[str, tuple[str, ...]] = {}
            if method != STATIC and all(STATIC in methods[(s, critic)] for s in streams):
                targets[STATIC] = PAIRED_METRICS
            for metric, ref in best.get((stream, critic), {}).items():
                targets[ref] = (*targets.get(ref, ()), metric)
            for against, metrics in targets.items():
                if against in RANK_ONLY:
                    metrics = tuple(m for m in metrics if m == "auroc")
                sample = _aligned([methods[(s, critic)] for s in streams], method, against)
                if sample is None:
                    continue
                y, a, yb, b, groups = sample
                diffs = paired_differences(
                    y, a, b, groups, n_boot=n_boot, seed=seed, level=level, n_bins=n_bins, metrics=metrics, labels_b=yb
                )
                n_traj = len(set(groups.tolist()))
                out += [Comparison(stream, critic, method, against, m, len(y), n_traj, d) for m, d in diffs.items()]
    return out


def _aligned(
    per_stream: Sequence[dict[str, ScoredLane]], method: str, against: str
) -> tuple[npt.NDArray[np.float64], ...] | None:
    """Labels and scores of both rows on the steps both have usable, over the given streams; ``None`` if none."""
    parts: list[list[npt.NDArray[Any]]] = [[], [], [], [], []]
    for lanes in per_stream:
        if method not in lanes or against not in lanes:
            return None  # pooling fewer streams would compare other steps
        a, b = lanes[method], lanes[against]
        index_b = {k: i for i, k in enumerate(zip(b.trajectory.tolist(), b.step.tolist(), strict=True))}
        usable_a, usable_b = a.usable.tolist(), b.usable.tolist()  # once: the property builds the whole mask
        ia, ib = [], []
        for i, key in enumerate(zip(a.trajectory.tolist(), a.step.tolist(), strict=True)):
            j = index_b.get(key)
            if j is not None and usable_a[i] and usable_b[j]:
                ia.append(i)
                ib.append(j)
        rows_a, rows_b = np.array(ia, dtype=np.intp), np.array(ib, dtype=np.intp)
        parts[0].append(a.label[rows_a])
        parts[1].append(a.score[rows_a])
        parts[2].append(b.label[rows_b])
        parts[3].append(b.score[rows_b])
        parts[4].append(np.array([f"{a.stream}\x1f{t}" for t in a.trajectory[rows_a]], dtype=object))
    joined = tuple(np.concatenate(p) for p in parts)
    return joined if joined[0].shape[0] else None
