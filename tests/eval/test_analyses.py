from __future__ import annotations

import math

import numpy as np
import pytest

from ceb.eval.averaging import cumulative_ece, stream_averaging, task_count_grid
from ceb.eval.calibration import depth_calibration, label_shift, metric_rows
from ceb.eval.deployment import oracle_task_success, selective_execution, task_success
from ceb.eval.lanes import POOLED, comparable_masks, lanes_from_rows, reference_method, relabel

NAN = float("nan")


def _row(
    stream: str, method: str, traj: str, step: int, score: float | None, label: int | None, **kw: object
) -> dict[str, object]:
    return {"stream": stream, "method": method, "trajectory": traj, "step": step, "score": score, "label": label} | kw


# --- lanes ------------------------------------------------------------------------------------------------


def test_lanes_group_interleaved_rows_and_sort_by_position_then_step() -> None:
    rows = [
        _row("s", "ceb", "B", 0, 0.2, 0, position=1, order=0),
        _row("s", "static", "A", 0, 0.5, 1, position=0, order=0),
        _row("s", "ceb", "A", 1, 0.7, 1, position=0, order=0, alt_labels={"judge": 1}),
        _row("s", "ceb", "A", 0, 0.6, 0, position=0, order=0, alt_labels={"judge": 1}),
        _row("s", "ceb", "A", 0, 0.9, 1, position=0, order=1),
    ]
    lanes = lanes_from_rows(rows)
    assert [(la.method, la.order, la.n_rows) for la in lanes] == [("ceb", 0, 3), ("static", 0, 1), ("ceb", 1, 1)]
    ceb0 = lanes[0]
    assert list(ceb0.trajectory) == ["A", "A", "B"]
    assert list(ceb0.step) == [0, 1, 0]
    np.testing.assert_array_equal(ceb0.score, [0.6, 0.7, 0.2])
    # The alt column follows the same sort; the row without alt_labels gets NaN.
    np.testing.assert_array_equal(ceb0.alt_labels["judge"], [1.0, 1.0, NAN])
    np.testing.assert_array_equal(relabel(ceb0, "judge").label, [1.0, 1.0, NAN])


def test_rows_without_order_position_or_critic_get_defaults() -> None:
    rows = [_row("s", "ceb", "X", 0, 0.5, 1), _row("s", "ceb", "Y", 0, 0.5, 0), _row("s", "ceb", "X", 1, 0.4, 1)]
    (lane,) = lanes_from_rows(rows)
    assert (lane.order, lane.critic) == (0, "")
    # position = rank of the trajectory's first row, so X's second step stays with X.
    assert list(lane.trajectory) == ["X", "X", "Y"]
    assert list(lane.position) == [0, 0, 1]


def test_failed_and_unlabeled_steps_are_counted_not_used() -> None:
    rows = [
        _row("s", "ceb", "A", 0, 0.8, 1),
        _row("s", "ceb", "A", 1, None, 1, error="timeout"),
        _row("s", "ceb", "A", 2, 0.3, None),
    ]
    (lane,) = lanes_from_rows(rows)
    assert (lane.n_failed, lane.n_unlabeled, int(lane.usable.sum())) == (1, 1, 1)
    (row,) = metric_rows([lane], n_boot=0)
    assert (row.n, row.failed, row.unlabeled) == (1, 1, 1)
    assert row.summary is not None
    assert row.summary.brier == pytest.approx(0.04)


def test_not_available_method_has_no_numbers_and_keeps_its_reason() -> None:
    rows = [
        _row("s", "ppl", "A", 0, None, 1, error="not available: no logprobs"),
        _row("s", "ppl", "A", 1, None, 0, error="not available: no logprobs"),
        _row("s", "ceb", "A", 0, 0.9, 1),
        _row("s", "ceb", "A", 1, 0.2, 0),
    ]
    by_method = {r.method: r for r in metric_rows(lanes_from_rows(rows), n_boot=5)}
    assert by_method["ppl"].summary is None and by_method["ppl"].ci is None
    assert by_method["ppl"].note == "not available: no logprobs"
    assert by_method["ppl"].failed == 2
    assert by_method["ceb"].summary is not None and by_method["ceb"].note is None


def test_pooled_rows_only_for_methods_on_several_streams_and_use_lowest_order() -> None:
    rows = [
        _row("s1", "ceb", "A", 0, 0.9, 1),
        _row("s1", "ceb", "B", 0, 0.1, 0),
        _row("s2", "ceb", "C", 0, 0.6, 1),
        _row("s2", "ceb", "C", 0, 0.0, 1, order=1),  # a second order: must not be double counted
        _row("s1", "static", "A", 0, 0.5, 1),
    ]
    out = metric_rows(lanes_from_rows(rows), n_boot=0)
    keys = [(r.stream, r.method, r.n) for r in out]
    assert keys == [("s1", "ceb", 2), ("s2", "ceb", 1), ("s1", "static", 1), (POOLED, "ceb", 3)]
    pooled = out[-1]
    # A method without numbers on one of its streams gets a pooled row without numbers.
    rows += [_row("s1", "ppl", "A", 0, None, 1, error="not available"), _row("s2", "ppl", "C", 0, 0.5, 1)]
    ppl = [r for r in metric_rows(lanes_from_rows(rows), n_boot=0) if r.method == "ppl" and r.stream == POOLED]
    assert ppl[0].summary is None and ppl[0].note == "not pooled: no numbers on s1"
    assert pooled.summary is not None
    # Brier over (1, 0.9), (0, 0.1), (1, 0.6): (0.01 + 0.01 + 0.16) / 3 = 0.06
    assert pooled.summary.brier == pytest.approx(0.06)
    assert pooled.n_trajectories == 3


def test_comparable_masks_keep_steps_and_tasks_every_available_method_can_be_judged_on() -> None:
    rows = [
        _row("s", "ceb", "A", 0, 0.9, 1),
        _row("s", "ceb", "A", 1, None, 0, error="timeout"),
        _row("s", "ceb", "B", 0, 0.4, 0, position=1),
        _row("s", "static", "A", 0, 0.5, 1),
        _row("s", "static", "A", 1, 0.5, 0),
        _row("s", "static", "B", 0, 0.5, 0, position=1),
        _row("s", "ppl", "A", 0, None, 1, error="not available"),
    ]
    lanes = lanes_from_rows(rows)
    masks, kept, total = comparable_masks(lanes, whole_trajectories=False)
    # Step (A, 1) failed for ceb, so static loses it too; ppl is not available and keeps its rows (-> n/a).
    assert [m.tolist() for m in masks] == [[True, False, True], [True, False, True], [True]]
    assert (kept, total) == (2, 3)
    masks, kept, total = comparable_masks(lanes, whole_trajectories=True)
    assert [m.tolist() for m in masks] == [[False, False, True], [False, False, True], [True]]
    assert (kept, total) == (1, 2)


def test_reference_method_prefers_ceb_then_static() -> None:
    assert reference_method(["ppl", "static", "ceb"]) == "ceb"
    assert reference_method(["ppl", "static"]) == "static"
    assert reference_method(["verbalized", "cot"]) == "cot"
    with pytest.raises(ValueError):
        reference_method([])


# --- 2. cumulative ECE and multi-order averaging ------------------------------------------------------------


def test_task_count_grid_includes_ends_and_checkpoints() -> None:
    assert list(task_count_grid(5)) == [1, 2, 3, 4, 5]
    grid = task_count_grid(200, n_points=5)
    # linspace(1, 200, 5) = 1, 50.75, 100.5, 150.25, 200 -> rint 1, 51, 100, 150, 200; plus 30 and 50.
    assert list(grid) == [1, 30, 50, 51, 100, 150, 200]
    assert task_count_grid(0).shape == (0,)


def test_cumulative_ece_at_two_positions() -> None:
    # Task 0: (y=1, p=0.85) in bin 8, gap 0.15; (y=0, p=0.15) in bin 1, gap 0.15 -> ECE 0.15.
    # Task 1 adds (y=1, p=0.65) gap 0.35 and (y=1, p=0.75) gap 0.25, each alone in its bin:
    # ECE = (0.15 + 0.15 + 0.35 + 0.25) / 4 = 0.225. The failed step (NaN) is left out.
    y = [1, 0, 1, 1, 0]
    p = [0.85, 0.15, 0.65, 0.75, NAN]
    pos = [0, 0, 1, 1, 1]
    np.testing.assert_allclose(cumulative_ece(y, p, pos, [1, 2]), [0.15, 0.225])


def test_cumulative_ece_is_nan_before_any_usable_step() -> None:
    out = cumulative_ece([1, 1], [NAN, 0.85], [0, 1], [1, 2])
    assert math.isnan(out[0]) and out[1] == pytest.approx(0.15)


def test_stream_averaging_mean_std_and_gap_over_two_orders() -> None:
    # Two one-step trajectories A (label 1) and B (label 0), scored in two orders.
    rows = [
        # order 0: A then B.  ceb: ECE@1 = |1-0.85| = 0.15; ECE@2 = (0.15 + 0.15) / 2 = 0.15
        _row("s", "ceb", "A", 0, 0.85, 1, order=0, position=0),
        _row("s", "ceb", "B", 0, 0.15, 0, order=0, position=1),
        # order 1: B then A.  ceb: ECE@1 = 0.35; ECE@2 = (0.35 + 0.15) / 2 = 0.25
        _row("s", "ceb", "B", 0, 0.35, 0, order=1, position=0),
        _row("s", "ceb", "A", 0, 0.85, 1, order=1, position=1),
    ]
    # static scores 0.5 everywhere: ECE@1 = 0.5; ECE@2 = 0 (both in bin (0.4, 0.5], accuracy 0.5).
    for order, first, second in ((0, ("A", 1), ("B", 0)), (1, ("B", 0), ("A", 1))):
        rows.append(_row("s", "static", first[0], 0, 0.5, first[1], order=order, position=0))
        rows.append(_row("s", "static", second[0], 0, 0.5, second[1], order=order, position=1))
    curves = {c.method: c for c in stream_averaging(lanes_from_rows(rows))}
    ceb = curves["ceb"]
    assert ceb.orders == (0, 1)
    assert list(ceb.task_counts) == [1, 2]
    np.testing.assert_allclose(ceb.ece, [[0.15, 0.15], [0.35, 0.25]])
    np.testing.assert_allclose(ceb.mean, [0.25, 0.20])
    np.testing.assert_allclose(ceb.std, [math.sqrt(0.02), math.sqrt(0.005)])  # ddof=1
    # gap = static - ceb, order by order: order 0 -> (0.35, -0.15); order 1 -> (0.15, -0.25)
    assert ceb.reference == "static" and ceb.gap_orders == (0, 1)
    np.testing.assert_allclose(ceb.gap_mean, [0.25, -0.20])
    static = curves["static"]
    np.testing.assert_allclose(static.mean, [0.5, 0.0], atol=1e-12)
    assert static.reference is None and static.gap.shape == (0, 2)
    assert all(math.isnan(v) for v in static.gap_mean)


def test_stream_averaging_single_order_has_nan_std() -> None:
    rows = [_row("s", "ceb", "A", 0, 0.85, 1), _row("s", "ceb", "B", 0, 0.15, 0, position=1)]
    (curve,) = stream_averaging(lanes_from_rows(rows))
    assert curve.orders == (0,)
    assert all(math.isnan(v) for v in curve.std)
    assert curve.at(2) is not None and curve.at(3) is None


# --- 3. depth -----------------------------------------------------------------------------------------------


def test_depth_calibration_buckets_0_to_4_and_5_plus() -> None:
    steps = [0, 0, 1, 6, 3]
    y = [1, 0, 1, 0, 1]
    p = [0.85, 0.15, 0.65, 0.25, NAN]  # the step at depth 3 failed
    buckets = depth_calibration(y, p, steps)
    assert [b.label for b in buckets] == ["0", "1", "2", "3", "4", "5+"]
    assert [b.n for b in buckets] == [2, 1, 0, 0, 0, 1]
    b0, b1, _, b3, _, b5 = buckets
    assert b0.ece == pytest.approx(0.15) and b0.mean_score == pytest.approx(0.5) and b0.positive_rate == 0.5
    assert b1.ece == pytest.approx(0.35)
    assert b3.ece is None and b3.mean_score is None
    assert b5.ece == pytest.approx(0.25) and b5.high is None


def test_depth_calibration_custom_buckets_and_validation() -> None:
    buckets = depth_calibration([1, 1, 0], [0.85, 0.75, 0.35], [0, 1, 4], buckets=(0, 2))
    assert [(b.label, b.n) for b in buckets] == [("0-1", 2), ("2+", 1)]
    assert buckets[0].ece == pytest.approx(0.2)  # (0.15 + 0.25) / 2, two separate bins
    with pytest.raises(ValueError):
        depth_calibration([1], [0.5], [0], buckets=(1, 2))


# --- 5. selective execution ---------------------------------------------------------------------------------


def test_selective_execution_on_four_steps() -> None:
    # Ascending confidence: 0.2 (y=0), 0.4 (y=1), 0.6 (y=0), 0.8 (y=1); base rate 0.5.
    # b=10: floor(0.4) = 0 deferred -> 0.5; b=25: defer 0.2 -> 2/3; b=50: defer 0.2, 0.4 -> 1/2;
    # b=75: keep only 0.8 -> 1.
    y = [1, 0, 0, 1, 1]
    p = [0.8, 0.2, 0.6, 0.4, NAN]  # the failed step is left out
    out = selective_execution(y, p, budgets=(0, 10, 25, 50, 75))
    assert out == pytest.approx([0.5, 0.5, 2 / 3, 0.5, 1.0])


def test_selective_execution_splits_ties_at_the_cut_in_expectation() -> None:
    # Three steps tied at 0.5 hold one positive. b=25 defers 1 of them: expected deferred positives 1/3,
    # retained rate (2 - 1/3) / 3 = 5/9. b=50 defers 2: (2 - 2/3) / 2 = 2/3.
    out = selective_execution([1, 0, 0, 1], [0.5, 0.5, 0.5, 0.9], budgets=(25, 50))
    assert out == pytest.approx([5 / 9, 2 / 3])
    # A constant confidence keeps the base rate at every budget.
    assert selective_execution([1, 0, 0, 1], [0.3] * 4) == pytest.approx([0.5] * 4)


def test_selective_execution_edge_cases() -> None:
    assert selective_execution([1], [NAN], budgets=(0, 10)) == [None, None]
    with pytest.raises(ValueError):
        selective_execution([1], [0.5], budgets=(100,))
    with pytest.raises(ValueError):
        selective_execution([2], [0.5])


# --- 6. task success ----------------------------------------------------------------------------------------


def test_task_success_with_two_trajectories_and_oracle() -> None:
    # T1: scores 0.9, 0.1, 0.5 with labels 1, 0, 1 -> its wrong step is the least confident: fixed at m >= 1.
    # T2: scores 0.2, 0.8 with labels 1, 0 -> the wrong step is the most confident: fixed only at m >= 2.
    y = [1, 0, 1, 1, 0]
    p = [0.9, 0.1, 0.5, 0.2, 0.8]
    traj = ["T1", "T1", "T1", "T2", "T2"]
    got = task_success(y, p, traj)
    assert got.budgets == (0, 1, 2, 3)
    assert got.rates == pytest.approx((0.0, 0.5, 1.0, 1.0))
    assert (got.n_tasks, got.n_dropped) == (2, 0)
    # Oracle: each task has one wrong step, so m >= 1 always succeeds.
    assert oracle_task_success(y, traj).rates == pytest.approx((0.0, 1.0, 1.0, 1.0))


def test_task_success_ties_and_dropped_trajectories() -> None:
    # Three tied steps, one wrong: reviewing 1 catches it with probability 1/3, reviewing 2 with 2/3.
    # T2 has an unlabeled step and T3 a failed score: both dropped.
    y = [0, 1, 1, 1, NAN, 0]
    p = [0.5, 0.5, 0.5, 0.4, 0.3, NAN]
    traj = ["T1", "T1", "T1", "T2", "T2", "T3"]
    got = task_success(y, p, traj, budgets=(0, 1, 2))
    assert got.rates == pytest.approx((0.0, 1 / 3, 2 / 3))
    assert (got.n_tasks, got.n_dropped) == (1, 2)
    oracle = oracle_task_success(y, traj, budgets=(0, 1))
    # Oracle needs no score: T3 counts (one wrong step), T2 is dropped for its missing label.
    assert oracle.rates == pytest.approx((0.0, 1.0)) and oracle.n_tasks == 2


def test_task_success_all_correct_task_succeeds_without_review() -> None:
    got = task_success([1, 1], [0.1, 0.2], ["T", "T"], budgets=(0,))
    assert got.rates == (1.0,)


# --- 7. label shift -----------------------------------------------------------------------------------------


def test_label_shift_rates() -> None:
    # Over the 4 steps with both labels: strict 1,0,0,0 vs judge 1,1,1,0.
    shift = label_shift([1, 0, 0, 0, NAN], [1, 1, 1, 0, 1])
    assert shift is not None
    assert shift.n == 4
    assert shift.strict_positive_rate == 0.25 and shift.alt_positive_rate == 0.75
    assert shift.agreement == 0.5 and shift.zero_to_one == 0.5 and shift.one_to_zero == 0.0
    assert label_shift([NAN], [1]) is None
    with pytest.raises(ValueError):
        label_shift([1, 0], [1])
