"""Reference rows: rules without a model, scored beside the methods on the same labelled steps (beyond the paper).

Each scores the steps of its (stream, critic)'s reference method (:func:`ceb.eval.lanes.reference_method`, order 0):

- ``base-rate``: a constant at the stream's own positive rate, read from the labels (an oracle): ECE 0, AUROC 0.5.
- ``step-position``: ``1 / (1 + t)``; label-free, a ranking: AUROC only.
- ``repetition-flag``: ``1 - rho_t`` (:func:`ceb.stages.critic.config_repetition_flag` under the run's settings),
  from the actions of the stream files ``config.json`` records; AUROC only (as a probability it claims 0 or 1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ceb.eval.bootstrap import BootstrapResult
from ceb.eval.calibration import MetricRow, metric_rows
from ceb.eval.lanes import ScoredLane, reference_method
from ceb.pipeline.rundir import RunDir
from ceb.stages.critic import config_repetition_flag

__all__ = [
    "BASE_RATE",
    "RANK_ONLY",
    "REFERENCES",
    "REFERENCE_NOTES",
    "REPETITION_FLAG",
    "STEP_POSITION",
    "RepetitionFlags",
    "is_reference",
    "reference_label",
    "reference_lanes",
    "reference_rows",
    "repetition_flags",
]

BASE_RATE = "base-rate"
"""Method name of the label-oracle constant reference."""
STEP_POSITION = "step-position"
"""Method name of the "earlier steps are more productive" reference."""
REPETITION_FLAG = "repetition-flag"
"""Method name of the repetition-flag-alone reference."""
REFERENCES = (BASE_RATE, STEP_POSITION, REPETITION_FLAG)
"""Every reference, in table order."""
RANK_ONLY = frozenset({STEP_POSITION, REPETITION_FLAG})
"""References that are rankings, not probabilities: AUROC only, ECE and Brier not applicable."""
REFERENCE_NOTES = {
    BASE_RATE: "a constant at the stream's own positive rate, read from the labels (an oracle): ECE 0 and AUROC "
    "0.5 by construction on its stream",
    STEP_POSITION: "1 / (1 + t), earlier steps ranked higher, label-free; a ranking, so AUROC only",
    REPETITION_FLAG: "1 - rho_t, the repetition flag alone (the run's window and prefix), label-free; a 0/1 rule, "
    "so AUROC only",
}
"""One line per reference, for the notes under tables."""

_LABELS = {
    BASE_RATE: "reference: base rate (oracle)",
    STEP_POSITION: "reference: step position",
    REPETITION_FLAG: "reference: repetition flag",
}


def is_reference(method: str) -> bool:
    """Whether ``method`` names a reference row (never a method: it never competes)."""
    return method in REFERENCES


def reference_label(method: str) -> str:
    """The table label of a reference row (``"reference: step position"``)."""
    return _LABELS[method]


@dataclass(frozen=True, slots=True)
class RepetitionFlags:
    """``(stream, trajectory, step) -> rho_t``, and per stream without flags why (its files could not be read)."""

    flags: Mapping[tuple[str, str, int], bool] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)


def repetition_flags(run: RunDir) -> RepetitionFlags:
    """Every step's ``rho_t`` from the run's recorded stream files; never raises (``missing`` says why not)."""
    streams, missing = run.recorded_trajectories()
    if "*" in missing:
        return RepetitionFlags(missing=missing)
    ceb = run.recorded_or_default()[0].ceb
    window = ceb.repetition_window
    flags: dict[tuple[str, str, int], bool] = {}
    for stream, trajectories in streams.items():
        for traj in trajectories:
            actions = [s.action for s in traj.steps]
            for t, action in enumerate(actions):
                earlier = actions[max(0, t - window) : t] if window > 0 else []
                flags[(stream, traj.id, t)] = config_repetition_flag(earlier, action, ceb)
    return RepetitionFlags(flags, missing)


def reference_lanes(lanes: Iterable[ScoredLane], flags: RepetitionFlags) -> list[ScoredLane]:
    """The rules as lanes, one per (stream, critic) and :data:`REFERENCES` name, scoring each labelled step.

    Unlabelled steps, and steps without a flag, get ``NaN``.
    """
    by_pair: dict[tuple[str, str], dict[str, ScoredLane]] = {}
    for lane in lanes:
        by_pair.setdefault((lane.stream, lane.critic), {})[lane.method] = lane
    out = []
    for (stream, _), methods in by_pair.items():
        source = methods[reference_method(m for m in methods if not is_reference(m))]
        labelled = ~np.isnan(source.label)
        if not labelled.any():
            continue
        rate = float(source.label[labelled].mean())
        scores = {
            BASE_RATE: np.full(source.n_rows, rate),
            STEP_POSITION: 1.0 / (1.0 + source.step.astype(np.float64)),
        }
        if stream not in flags.missing and "*" not in flags.missing:
            rho = [
                flags.flags.get((stream, str(t), int(s))) for t, s in zip(source.trajectory, source.step, strict=True)
            ]
            if any(r is not None for r in rho):
                scores[REPETITION_FLAG] = np.array([np.nan if r is None else 1.0 - r for r in rho], dtype=np.float64)
        for name, score in scores.items():
            score = np.where(labelled, score, np.nan)
            out.append(replace(source, method=name, score=score, errors=(), n_reused=0))
    return out


def reference_rows(
    lanes: Sequence[ScoredLane], *, n_bins: int = 10, n_boot: int = 1000, seed: int = 0, level: float = 0.95
) -> list[MetricRow]:
    """Metric rows of :func:`reference_lanes` (per stream, then pooled); :data:`RANK_ONLY` keep AUROC only."""
    out = []
    for row in metric_rows(lanes, n_bins=n_bins, n_boot=n_boot, seed=seed, level=level):
        if row.method in RANK_ONLY and row.summary is not None:
            nan = float("nan")
            summary = replace(row.summary, ece=nan, brier=nan, mean_score=nan)
            ci: BootstrapResult | None = None if row.ci is None else replace(row.ci, ece=None, brier=None)
            row = replace(row, summary=summary, ci=ci)
        out.append(row)
    return out
