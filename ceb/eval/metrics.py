"""ECE, Brier and AUROC of step confidences ``y_prob`` in [0, 1] against binary labels ``y_true`` (section 4.1).

Bins are those of scikit-learn's :func:`sklearn.calibration.calibration_curve`, so :func:`reliability_bins` gives its
``prob_true`` / ``prob_pred`` on the non-empty bins. Every function raises ``ValueError`` when the inputs are not
1-D, differ in length or are empty, a label is not 0 or 1, or a confidence is not finite or outside [0, 1].
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
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
"""Bin edges: equal width on [0, 1], or equal mass over ``y_prob``."""

_STRATEGIES: tuple[str, ...] = get_args(Strategy)


@dataclass(frozen=True, slots=True, eq=False)
class ReliabilityBins:
    """Per-bin statistics behind ECE and a reliability diagram; read-only arrays, empty bins kept.

    Attributes:
        edges: Shape ``(n_bins + 1,)``; bin ``k`` holds ``edges[k] < p <= edges[k + 1]`` (bin 0 also ``edges[0]``).
        counts: Samples per bin, shape ``(n_bins,)``.
        mean_confidence: Mean ``y_prob`` per bin (scikit-learn's ``prob_pred``); NaN where empty.
        accuracy: Fraction of label 1 per bin (scikit-learn's ``prob_true``); NaN where empty.
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
        """Mask, shape ``(n_bins,)``, of the bins holding a sample."""
        return self.counts > 0


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """The paper's evaluation numbers (section 4.1) for one set of scored steps; ``auroc`` ``None`` on one class."""

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
        """Plain JSON values."""
        return asdict(self)


def reliability_bins(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> ReliabilityBins:
    """Each bin's count, mean confidence and accuracy, with ``calibration_curve``'s edges and rule.

    ``"uniform"``: ``np.linspace(0, 1, n_bins + 1)``; ``"quantile"``: percentiles of ``y_prob`` (ties can make bins
    empty). A value exactly on an inner float edge goes to the lower bin (``np.searchsorted(..., side="left")``);
    sums run in sorted order of ``y_prob``, so the result does not depend on sample order, to the last bit.
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
    """Expected calibration error (Guo et al., 2017, Eq. 3) over :func:`reliability_bins`, in [0, 1].

    ``ECE = sum_b (n_b / N) |accuracy_b - mean_confidence_b|`` over the non-empty bins; one bin gives
    ``|mean(y_true) - mean(y_prob)|``.
    """
    return _ece_from_bins(reliability_bins(y_true, y_prob, n_bins, strategy))


def brier(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> float:
    """Brier score ``mean((y_prob - y_true) ** 2)`` (:func:`sklearn.metrics.brier_score_loss`), in [0, 1]."""
    labels, probs = _check_inputs(y_true, y_prob)
    return _brier(labels, probs)


def auroc(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> float | None:
    """AUROC (:func:`sklearn.metrics.roc_auc_score`), or ``None`` when ``y_true`` holds one class only."""
    labels, probs = _check_inputs(y_true, y_prob)
    return _auroc(labels, probs)


def summarize(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    *,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> MetricSummary:
    """ECE, Brier and AUROC with the sample and positive counts (:class:`MetricSummary`)."""
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
