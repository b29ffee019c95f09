"""Scored lanes: the steps one method scored for one (stream, critic, order), built from ``scores.jsonl``.

Conventions of every analysis in :mod:`ceb.eval` (none touches the disk): ``y_prob`` and ``y_true`` are float
arrays, shape ``(N,)``, where ``NaN`` marks a failed score or a missing label; such steps are left out and counted,
never imputed. Single-order analyses use each (stream, critic, method)'s lowest order (:func:`base_lanes`), so a
step counts once. A method that scored nothing on a stream gives ``None`` there, printed ``n/a``.
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
    """The steps one method scored for one (stream, critic, order), sorted by ``(position, step)``; arrays ``(N,)``.

    Attributes:
        critic: Critic label (``""`` when the run has one critic).
        order: 0 is the input-file order, ``r >= 1`` the seeded permutation ``r`` (section 4.4).
        position: Position of each step's trajectory in this order.
        alt_labels: Other label columns by name (``"judge"``, appendix A), ``NaN`` where missing.
        errors: The distinct errors of the failed steps, first seen first.
        input_tokens: ``cl100k_base`` tokens of the critic's prompt; ``NaN`` without a count (failed steps keep it).
        bank_tokens: The part of ``input_tokens`` the precedent section adds.
        n_reused: Rows copied from another order (:mod:`ceb.pipeline.pool`).
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
        """Rows: scored, failed and unlabelled steps."""
        return int(self.score.shape[0])

    @property
    def n_failed(self) -> int:
        """Steps whose critic failed (no score)."""
        return int(np.isnan(self.score).sum())

    @property
    def n_unlabeled(self) -> int:
        """Scored steps without a label (failed steps count in :attr:`n_failed` only)."""
        return int((~np.isnan(self.score) & np.isnan(self.label)).sum())

    @property
    def usable(self) -> npt.NDArray[np.bool_]:
        """Mask, shape ``(N,)``, of the steps with both a score and a label."""
        return ~np.isnan(self.score) & ~np.isnan(self.label)

    @property
    def n_tasks(self) -> int:
        """Number of distinct trajectories in the lane."""
        return int(np.unique(self.position).shape[0]) if self.n_rows else 0

    @property
    def note(self) -> str | None:
        """Why the lane has no numbers (the first error of a lane with no score), else ``None``."""
        if np.isnan(self.score).all():
            return self.errors[0] if self.errors else "no scored step"
        return None


def lanes_from_rows(rows: Iterable[StepRow]) -> list[ScoredLane]:
    """One lane per (stream, critic, method, order), sorted by that key, rows put in (position, step) order.

    The order is a function of the rows' content, not of how they were written (one process, merged shards, a
    resume), so sums over lanes and the report's order are too.
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
    """Each (stream, critic, method)'s lane of the lowest order (normally 0, the file order)."""
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
    """``lane`` with its labels replaced by the alternative column ``name`` (``NaN`` where missing)."""
    alt = lane.alt_labels.get(name)
    label = alt if alt is not None else np.full(lane.n_rows, np.nan)
    return replace(lane, label=label, alt_labels={})


def reference_method(methods: Iterable[str]) -> str:
    """``ceb``, else ``static``, else the first name: the method whose rows supply a stream's labels.

    The methods that generate their own action (verbalized, PRO) carry that action's labels.

    Raises:
        ValueError: ``methods`` is empty.
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
    """Masks of the steps every available method of one (stream, critic) can be judged on.

    A lane is available when it has a usable step; the others keep all rows (and print n/a).

    Args:
        lanes: Lanes of one (stream, critic), any methods.
        whole_trajectories: ``False``: keep the ``(trajectory, step)`` pairs usable in every available lane.
            ``True``: keep the labelled rows of the trajectories whose every labelled row has a score in every
            available lane (task success: an unlabelled step neither fails nor drops its task).

    Returns:
        ``(masks, kept, total)``: a mask per lane, the units kept and the units present. When the lanes share
        no unit, each keeps its own usable rows and ``kept == 0``.
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
    """The catalogue's table name of ``method`` (``"ptrue"`` -> ``"P(True)"``), or ``method`` when unknown."""
    try:
        return resolve_method(method).display
    except ConfigError:
        return method


def method_sort_key(method: str) -> tuple[int, int, str]:
    """The catalogue's row order (:meth:`~ceb.stages.methods.MethodSpec.sort_key`); unknowns last."""
    try:
        return resolve_method(method).sort_key()
    except ConfigError:
        return (len(GROUPS), 0, method)
