"""The paired bootstrap: all replicates at once equal summarize on resample_indices' replicates; pairs share draws."""

import numpy as np
import pytest

from ceb.eval.bootstrap import paired_differences, replicate_metrics, resample_indices
from ceb.eval.metrics import summarize


def sample(n_traj=30, steps=5, seed=1):
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"t{i}" for i in range(n_traj)], steps)
    y = rng.integers(0, 2, size=groups.shape[0])
    # Rounded scores so that ties (and values on bin edges) occur, as verbal scores have them.
    p = np.round(np.clip(0.5 * y + rng.uniform(0, 0.6, size=y.shape[0]), 0, 1), 1)
    return y, p, groups


def test_replicates_equal_summarize_on_the_same_resampled_trajectories():
    y, p, groups = sample()
    got = replicate_metrics(y, p, groups, n_boot=50, seed=3)
    for b, idx in enumerate(resample_indices(groups, 50, seed=3)):
        s = summarize(y[idx], p[idx])  # sklearn's AUROC and Brier, the metrics module's ECE
        assert got["ece"][b] == pytest.approx(s.ece, abs=1e-12)
        assert got["brier"][b] == pytest.approx(s.brier, abs=1e-12)
        assert got["auroc"][b] == pytest.approx(s.auroc, abs=1e-12)


def test_a_replicate_with_one_class_has_no_auroc():
    y = np.array([1, 1, 0, 0])
    groups = np.array(["a", "a", "b", "b"])
    got = replicate_metrics(y, [0.9, 0.8, 0.2, 0.1], groups, n_boot=40, seed=0)
    one_class = np.array([len(set(y[idx].tolist())) == 1 for idx in resample_indices(groups, 40, seed=0)])
    assert one_class.any() and (~one_class).any()
    assert np.isnan(got["auroc"][one_class]).all() and (got["auroc"][~one_class] == 1.0).all()


def test_a_method_against_itself_differs_by_exactly_zero():
    y, p, groups = sample()
    for d in paired_differences(y, p, p, groups, n_boot=200).values():
        assert (d.point, d.low, d.high) == (0.0, 0.0, 0.0)
        assert d.contains_zero is True and d.n_valid == 200


def test_both_columns_are_scored_on_the_same_draws():
    # Against its reversal 1 - p, a column's AUROC difference is 2 AUROC(p) - 1 on each replicate when both are
    # scored on the same draws; independent draws would not give that interval.
    y, p, groups = sample(n_traj=40)
    d = paired_differences(y, p, 1.0 - p, groups, n_boot=300)["auroc"]
    # AUROC(1 - p) = 1 - AUROC(p) on every replicate, so the difference is 2 AUROC(p) - 1 replicate by replicate.
    a = replicate_metrics(y, p, groups, n_boot=300)["auroc"]
    assert (d.low, d.high) == pytest.approx(tuple(np.percentile(2 * a - 1, [2.5, 97.5])), abs=1e-12)


def test_a_clear_difference_excludes_zero_and_a_coin_flip_does_not():
    y, p, groups = sample(n_traj=60)
    noise = np.random.default_rng(7).uniform(0, 1, size=y.shape[0])
    d = paired_differences(y, p, noise, groups, n_boot=300)
    assert d["auroc"].point > 0.2 and d["auroc"].low > 0 and d["auroc"].contains_zero is False
    assert d["brier"].high < 0  # the informative scores have the lower Brier
    noise2 = np.random.default_rng(8).uniform(0, 1, size=y.shape[0])
    assert paired_differences(y, noise, noise2, groups, n_boot=300)["auroc"].contains_zero is True


def test_no_replicates_gives_points_without_intervals():
    y, p, groups = sample()
    d = paired_differences(y, p, 1 - p, groups, n_boot=0, metrics=("auroc",))
    assert set(d) == {"auroc"} and d["auroc"].low is None and d["auroc"].contains_zero is None
    assert d["auroc"].point == pytest.approx(summarize(y, p).auroc - summarize(y, 1 - p).auroc)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="differ in shape"):
        paired_differences([0, 1], [0.1, 0.2], [0.1], ["a", "b"])
    with pytest.raises(ValueError, match="unknown metrics"):
        paired_differences([0, 1], [0.1, 0.2], [0.1, 0.2], ["a", "b"], metrics=("f1",))


def test_replicates_scored_in_blocks_are_the_same_replicates(monkeypatch):
    # Many replicates are scored a block at a time (bounded memory at --boot 100000); the draws run on in order.
    y, p, groups = sample()
    whole = replicate_metrics(y, p, groups, n_boot=40, seed=5)
    monkeypatch.setattr("ceb.eval.bootstrap._BLOCK_CELLS", 7 * 30)  # 7 replicates of 30 trajectories per block
    blocked = replicate_metrics(y, p, groups, n_boot=40, seed=5)
    for name, values in whole.items():
        np.testing.assert_allclose(blocked[name], values, rtol=0, atol=1e-12)
