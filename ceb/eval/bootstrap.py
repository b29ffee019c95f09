"""Percentile bootstrap intervals of ECE, Brier and AUROC, resampling whole trajectories (a cluster bootstrap).

Steps of one trajectory share an agent, a task and a history, so each replicate draws as many trajectories as the
sample holds, uniformly with replacement, keeping all their steps; the interval is the percentile interval of the
replicate values (Efron and Tibshirani, 1993, ch. 13). All ``B`` replicates are scored at once: a replicate is a
count per trajectory, and its ECE (same equal-width bins), Brier and AUROC (Mann-Whitney over the distinct scores,
ties one half) are sums of per-trajectory statistics weighted by those counts, equal to
:func:`ceb.eval.metrics.summarize` on :func:`resample_indices`' replicates (tested). :func:`paired_differences`
scores two columns on the same draws, so its interval is that of the difference itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import sparse

from ceb.eval.metrics import Strategy, summarize

__all__ = [
    "MIN_TRAJECTORIES",
    "PAIRED_METRICS",
    "BootstrapResult",
    "Interval",
    "PairedDifference",
    "bootstrap_metrics",
    "paired_differences",
    "percentile_interval",
    "replicate_metrics",
    "resample_indices",
]

MIN_TRAJECTORIES = 30
"""Below this many trajectories the report flags a row's intervals as rough: a percentile bootstrap over a handful
of clusters sees few distinct replicates and under-covers (Efron and Tibshirani, 1993, ch. 13).
"""

PAIRED_METRICS = ("ece", "brier", "auroc")
"""The metrics :func:`replicate_metrics` and :func:`paired_differences` compute."""


@dataclass(frozen=True, slots=True)
class Interval:
    """A percentile bootstrap interval; ``n_valid`` counts the replicates where the metric was defined."""

    low: float
    high: float
    n_valid: int


@dataclass(frozen=True, slots=True)
class BootstrapResult:
    """Intervals of the three metrics for one sample of steps.

    Attributes:
        ece: ``None`` when ``n_boot == 0``.
        brier: ``None`` when ``n_boot == 0``.
        auroc: ``None`` when no replicate holds both classes.
        n_groups: Trajectories (resampling units) in the sample.
    """

    ece: Interval | None
    brier: Interval | None
    auroc: Interval | None
    n_boot: int
    level: float
    seed: int
    n_groups: int


def percentile_interval(values: npt.ArrayLike, level: float = 0.95) -> tuple[float, float]:
    """``(low, high)``, the central ``level`` percentile interval of ``values`` (``np.percentile``, linear).

    Raises:
        ValueError: ``values`` is empty or ``level`` is outside (0, 1).
    """
    _check_level(level)
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("percentile_interval needs at least one value")
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(v, [tail, 100.0 - tail])
    return float(low), float(high)


def resample_indices(groups: npt.ArrayLike, n_boot: int, seed: int = 0) -> list[npt.NDArray[np.intp]]:
    """Row indices of ``n_boot`` cluster-bootstrap replicates, one array each (a group drawn twice appears twice).

    Groups are numbered in sorted order of their ids, so two samples over the same trajectories (two methods on
    one stream) are resampled identically for one seed.

    Raises:
        ValueError: ``n_boot < 0``.
    """
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    inverse, n_groups = _group_ids(groups)
    rows_by_group = np.argsort(inverse, kind="stable")
    sizes = np.bincount(inverse, minlength=n_groups)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.intp)
    if n_groups == 0:
        return [np.zeros(0, dtype=np.intp) for _ in range(n_boot)]
    out = []
    for draw in _draws(n_groups, n_boot, seed):
        drawn_sizes = sizes[draw]
        # Row k of the replicate is offset (k - first row of its draw) into its group's block of rows.
        first = np.repeat(np.cumsum(drawn_sizes) - drawn_sizes, drawn_sizes)
        offsets = np.arange(int(drawn_sizes.sum())) - first
        out.append(rows_by_group[np.repeat(starts[draw], drawn_sizes) + offsets])
    return out


def _group_ids(groups: npt.ArrayLike) -> tuple[npt.NDArray[np.intp], int]:
    """Each row's group number (ids in sorted order) and the number of groups."""
    ids = np.asarray(groups, dtype=object)
    _, inverse = np.unique(ids.astype(str) if ids.size else ids, return_inverse=True)
    inverse = inverse.reshape(-1).astype(np.intp)
    return inverse, int(inverse.max()) + 1 if inverse.size else 0


def _draws(n_groups: int, n_boot: int, seed: int) -> Iterator[npt.NDArray[np.int64]]:
    """The drawn group numbers of each replicate, from one generator."""
    rng = np.random.default_rng(seed)
    for _ in range(n_boot):
        yield rng.integers(0, n_groups, size=n_groups)


_BLOCK_CELLS = 2_000_000
"""Replicates are scored in blocks of at most this many (replicate, group) counts (16 MB of float64)."""


def _count_blocks(n_groups: int, n_boot: int, seed: int) -> Iterator[npt.NDArray[np.float64]]:
    """How often each group is drawn per replicate, blocks of shape ``(<= rows, n_groups)``, in draw order."""
    rows = max(1, _BLOCK_CELLS // max(n_groups, 1))
    draws = _draws(n_groups, n_boot, seed)
    for start in range(0, n_boot, rows):
        counts = np.zeros((min(rows, n_boot - start), n_groups), dtype=np.float64)
        for b in range(counts.shape[0]):
            counts[b] = np.bincount(next(draws), minlength=n_groups)
        yield counts


def _replicates_of(
    columns: Sequence[tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]],
    groups: npt.ArrayLike,
    n_boot: int,
    seed: int,
    n_bins: int,
) -> list[dict[str, npt.NDArray[np.float64]]]:
    """:func:`_replicates` of each ``(labels, scores)`` column over the same draws."""
    inverse, n_groups = _group_ids(groups)
    parts: list[list[dict[str, npt.NDArray[np.float64]]]] = [[] for _ in columns]
    for counts in _count_blocks(n_groups, n_boot, seed):
        for part, (y, p) in zip(parts, columns, strict=True):
            part.append(_replicates(y, p, inverse, counts, n_bins))
    empty = np.zeros(0, dtype=np.float64)
    return [{m: np.concatenate([b[m] for b in part]) if part else empty for m in PAIRED_METRICS} for part in parts]


def _per_group(
    inverse: npt.NDArray[np.intp], n_groups: int, columns: npt.NDArray[np.intp], weights: npt.ArrayLike, width: int
) -> sparse.csr_matrix:
    """A ``(n_groups, width)`` sparse matrix summing ``weights`` by (row's group, row's column)."""
    return sparse.csr_matrix((np.asarray(weights, dtype=np.float64), (inverse, columns)), shape=(n_groups, width))


def _weighted_sums(counts: npt.NDArray[np.float64], per_group: sparse.csr_matrix) -> npt.NDArray[np.float64]:
    """``counts @ per_group`` as a dense ``(B, width)`` array."""
    return np.asarray((per_group.T @ counts.T).T)


def _replicates(
    y: npt.NDArray[np.float64],
    p: npt.NDArray[np.float64],
    inverse: npt.NDArray[np.intp],
    counts: npt.NDArray[np.float64],
    n_bins: int,
) -> dict[str, npt.NDArray[np.float64]]:
    """ECE, Brier and AUROC of each replicate whose group counts are the rows of ``counts`` (NaN: undefined)."""
    n_groups = counts.shape[1]
    ones = np.zeros(y.shape[0], dtype=np.intp)
    total = _weighted_sums(counts, _per_group(inverse, n_groups, ones, np.ones_like(y), 1))[:, 0]
    brier = _weighted_sums(counts, _per_group(inverse, n_groups, ones, (p - y) ** 2, 1))[:, 0] / total
    # The bins of ceb.eval.metrics (scikit-learn's calibration_curve): a value on an inner edge goes to the lower bin.
    bins = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], p, side="left")
    conf = _weighted_sums(counts, _per_group(inverse, n_groups, bins, p, n_bins))
    acc = _weighted_sums(counts, _per_group(inverse, n_groups, bins, y, n_bins))
    ece = np.abs(acc - conf).sum(axis=1) / total
    values, rank = np.unique(p, return_inverse=True)
    k = values.shape[0]
    auroc = np.empty(counts.shape[0])
    pos_g = _per_group(inverse, n_groups, rank, y, k)
    neg_g = _per_group(inverse, n_groups, rank, 1.0 - y, k)
    step = max(1, 2_000_000 // max(k, 1))  # replicates per block: bounds the (block, k) arrays to ~16 MB each
    for start in range(0, counts.shape[0], step):
        block = counts[start : start + step]
        pos, neg = _weighted_sums(block, pos_g), _weighted_sums(block, neg_g)
        # Mann-Whitney: each positive beats the negatives below its score and ties half of those at it.
        below = np.cumsum(neg, axis=1) - 0.5 * neg
        n_pos, n_neg = pos.sum(axis=1), neg.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            auroc[start : start + step] = np.where(
                (n_pos > 0) & (n_neg > 0), (pos * below).sum(axis=1) / (n_pos * n_neg), np.nan
            )
    return {"ece": ece, "brier": brier, "auroc": auroc}


def replicate_metrics(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    groups: npt.ArrayLike,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    n_bins: int = 10,
) -> dict[str, npt.NDArray[np.float64]]:
    """``{"ece", "brier", "auroc"}`` of every replicate, each shape ``(n_boot,)`` (AUROC NaN on one class).

    The replicates are :func:`resample_indices`' for ``groups`` and ``seed``.

    Raises:
        ValueError: Inputs invalid for the metrics or of different shapes, or ``n_boot < 0``.
    """
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    y, p = _checked(y_true, y_prob, groups, n_bins)
    return _replicates_of([(y, p)], groups, n_boot, seed, n_bins)[0]


@dataclass(frozen=True, slots=True)
class PairedDifference:
    """``metric(a) - metric(b)`` on the same steps with its interval (``None`` where undefined)."""

    metric: str
    point: float | None
    low: float | None
    high: float | None
    n_valid: int

    @property
    def contains_zero(self) -> bool | None:
        """Whether the interval holds 0; ``None`` without an interval."""
        if self.low is None or self.high is None:
            return None
        return self.low <= 0.0 <= self.high


def paired_differences(
    y_true: npt.ArrayLike,
    a: npt.ArrayLike,
    b: npt.ArrayLike,
    groups: npt.ArrayLike,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    n_bins: int = 10,
    metrics: tuple[str, ...] = PAIRED_METRICS,
    labels_b: npt.ArrayLike | None = None,
) -> dict[str, PairedDifference]:
    """Paired percentile intervals of ``metric(a) - metric(b)``, both scored on each replicate's steps.

    ``y_true``, ``a`` (a method), ``b`` (``static`` or a reference rule) and ``groups`` (trajectory ids) have shape
    ``(N,)``; ``labels_b`` are ``b``'s own labels where they differ from ``y_true``. A column against itself gives
    exactly ``[0, 0]``. Negative favours ``a`` for ECE and Brier, positive for AUROC.

    Raises:
        ValueError: Invalid inputs, ``n_boot < 0``, ``level`` outside (0, 1) or an unknown metric.
    """
    _check_level(level)
    unknown = set(metrics) - set(PAIRED_METRICS)
    if unknown:
        raise ValueError(f"unknown metrics {sorted(unknown)}; known: {', '.join(PAIRED_METRICS)}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    y, pa = _checked(y_true, a, groups, n_bins)
    yb, pb = _checked(y_true if labels_b is None else labels_b, b, groups, n_bins)
    sa, sb = summarize(y, pa, n_bins=n_bins), summarize(yb, pb, n_bins=n_bins)
    ra, rb = _replicates_of([(y, pa), (yb, pb)], groups, n_boot, seed, n_bins)
    out = {}
    for name in metrics:
        va, vb = getattr(sa, name), getattr(sb, name)
        point = None if va is None or vb is None else float(va - vb)
        diff = ra[name] - rb[name]
        diff = diff[np.isfinite(diff)]
        low, high = percentile_interval(diff, level) if diff.size else (None, None)
        out[name] = PairedDifference(name, point, low, high, int(diff.size))
    return out


def _checked(
    y_true: npt.ArrayLike, y_prob: npt.ArrayLike, groups: npt.ArrayLike, n_bins: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    y, p, g = np.asarray(y_true), np.asarray(y_prob), np.asarray(groups, dtype=object)
    if not y.shape == p.shape == g.shape:
        raise ValueError(f"labels, scores and groups differ in shape: {y.shape}, {p.shape}, {g.shape}")
    summarize(y, p, n_bins=n_bins)  # validates, with the metrics' own messages
    return y.astype(np.float64), p.astype(np.float64)


def bootstrap_metrics(
    y_true: npt.ArrayLike,
    y_prob: npt.ArrayLike,
    groups: npt.ArrayLike,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
    n_bins: int = 10,
    strategy: Strategy = "uniform",
) -> BootstrapResult:
    """Percentile intervals of ECE, Brier and AUROC over trajectories, each replicate scored as ``summarize`` does.

    Replicates with an undefined AUROC (one class) are left out of its interval.

    Raises:
        ValueError: Invalid inputs or of different shapes, ``n_boot < 0`` or ``level`` outside (0, 1).
    """
    _check_level(level)
    y = np.asarray(y_true)
    p = np.asarray(y_prob)
    g = np.asarray(groups, dtype=object)
    if not y.shape == p.shape == g.shape:
        raise ValueError(f"y_true, y_prob and groups differ in shape: {y.shape}, {p.shape}, {g.shape}")
    summarize(y, p, n_bins=n_bins, strategy=strategy)  # validates once, before any resampling
    eces: list[float] = []
    briers: list[float] = []
    aurocs: list[float] = []
    if strategy == "uniform":  # all replicates at once (equal-mass bins move with each replicate: the loop below)
        reps = replicate_metrics(y, p, g, n_boot=n_boot, seed=seed, n_bins=n_bins)
        eces, briers = reps["ece"].tolist(), reps["brier"].tolist()
        aurocs = reps["auroc"][np.isfinite(reps["auroc"])].tolist()
    else:
        for idx in resample_indices(g, n_boot, seed):
            s = summarize(y[idx], p[idx], n_bins=n_bins, strategy=strategy)
            eces.append(s.ece)
            briers.append(s.brier)
            if s.auroc is not None:
                aurocs.append(s.auroc)
    return BootstrapResult(
        ece=_interval(eces, level),
        brier=_interval(briers, level),
        auroc=_interval(aurocs, level),
        n_boot=n_boot,
        level=level,
        seed=seed,
        n_groups=len(set(g.tolist())),
    )


def _interval(values: list[float], level: float) -> Interval | None:
    if not values:
        return None
    low, high = percentile_interval(values, level)
    return Interval(low=low, high=high, n_valid=len(values))


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
