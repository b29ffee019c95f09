"""Selective execution and task success under a review budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from ceb.data.amex import convert_amex
from ceb.data.reader import read_stream
from ceb.eval.deployment import oracle_task_success, selective_execution, task_success

NAN = float("nan")
AMEX = Path(__file__).resolve().parents[1] / "fixtures" / "amex"


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


def test_task_success_ties_unlabelled_steps_and_dropped_trajectories() -> None:
    # Three tied steps, one wrong: reviewing 1 catches it with probability 1/3, reviewing 2 with 2/3.
    # T2's unlabelled step is not scored (T2 is judged on its one correct step); T3's labelled step has no score:
    # dropped; T4 has no labelled step at all: left out.
    y = [0, 1, 1, 1, NAN, 0, NAN]
    p = [0.5, 0.5, 0.5, 0.4, 0.3, NAN, 0.2]
    traj = ["T1", "T1", "T1", "T2", "T2", "T3", "T4"]
    got = task_success(y, p, traj, budgets=(0, 1, 2))
    assert got.rates == pytest.approx((1 / 2, (1 / 3 + 1) / 2, (2 / 3 + 1) / 2))
    assert (got.n_tasks, got.n_dropped, got.n_unlabelled) == (2, 1, 1)
    oracle = oracle_task_success(y, traj, budgets=(0, 1))
    # Oracle needs no score: T3 counts (one wrong step), T2 counts on its labelled step.
    assert oracle.rates == pytest.approx((1 / 3, 1.0)) and (oracle.n_tasks, oracle.n_unlabelled) == (3, 1)


def test_task_success_on_an_amex_episode_scores_its_tap_steps_only(tmp_path: Path) -> None:
    """AMEX labels TAP steps only (paper appendix): the all-steps-correct rule applies to them, and the reviewer's
    budget goes to them; a TYPE, SWIPE or PRESS_BACK step neither fails nor drops its episode."""
    (stream,) = convert_amex(AMEX / "instruction_anno", AMEX / "predictions.jsonl", tmp_path / "out")
    alpha, beta = read_stream([stream.path])
    assert alpha.labels == (1, None, 1) and beta.labels == (0, None, 0, None, None)
    y = [NAN if v is None else float(v) for t in (alpha, beta) for v in t.labels]
    traj = [t.id for t in (alpha, beta) for _ in t.steps]
    # The least confident step of each episode is an unlabelled one: it must not take a review slot.
    p = [0.9, 0.1, 0.8, 0.2, 0.05, 0.3, 0.01, 0.9]
    got = task_success(y, p, traj, budgets=(0, 1, 2))
    # alpha: both TAP steps right, a success without review; beta: two wrong TAP steps, fixed only with m = 2.
    assert got.rates == pytest.approx((0.5, 0.5, 1.0))
    assert (got.n_tasks, got.n_dropped, got.n_unlabelled) == (2, 0, 0)
    assert oracle_task_success(y, traj, budgets=(0, 1, 2)).rates == pytest.approx((0.5, 0.5, 1.0))


def test_task_success_all_correct_task_succeeds_without_review() -> None:
    got = task_success([1, 1], [0.1, 0.2], ["T", "T"], budgets=(0,))
    assert got.rates == (1.0,)
