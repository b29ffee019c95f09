from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.calibration import calibration_curve

from ceb.eval import MetricSummary, auroc, brier, ece, reliability_bins, summarize

# --- ECE on small hand-computed cases -------------------------------------------------------------------


def test_ece_hand_computed_with_values_on_edges_0_01_05_1() -> None:
    # 10 uniform bins; 0.0 -> bin 0, 0.1 (edge) -> bin 0 (lower), 0.5 (edge) -> bin 4 = (0.4, 0.5],
    # 1.0 -> bin 9 = (0.9, 1.0].
    # bin 0: y = {0, 1}, p = {0.0, 0.1}: acc 0.5, conf 0.05, gap 0.45, weight 2/4
    # bin 4: y = {1},    p = {0.5}:      acc 1.0, conf 0.5,  gap 0.5,  weight 1/4
    # bin 9: y = {0},    p = {1.0}:      acc 0.0, conf 1.0,  gap 1.0,  weight 1/4
    # ECE = 0.5 * 0.45 + 0.25 * 0.5 + 0.25 * 1.0 = 0.225 + 0.125 + 0.25 = 0.6
    y = [0, 1, 1, 0]
    p = [0.0, 0.1, 0.5, 1.0]
    assert ece(y, p) == pytest.approx(0.6, abs=1e-12)
    bins = reliability_bins(y, p)
    np.testing.assert_array_equal(bins.counts, [2, 0, 0, 0, 1, 0, 0, 0, 0, 1])


def test_value_on_inner_edge_01_goes_to_lower_bin() -> None:
    # 0.1 lands in [0, 0.1], 0.15 in (0.1, 0.2]:
    # gaps |1 - 0.1| = 0.9 and |0 - 0.15| = 0.15 -> ECE = 0.5 * 0.9 + 0.5 * 0.15 = 0.525.
    # (Had 0.1 gone up, both would share a bin: |0.5 - 0.125| = 0.375.)
    assert ece([1, 0], [0.1, 0.15]) == pytest.approx(0.525, abs=1e-12)


def test_value_on_inner_edge_05_goes_to_lower_bin() -> None:
    # 0.5 lands in (0.4, 0.5], 0.55 in (0.5, 0.6]:
    # gaps |1 - 0.5| = 0.5 and |0 - 0.55| = 0.55 -> ECE = 0.5 * 0.5 + 0.5 * 0.55 = 0.525.
    # (Had 0.5 gone up: |0.5 - 0.525| = 0.025.)
    assert ece([1, 0], [0.5, 0.55]) == pytest.approx(0.525, abs=1e-12)
    np.testing.assert_array_equal(reliability_bins([1, 0], [0.5, 0.55]).counts[4:6], [1, 1])


def test_one_goes_to_last_bin_and_zero_to_first_bin() -> None:
    # 0.95 and 1.0 share (0.9, 1.0]: acc 1, conf 0.975 -> ECE = 0.025.
    bins = reliability_bins([1, 1], [0.95, 1.0])
    assert bins.counts.shape == (10,)
    assert bins.counts[9] == 2
    assert ece([1, 1], [0.95, 1.0]) == pytest.approx(0.025, abs=1e-12)
    # 0.0 and 0.05 share [0, 0.1]: acc 0, conf 0.025 -> ECE = 0.025.
    bins = reliability_bins([0, 0], [0.0, 0.05])
    assert bins.counts[0] == 2
    assert ece([0, 0], [0.0, 0.05]) == pytest.approx(0.025, abs=1e-12)


def test_decimal_literal_below_float_edge_goes_to_lower_bin() -> None:
    # np.linspace(0, 1, 11)[3] is 0.30000000000000004 > 0.3, so 0.3 is in (0.2, 0.3], bin 2.
    assert reliability_bins([1], [0.3]).counts[2] == 1


def test_ece_quantile_hand_computed() -> None:
    # 2 quantile bins: edges = percentiles 0, 50, 100 of p = [0.1, 0.25, 0.4].
    # bin 0: p = {0.1, 0.2}, y = {0, 0}: acc 0, conf 0.15, gap 0.15
    # bin 1: p = {0.3, 0.4}, y = {1, 1}: acc 1, conf 0.35, gap 0.65
    # ECE = 0.5 * 0.15 + 0.5 * 0.65 = 0.4
    y = [0, 0, 1, 1]
    p = [0.1, 0.2, 0.3, 0.4]
    bins = reliability_bins(y, p, n_bins=2, strategy="quantile")
    np.testing.assert_allclose(bins.edges, [0.1, 0.25, 0.4])
    assert ece(y, p, n_bins=2, strategy="quantile") == pytest.approx(0.4, abs=1e-12)


def test_ece_quantile_value_on_median_edge_goes_to_lower_bin() -> None:
    # Edges [0.1, 0.2, 0.3]; 0.2 sits on the inner edge and joins 0.1.
    # bin 0: p = {0.1, 0.2}, y = {0, 1}: acc 0.5, conf 0.15, gap 0.35, weight 2/3
    # bin 1: p = {0.3},      y = {1}:    acc 1,   conf 0.3,  gap 0.7,  weight 1/3
    # ECE = 2/3 * 0.35 + 1/3 * 0.7 = 1.4 / 3
    y = [0, 1, 1]
    p = [0.1, 0.2, 0.3]
    np.testing.assert_array_equal(reliability_bins(y, p, n_bins=2, strategy="quantile").counts, [2, 1])
    assert ece(y, p, n_bins=2, strategy="quantile") == pytest.approx(1.4 / 3, abs=1e-12)


def test_reliability_bins_keeps_empty_bins_with_nan_and_is_read_only() -> None:
    bins = reliability_bins([1, 0, 1], [0.05, 0.05, 0.95], n_bins=5)
    assert bins.n_bins == 5
    assert bins.edges.shape == (6,)
    np.testing.assert_array_equal(bins.counts, [2, 0, 0, 0, 1])
    np.testing.assert_array_equal(bins.nonempty, [True, False, False, False, True])
    assert np.isnan(bins.mean_confidence[1:4]).all()
    assert np.isnan(bins.accuracy[1:4]).all()
    np.testing.assert_allclose(bins.accuracy[[0, 4]], [0.5, 1.0])
    np.testing.assert_allclose(bins.mean_confidence[[0, 4]], [0.05, 0.95])
    with pytest.raises(ValueError, match="read-only"):
        bins.counts[0] = 7


# --- agreement with scikit-learn's calibration_curve ----------------------------------------------------


def _random_case(seed: int, n_bins: int, strategy: str) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    parts = [
        rng.uniform(size=300),
        # Exact float edges, and decimal literals just off them (0.3 < linspace(0, 1, 11)[3]).
        rng.choice(np.linspace(0.0, 1.0, n_bins + 1), size=60),
        np.round(rng.uniform(size=60), 1),
        np.array([0.0, 1.0]),
    ]
    if strategy == "quantile":
        # Many ties, so quantile edges fall exactly on sample values.
        parts.append(np.round(rng.uniform(size=100), 2))
    p = rng.permutation(np.concatenate(parts))
    y = (rng.uniform(size=p.shape[0]) < p).astype(int)
    return y, p


def _counts_by_interval(p: np.ndarray, edges: np.ndarray) -> np.ndarray:
    # Independent of searchsorted: bin k is (edges[k], edges[k+1]], the first bin also takes edges[0]
    # and below, the last bin everything above its lower edge.
    n_bins = edges.shape[0] - 1
    counts = []
    for k in range(n_bins):
        above = p > edges[k] if k > 0 else np.ones_like(p, dtype=bool)
        below = p <= edges[k + 1] if k < n_bins - 1 else np.ones_like(p, dtype=bool)
        counts.append(int(np.sum(above & below)))
    return np.array(counts)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_bins_and_ece_match_calibration_curve(seed: int, n_bins: int, strategy: str) -> None:
    y, p = _random_case(seed, n_bins, strategy)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy=strategy)

    bins = reliability_bins(y, p, n_bins=n_bins, strategy=strategy)
    filled = bins.nonempty
    np.testing.assert_allclose(bins.accuracy[filled], prob_true, rtol=0, atol=1e-12)
    np.testing.assert_allclose(bins.mean_confidence[filled], prob_pred, rtol=0, atol=1e-12)

    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    else:
        edges = np.percentile(p, np.linspace(0.0, 1.0, n_bins + 1) * 100)
    np.testing.assert_array_equal(bins.edges, edges)
    counts = _counts_by_interval(p, edges)
    np.testing.assert_array_equal(bins.counts, counts)

    nonzero = counts[counts > 0]
    expected = float(np.sum(nonzero / p.shape[0] * np.abs(prob_true - prob_pred)))
    assert ece(y, p, n_bins=n_bins, strategy=strategy) == pytest.approx(expected, abs=1e-12)


# --- n_bins ---------------------------------------------------------------------------------------------


def test_one_bin_ece_is_gap_between_means() -> None:
    rng = np.random.default_rng(7)
    p = rng.uniform(size=500)
    y = (rng.uniform(size=500) < 0.3).astype(int)
    expected = abs(y.mean() - p.mean())
    for strategy in ("uniform", "quantile"):
        assert ece(y, p, n_bins=1, strategy=strategy) == pytest.approx(expected, abs=1e-12)


def test_n_bins_changes_binning() -> None:
    # 0.1 and 0.15 share [0, 0.2] with 5 bins (|0.5 - 0.125| = 0.375) but not with 10 bins (0.525).
    assert ece([1, 0], [0.1, 0.15], n_bins=5) == pytest.approx(0.375, abs=1e-12)
    assert reliability_bins([1, 0], [0.1, 0.15], n_bins=15).counts.shape == (15,)
    # 15 bins: 0.1 in (1/15, 2/15] and 0.15 in (2/15, 3/15] -> separate, ECE = 0.525.
    assert ece([1, 0], [0.1, 0.15], n_bins=15) == pytest.approx(0.525, abs=1e-12)


# --- reference predictors -------------------------------------------------------------------------------


def test_perfectly_calibrated_groups_give_zero_ece() -> None:
    # Within each confidence value the positive rate equals the confidence.
    p = [0.25] * 4 + [0.5] * 2 + [0.75] * 4
    y = [1, 0, 0, 0] + [1, 0] + [1, 1, 1, 0]
    assert ece(y, p) == pytest.approx(0.0, abs=1e-12)


def test_labels_drawn_from_confidences_give_small_ece() -> None:
    rng = np.random.default_rng(11)
    p = rng.uniform(size=100_000)
    y = (rng.uniform(size=p.shape[0]) < p).astype(int)
    assert ece(y, p) < 0.01
    # A confident but wrong predictor on the same labels is far off.
    assert ece(y, 1.0 - p) > 0.3


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_constant_predictor_at_base_rate(strategy: str) -> None:
    y = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    p = [0.3] * 10
    assert ece(y, p, strategy=strategy) == pytest.approx(0.0, abs=1e-12)
    assert brier(y, p) == pytest.approx(0.3 * 0.7, abs=1e-12)
    assert auroc(y, p) == pytest.approx(0.5)


# --- Brier and AUROC ------------------------------------------------------------------------------------


def test_brier_hand_computed() -> None:
    # ((0.2 - 0)^2 + (0.6 - 1)^2) / 2 = (0.04 + 0.16) / 2 = 0.1
    assert brier([0, 1], [0.2, 0.6]) == pytest.approx(0.1, abs=1e-12)
    # Single class is fine for Brier: mean((1 - p)^2) = (0.64 + 0.81 + 0.49) / 3
    assert brier([1, 1, 1], [0.2, 0.1, 0.3]) == pytest.approx(1.94 / 3, abs=1e-12)


def test_auroc_hand_computed() -> None:
    # Positive/negative pairs (0.35, 0.1) (0.35, 0.4) (0.8, 0.1) (0.8, 0.4): 3 of 4 ranked right.
    assert auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert auroc([0, 1], [0.9, 0.1]) == pytest.approx(0.0)


@pytest.mark.parametrize("label", [0, 1])
def test_auroc_is_none_with_one_class(label: int) -> None:
    assert auroc([label] * 4, [0.1, 0.5, 0.7, 0.9]) is None


# --- summarize ------------------------------------------------------------------------------------------


def test_summarize_matches_the_single_metrics() -> None:
    y = [0, 0, 1, 1, 1]
    p = [0.1, 0.4, 0.35, 0.8, 1.0]
    summary = summarize(y, p, n_bins=5, strategy="quantile")
    assert summary.n == 5
    assert summary.n_positive == 3
    assert summary.positive_rate == pytest.approx(0.6)
    assert summary.mean_score == pytest.approx(0.53)
    assert summary.ece == ece(y, p, n_bins=5, strategy="quantile")
    assert summary.brier == brier(y, p)
    assert summary.auroc == auroc(y, p)
    assert (summary.n_bins, summary.strategy) == (5, "quantile")


def test_summary_to_dict_round_trips_through_json_with_none_auroc() -> None:
    summary = summarize([1, 1], [0.9, 0.7])
    assert summary.auroc is None
    decoded = orjson.loads(orjson.dumps(summary.to_dict()))
    assert decoded["auroc"] is None
    assert decoded["n"] == 2
    assert decoded["ece"] == pytest.approx(0.2)
    assert decoded["strategy"] == "uniform"
    assert MetricSummary(**decoded) == summary


# --- inputs ---------------------------------------------------------------------------------------------


def test_accepts_bools_floats_and_arrays() -> None:
    p = np.array([0.2, 0.9, 0.6])
    expected = ece([0, 1, 1], p)
    assert ece([False, True, True], p) == expected
    assert ece(np.array([0.0, 1.0, 1.0]), p.tolist()) == expected


@pytest.mark.parametrize(
    ("y_true", "y_prob", "message"),
    [
        ([0, 1, 0, 1], [0.1, 0.2, 0.3, 1.2], r"y_prob\[3\] = 1\.2 is outside \[0, 1\]"),
        ([0, 1], [-0.1, 0.2], r"y_prob\[0\] = -0\.1 is outside \[0, 1\]"),
        ([0, 1], [0.1, float("nan")], r"y_prob\[1\] = nan is not finite"),
        ([0, 1], [float("inf"), 0.5], r"y_prob\[0\] = inf is not finite"),
        ([0, 1, 2], [0.1, 0.2, 0.3], r"y_true\[2\] = 2 is not a binary label"),
        ([0, 0.5], [0.1, 0.2], r"y_true\[1\] = 0\.5 is not a binary label"),
        ([float("nan"), 1], [0.1, 0.2], r"y_true\[0\] = nan is not a binary label"),
        (["a", "b"], [0.1, 0.2], "y_true must hold the numbers 0 and 1"),
        ([0, 1], ["a", "b"], "y_prob must hold numbers in"),
        ([0, 1, 1], [0.1, 0.2], "differ in length: 3 labels, 2 probabilities"),
        ([], [], "empty"),
        ([[0, 1]], [[0.1, 0.2]], "y_true must be one-dimensional"),
        (1, 0.5, "y_true must be one-dimensional"),
    ],
)
def test_invalid_inputs_raise_for_every_metric(y_true: object, y_prob: object, message: str) -> None:
    for metric in (ece, brier, auroc, summarize, reliability_bins):
        with pytest.raises(ValueError, match=message):
            metric(y_true, y_prob)  # type: ignore[operator]


@pytest.mark.parametrize("n_bins", [0, -3, 2.5, True])
def test_invalid_n_bins(n_bins: object) -> None:
    for metric in (ece, summarize):
        with pytest.raises(ValueError, match="n_bins must be an integer >= 1"):
            metric([0, 1], [0.1, 0.9], n_bins=n_bins)  # type: ignore[operator]


def test_invalid_strategy() -> None:
    with pytest.raises(ValueError, match="strategy must be one of 'uniform', 'quantile', got 'kmeans'"):
        ece([0, 1], [0.1, 0.9], strategy="kmeans")  # type: ignore[arg-type]


# --- properties -----------------------------------------------------------------------------------------

_EDGE_VALUES = sorted({float(v) for k in (1, 5, 10, 15) for v in np.linspace(0.0, 1.0, k + 1)})
_probabilities = st.one_of(st.floats(min_value=0.0, max_value=1.0), st.sampled_from(_EDGE_VALUES))


@settings(max_examples=200, deadline=None)
@given(
    samples=st.lists(st.tuples(st.integers(0, 1), _probabilities), min_size=1, max_size=60),
    n_bins=st.integers(1, 20),
    strategy=st.sampled_from(["uniform", "quantile"]),
    data=st.data(),
)
def test_ece_is_bounded_and_order_free(
    samples: list[tuple[int, float]], n_bins: int, strategy: str, data: st.DataObject
) -> None:
    y = [label for label, _ in samples]
    p = [prob for _, prob in samples]
    value = ece(y, p, n_bins=n_bins, strategy=strategy)  # type: ignore[arg-type]
    assert 0.0 <= value <= 1.0

    order = data.draw(st.permutations(range(len(samples))))
    shuffled = ece([y[i] for i in order], [p[i] for i in order], n_bins=n_bins, strategy=strategy)  # type: ignore[arg-type]
    assert shuffled == value


def test_ece_reaches_one_without_overshoot() -> None:
    # Every step confidently wrong: each bin's gap is exactly 1.
    y = [0] * 7 + [1] * 6
    p = [1.0] * 7 + [0.0] * 6
    assert ece(y, p) == 1.0
    assert ece(y, p, n_bins=3, strategy="quantile") == 1.0
