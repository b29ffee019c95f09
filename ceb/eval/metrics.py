"""Calibration and discrimination of step confidences against held-out binary labels.

The paper (section 4.1) reports three numbers for every method: expected calibration error (ECE), the
Brier score and the area under the ROC curve (AUC). Each takes ``y_true``, the held-out labels (1 when the
step was correct), and ``y_prob``, the confidence ``ceb`` gave that step, a probability in [0, 1].

ECE bins the confidences the way scikit-learn's :func:`sklearn.calibration.calibration_curve` does, so
:func:`reliability_bins` reproduces that function's ``prob_true`` / ``prob_pred`` for the non-empty bins
and a reliability diagram drawn from it matches one drawn with scikit-learn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import numpy.typing as npt
from sklearn.metrics import brier_score_loss, roc_auc_score

__all__ = [
    "MetricSummary",
    "ReliabilityBins",
    "Strategy",
    "auroc",
    "brier",
    "ece",
    "reliability_bins",
    "summarize",
]

Strategy = Literal["uniform", "quantile"]
"""How :func:`reliability_bins` places bin edges: equal width on [0, 1], or equal mass over ``y_prob``."""

_STRATEGIES: tuple[str, ...] = get_args(Strategy)


@dataclass(frozen=True, slots=True, eq=False)
class ReliabilityBins:
    """Per-bin statistics behind ECE and a reliability diagram.

    Every array is read-only. Empty bins are kept, with a count of 0 and NaN means, so that index ``k``
    always refers to the interval between ``edges[k]`` and ``edges[k + 1]``.

    Attributes:
        edges: Bin edges, shape ``(n_bins + 1,)``, probabilities in [0, 1], non-decreasing. Bin ``k`` holds
            the confidences ``p`` with ``edges[k] < p <= edges[k + 1]``; bin 0 also holds ``p == edges[0]``
            and the last bin everything above its lower edge (see :func:`reliability_bins`).
        counts: Number of samples per bin, shape ``(n_bins,)``, integers summing to the sample count.
        mean_confidence: Mean ``y_prob`` per bin, shape ``(n_bins,)``; NaN where ``counts == 0``.
            Equals scikit-learn's ``prob_pred`` on the non-empty bins.
        accuracy: Fraction of positive labels per bin, shape ``(n_bins,)``; NaN where ``counts == 0``.
            Equals scikit-learn's ``prob_true`` on the non-empty bins.
    """

    edges: npt.NDArray[np.float64]
    counts: npt.NDArray[np.int64]
    mean_confidence: npt.NDArray[np.float64]
    accuracy: npt.NDArray[np.float64]

    @property
    def n_bins(self) -> int:
        """Number of bins, empty ones included."""
        return int(self.counts.shape[0])

    @property
    def nonempty(self) -> npt.NDArray[np.bool_]:
        """Boolean mask, shape ``(n_bins,)``, of the bins holding at least one sample."""
        return self.counts > 0


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """The paper's evaluation numbers (section 4.1) for one set of scored steps.

    Attributes:
        n: Number of scored steps.
        n_positive: Number of steps whose label is 1.
        positive_rate: ``n_positive / n``, in [0, 1].
        mean_score: Mean confidence, in [0, 1].
        ece: Expected calibration error, in [0, 1]; see :func:`ece`.
        brier: Brier score, in [0, 1]; see :func:`brier`.
        auroc: Area under the ROC curve, in [0, 1], or ``None`` when only one class is present.
        n_bins: Number of ECE bins used.
        strategy: ECE binning strategy used, ``"uniform"`` or ``"quantile"``.
    """

    n: int
    n_positive: int
    positive_rate: float
    mean_score: float
    ece: float
    brier: float
    auroc: float | None
    n_bins: int
    strategy: Strategy

    def to_dict(self) -> dict[str, int | float | str | None]:
        """Return the summary as plain Python values, ready for JSON (``auroc`` may be ``None``)."""
        return {
            "n": self.n,
            "n_positive": self.n_positive,
            "positive_rate": self.positive_rate,
            "mean_score": self.mean_score,
            "ece": self.ece,
            "brier": self.brier,
            "auroc": self.auroc,
            "n_bins": self.n_bins,
            "strategy": self.strategy,
        }


def reliability_bins(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> ReliabilityBins:
    """Bin confidences and compute each bin's count, mean confidence and accuracy.

    The bin edges and the rule that assigns a confidence to a bin are those of scikit-learn's
    ``calibration_curve``:

    - ``"uniform"``: ``edges = np.linspace(0, 1, n_bins + 1)``, so with 10 bins the bins are
      [0, 0.1], (0.1, 0.2], ..., (0.9, 1.0].
    - ``"quantile"``: ``edges = np.percentile(y_prob, np.linspace(0, 1, n_bins + 1) * 100)``, bins of
      (roughly) equal mass. Ties in ``y_prob`` can make edges coincide and bins empty.

    A confidence ``p`` goes to bin ``np.searchsorted(edges[1:-1], p, side="left")``: a value exactly on an
    inner edge goes to the LOWER bin, 0.0 goes to the first bin and 1.0 to the last. "Exactly" means
    equal to the float edge: ``np.linspace(0, 1, 11)[3]`` is ``0.30000000000000004``, so the literal
    ``0.3`` is below it and also lands in the lower bin, (0.2, 0.3].

    Sums are taken over the samples in sorted order of ``y_prob``, so the result does not depend on the
    order of the samples, to the last bit.

    Args:
        y_true: Binary labels, shape ``(N,)``, each 0 or 1 (bools and floats 0.0 / 1.0 accepted).
        y_prob: Confidences, shape ``(N,)``, probabilities in [0, 1].
        n_bins: Number of bins, at least 1.
        strategy: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass).

    Returns:
        The per-bin statistics, empty bins included.

    Raises:
        ValueError: If the inputs are not 1-D, differ in length or are empty, a label is not 0 or 1, a
            confidence is not finite or outside [0, 1], ``n_bins < 1`` or ``strategy`` is unknown.
    """
    labels, probs = _check_inputs(y_true, y_prob)
    _check_binning(n_bins, strategy)
    return _bin(labels, probs, n_bins, strategy)


def ece(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    *,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> float:
    """Expected calibration error (Guo et al., 2017, "On Calibration of Modern Neural Networks", Eq. 3).

    ``ECE = sum over non-empty bins b of (n_b / N) * |accuracy_b - mean_confidence_b|``, with the bins of
    :func:`reliability_bins` (scikit-learn ``calibration_curve`` edges; a value on an inner edge goes to
    the lower bin, e.g. [0, 0.1], (0.1, 0.2], ..., (0.9, 1.0] for 10 uniform bins). Reported in the paper's
    section 4.1. The value does not depend on the order of the samples.

    Args:
        y_true: Binary labels, shape ``(N,)``, each 0 or 1.
        y_prob: Confidences, shape ``(N,)``, probabilities in [0, 1].
        n_bins: Number of bins, at least 1. With one bin, ECE is ``|mean(y_true) - mean(y_prob)|``.
        strategy: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass).

    Returns:
        The ECE, in probability units, in [0, 1]; 0 is perfectly calibrated.

    Raises:
        ValueError: On invalid inputs, as for :func:`reliability_bins`.
    """
    return _ece_from_bins(reliability_bins(y_true, y_prob, n_bins, strategy))


def brier(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> float:
    """Brier score, the mean squared difference between confidence and label.

    Computed by :func:`sklearn.metrics.brier_score_loss` with ``pos_label=1``; reported in the paper's
    section 4.1.

    Args:
        y_true: Binary labels, shape ``(N,)``, each 0 or 1.
        y_prob: Confidences, shape ``(N,)``, probabilities in [0, 1].

    Returns:
        ``mean((y_prob - y_true) ** 2)``, in [0, 1]; lower is better.

    Raises:
        ValueError: If the inputs are not 1-D, differ in length or are empty, a label is not 0 or 1, or a
            confidence is not finite or outside [0, 1].
    """
    labels, probs = _check_inputs(y_true, y_prob)
    return _brier(labels, probs)


def auroc(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> float | None:
    """Area under the ROC curve: how well confidences rank correct steps above incorrect ones.

    Computed by :func:`sklearn.metrics.roc_auc_score`; reported as "AUC" in the paper's section 4.1.

    Args:
        y_true: Binary labels, shape ``(N,)``, each 0 or 1.
        y_prob: Confidences, shape ``(N,)``, probabilities in [0, 1].

    Returns:
        The AUROC, in [0, 1] (0.5 is chance), or ``None`` when ``y_true`` holds only one class, where the
        ROC curve is undefined.

    Raises:
        ValueError: If the inputs are not 1-D, differ in length or are empty, a label is not 0 or 1, or a
            confidence is not finite or outside [0, 1].
    """
    labels, probs = _check_inputs(y_true, y_prob)
    return _auroc(labels, probs)


def summarize(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    *,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> MetricSummary:
    """Compute the paper's evaluation numbers (section 4.1) and the counts behind them.

    Args:
        y_true: Binary labels, shape ``(N,)``, each 0 or 1.
        y_prob: Confidences, shape ``(N,)``, probabilities in [0, 1].
        n_bins: Number of ECE bins, at least 1.
        strategy: ECE binning, ``"uniform"`` or ``"quantile"``; see :func:`reliability_bins`.

    Returns:
        ECE, Brier and AUROC (``None`` with a single class), with the sample and positive counts.

    Raises:
        ValueError: On invalid inputs, as for :func:`reliability_bins`.
    """
    labels, probs = _check_inputs(y_true, y_prob)
    _check_binning(n_bins, strategy)
    n = int(labels.shape[0])
    n_positive = int(labels.sum())
    return MetricSummary(
        n=n,
        n_positive=n_positive,
        positive_rate=n_positive / n,
        mean_score=float(np.mean(probs)),
        ece=_ece_from_bins(_bin(labels, probs, n_bins, strategy)),
        brier=_brier(labels, probs),
        auroc=_auroc(labels, probs),
        n_bins=n_bins,
        strategy=strategy,
    )


def _bin(
    labels: npt.NDArray[np.int64], probs: npt.NDArray[np.float64], n_bins: int, strategy: Strategy
) -> ReliabilityBins:
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        # Written as calibration_curve writes it: linspace(0, 100, k) differs from linspace(0, 1, k) * 100
        # in the last bit for some k, and that can move a sample across an edge.
        edges = np.percentile(probs, np.linspace(0.0, 1.0, n_bins + 1) * 100)

    # Sorting fixes the order of the floating-point sums, so the result is independent of sample order.
    order = np.argsort(probs, kind="stable")
    sorted_probs = probs[order]
    sorted_labels = labels[order]
    bin_ids = np.searchsorted(edges[1:-1], sorted_probs, side="left")

    counts = np.bincount(bin_ids, minlength=n_bins).astype(np.int64)
    prob_sums = np.bincount(bin_ids, weights=sorted_probs, minlength=n_bins)
    label_sums = np.bincount(bin_ids, weights=sorted_labels, minlength=n_bins)

    filled = counts > 0
    mean_confidence = np.full(n_bins, np.nan)
    accuracy = np.full(n_bins, np.nan)
    mean_confidence[filled] = prob_sums[filled] / counts[filled]
    accuracy[filled] = label_sums[filled] / counts[filled]

    edges = edges.astype(np.float64)
    for array in (edges, counts, mean_confidence, accuracy):
        array.setflags(write=False)
    return ReliabilityBins(edges=edges, counts=counts, mean_confidence=mean_confidence, accuracy=accuracy)


def _ece_from_bins(bins: ReliabilityBins) -> float:
    filled = bins.nonempty
    counts = bins.counts[filled]
    gaps = np.abs(bins.accuracy[filled] - bins.mean_confidence[filled])
    # Weighting by the integer counts and dividing once keeps the result <= 1 under rounding; summing
    # float fractions n_b / N could exceed 1 by an ulp.
    return float(np.sum(counts * gaps) / np.sum(counts))


def _brier(labels: npt.NDArray[np.int64], probs: npt.NDArray[np.float64]) -> float:
    return float(brier_score_loss(labels, probs, pos_label=1))


def _auroc(labels: npt.NDArray[np.int64], probs: npt.NDArray[np.float64]) -> float | None:
    # roc_auc_score warns and returns NaN on a single class; None says "undefined" without a fake 0.5.
    if np.unique(labels).shape[0] < 2:
        return None
    return float(roc_auc_score(labels, probs))


def _check_binning(n_bins: int, strategy: str) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be an integer >= 1, got {n_bins!r}")
    if strategy not in _STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(map(repr, _STRATEGIES))}, got {strategy!r}")


def _check_inputs(
    y_true: npt.ArrayLike, y_prob: npt.ArrayLike
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    true = _as_1d(y_true, "y_true")
    prob = _as_1d(y_prob, "y_prob")
    if true.shape[0] != prob.shape[0]:
        raise ValueError(f"y_true and y_prob differ in length: {true.shape[0]} labels, {prob.shape[0]} probabilities")
    if true.shape[0] == 0:
        raise ValueError("y_true and y_prob are empty; the metrics need at least one sample")

    if true.dtype.kind not in "biuf":
        raise ValueError(f"y_true must hold the numbers 0 and 1, got dtype {true.dtype}")
    # NaN compares unequal to both, so it is caught here too.
    bad_labels = np.flatnonzero((true != 0) & (true != 1))
    if bad_labels.size:
        i = int(bad_labels[0])
        raise ValueError(f"y_true[{i}] = {true[i].item()!r} is not a binary label (0 or 1)")

    if prob.dtype.kind not in "biuf":
        raise ValueError(f"y_prob must hold numbers in [0, 1], got dtype {prob.dtype}")
    probs = prob.astype(np.float64)
    finite = np.isfinite(probs)
    bad_probs = np.flatnonzero(~finite | (probs < 0.0) | (probs > 1.0))
    if bad_probs.size:
        i = int(bad_probs[0])
        problem = "is outside [0, 1]" if finite[i] else "is not finite"
        raise ValueError(f"y_prob[{i}] = {probs[i].item()!r} {problem}")

    return true.astype(np.int64), probs


def _as_1d(values: npt.ArrayLike, name: str) -> npt.NDArray[Any]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array
