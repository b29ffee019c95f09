"""Scored lanes: the steps one method scored for one (stream, critic, order), built from ``scores.jsonl``.

The analyses of :mod:`ceb.eval.calibration`, :mod:`ceb.eval.averaging` and :mod:`ceb.eval.deployment` read
arrays or lanes and return numbers; nothing there touches the disk. Conventions they share:

- Confidences ``y_prob`` and labels ``y_true`` are float arrays in which ``NaN`` marks a missing value: a
  step whose critic failed (``score`` is ``null`` in ``scores.jsonl``) or a step without a label. Such steps
  are left out of every metric and counted where the result has a field for it, never imputed.
- A *lane* (:class:`ScoredLane`; the running :class:`ceb.pipeline.lane.Lane` wrote it) is the stream of steps one
  method scored for one (stream, critic, order). Unless a function says otherwise, the single-order analyses use each
  (stream, critic, method)'s lowest order, normally order 0 (the order of the input files), so that every step counts
  once; see :func:`base_lanes`.
- Per-stream analyses of a method that scored nothing on a stream (for example a baseline that is "not
  available" for it) return ``None`` in place of numbers; tables print those as ``n/a``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from ceb.errors import ConfigError
from ceb.eval._arrays import FloatArray, IntArray
from ceb.pipeline.results import StepRow
from ceb.stages.methods import GROUPS, resolve_method

__all__ = [
    "POOLED",
    "ScoredLane",
    "alt_label_names",
    "base_lanes",
    "comparable_masks",
    "lanes_from_rows",
    "method_label",
    "method_sort_key",
    "reference_method",
    "relabel",
]

POOLED = "(pooled)"
"""Stream name of the rows that pool every stream of one (critic, method)."""


_REFERENCE_METHODS = ("ceb", "static")


@dataclass(frozen=True, slots=True, eq=False)
class ScoredLane:
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
        n_reused: Rows copied from another order (``reused_from``, :mod:`ceb.pipeline.pool`); they are rows of
            this lane like any other, counted here only so that a report can say how many were not asked anew.
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
    n_reused: int = 0

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


def lanes_from_rows(rows: Iterable[StepRow]) -> list[ScoredLane]:
    """Group the typed rows of ``scores.jsonl`` (:func:`ceb.pipeline.read_step_rows`) into lanes.

    Rows of different lanes may interleave; within a lane they are put in (position, step) order.
    ``input_tokens`` and ``bank_tokens`` may be ``None`` (``NaN`` in the lane).

    Returns:
        One lane per (stream, critic, method, order), sorted by that key: a function of the rows' content, not
        of the order they were written in (one process, shards merged, a resume), so that everything summed over
        lanes (the pooled rows) is summed in one order and a report lists streams and methods in one order.
    """
    grouped: dict[tuple[str, str, str, int], list[StepRow]] = {}
    for row in rows:
        grouped.setdefault((row.stream, row.critic, row.method, row.order), []).append(row)
    return [_lane(key, grouped[key]) for key in sorted(grouped)]


def _lane(key: tuple[str, str, str, int], rows: list[StepRow]) -> ScoredLane:
    position = np.array([row.position for row in rows], dtype=np.int64)
    step = np.array([row.step for row in rows], dtype=np.int64)
    # lexsort: last key is primary; it is stable, so duplicate (position, step) keep file order.
    order = np.lexsort((step, position))
    by_name = [{a["name"]: a["label"] for a in row.alt_labels} for row in rows]
    names = sorted({name for labels in by_name for name in labels})
    alt = {name: _floats([labels.get(name) for labels in by_name])[order] for name in names}
    errors: dict[str, None] = {}
    for row in rows:
        if row.status in ("failed", "not_available"):
            errors.setdefault(row.error or "no score", None)
    for array in (position, step):
        array.setflags(write=False)
    stream, critic, method, lane_order = key
    return ScoredLane(
        stream=stream,
        critic=critic,
        method=method,
        order=lane_order,
        trajectory=np.array([row.trajectory for row in rows], dtype=object)[order],
        position=position[order],
        step=step[order],
        score=_floats([row.score for row in rows])[order],
        label=_floats([row.label for row in rows])[order],
        alt_labels=alt,
        errors=tuple(errors),
        input_tokens=_floats([row.input_tokens for row in rows])[order],
        bank_tokens=_floats([row.bank_tokens for row in rows])[order],
        n_reused=sum(row.reused_from is not None for row in rows),
    )


def _floats(values: Sequence[Any]) -> FloatArray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


def base_lanes(lanes: Iterable[ScoredLane]) -> list[ScoredLane]:
    """Keep, for each (stream, critic, method), the lane of its lowest order (normally 0, the file order).

    The single-order analyses (main table, depth, reliability, selective execution, task success, label
    shift) use these lanes so that each step is counted once even when a run scored several orders.
    """
    best: dict[tuple[str, str, str], ScoredLane] = {}
    for lane in lanes:
        key = (lane.stream, lane.critic, lane.method)
        if key not in best or lane.order < best[key].order:
            best[key] = lane
    return list(best.values())


def alt_label_names(lanes: Iterable[ScoredLane]) -> list[str]:
    """Sorted names of the alternative label columns present in any lane."""
    return sorted({name for lane in lanes for name in lane.alt_labels})


def relabel(lane: ScoredLane, name: str) -> ScoredLane:
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
    lanes: Sequence[ScoredLane], *, whole_trajectories: bool
) -> tuple[list[npt.NDArray[np.bool_]], int, int]:
    """Restrict the lanes of one (stream, critic) to the steps every method can be judged on.

    The selective-execution and task-success tables compare methods at a shared base rate (``b = 0``,
    ``m = 0``), which needs a shared step set. A lane is *available* when it has a usable step (score and
    label); lanes that are not (a "not available" baseline) keep all their rows and come out as n/a.

    Args:
        lanes: Lanes of one (stream, critic), any methods.
        whole_trajectories: ``False``: keep the ``(trajectory, step)`` pairs usable in every available lane.
            ``True``: keep the labelled rows of the trajectories that have a labelled row and whose every
            labelled row has a score in every available lane (task success judges a task on its scored steps,
            paper appendix "Experimental Details": AMEX scores TAP steps only, so an unlabelled step neither
            fails nor drops its task).

    Returns:
        ``(masks, kept, total)``: one boolean mask per lane, shape ``(N_lane,)``; the number of kept units
        (steps or trajectories) and the number present in any available lane. When the available lanes
        share no unit at all (their step ids do not match), every mask keeps the lane's own usable rows and
        ``kept == 0``.
    """

    def units(lane: ScoredLane) -> tuple[set[Any], set[Any]]:
        if whole_trajectories:
            labelled = ~np.isnan(lane.label)
            present = set(lane.trajectory[labelled].tolist())
            return present, present - set(lane.trajectory[labelled & np.isnan(lane.score)].tolist())
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
            kept_task = np.array([t in common for t in lane.trajectory.tolist()], dtype=bool)
            masks.append(kept_task & ~np.isnan(lane.label))
        else:
            pairs = zip(lane.trajectory.tolist(), lane.step.tolist(), strict=True)
            masks.append(np.array([k in common for k in pairs], dtype=bool))
    return masks, len(common or ()), len(seen)


def method_label(method: str) -> str:
    """The table name of ``method`` from the catalogue (``"ptrue"`` -> ``"P(True)"``), or ``method`` when unknown."""
    try:
        return resolve_method(method).display
    except ConfigError:
        return method


def method_sort_key(method: str) -> tuple[int, int, str]:
    """Sort key of the paper's row order: baselines, Static, CEB, ablations, oracle, sweep cells, then unknowns.

    The order is the catalogue's (:meth:`~ceb.stages.methods.MethodSpec.sort_key`).
    """
    try:
        return resolve_method(method).sort_key()
    except ConfigError:
        return (len(GROUPS), 0, method)
