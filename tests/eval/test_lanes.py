"""Lanes built from scores.jsonl rows, and the shared step sets methods are compared on."""

from __future__ import annotations

import numpy as np
import pytest

from ceb.eval.calibration import metric_rows
from ceb.eval.lanes import comparable_masks, lanes_from_rows, reference_method, relabel
from tests.support.builders import step_rows

NAN = float("nan")


def _row(
    stream: str, method: str, traj: str, step: int, score: float | None, label: int | None, **kw: object
) -> dict[str, object]:
    return {"stream": stream, "method": method, "trajectory": traj, "step": step, "score": score, "label": label} | kw


def test_lanes_group_interleaved_rows_and_sort_by_position_then_step() -> None:
    rows = [
        _row("s", "ceb", "B", 0, 0.2, 0, position=1, order=0),
        _row("s", "static", "A", 0, 0.5, 1, position=0, order=0),
        _row("s", "ceb", "A", 1, 0.7, 1, position=0, order=0, alt_labels=[{"name": "judge", "label": 1}]),
        _row("s", "ceb", "A", 0, 0.6, 0, position=0, order=0, alt_labels=[{"name": "judge", "label": 1}]),
        _row("s", "ceb", "A", 0, 0.9, 1, position=0, order=1),
    ]
    lanes = lanes_from_rows(step_rows(rows))
    # Lanes come sorted by (stream, critic, method, order), whatever order the file holds them in.
    assert [(la.method, la.order, la.n_rows) for la in lanes] == [("ceb", 0, 3), ("ceb", 1, 1), ("static", 0, 1)]
    ceb0 = lanes[0]
    assert list(ceb0.trajectory) == ["A", "A", "B"]
    assert list(ceb0.step) == [0, 1, 0]
    np.testing.assert_array_equal(ceb0.score, [0.6, 0.7, 0.2])
    # The alt column follows the same sort; the row without alt_labels gets NaN.
    np.testing.assert_array_equal(ceb0.alt_labels["judge"], [1.0, 1.0, NAN])
    np.testing.assert_array_equal(relabel(ceb0, "judge").label, [1.0, 1.0, NAN])


def test_rows_without_order_position_or_critic_get_defaults() -> None:
    rows = [_row("s", "ceb", "X", 0, 0.5, 1), _row("s", "ceb", "Y", 0, 0.5, 0), _row("s", "ceb", "X", 1, 0.4, 1)]
    (lane,) = lanes_from_rows(step_rows(rows))
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
    (lane,) = lanes_from_rows(step_rows(rows))
    assert (lane.n_failed, lane.n_unlabeled, int(lane.usable.sum())) == (1, 1, 1)
    (row,) = metric_rows([lane], n_boot=0)
    assert (row.n, row.failed, row.unlabeled) == (1, 1, 1)
    assert row.summary is not None
    assert row.summary.brier == pytest.approx(0.04)


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
    lanes = lanes_from_rows(step_rows(rows))
    assert [lane.method for lane in lanes] == ["ceb", "ppl", "static"]  # sorted, not in file order
    masks, kept, total = comparable_masks(lanes, whole_trajectories=False)
    # Step (A, 1) failed for ceb, so static loses it too; ppl is not available and keeps its rows (-> n/a).
    assert [m.tolist() for m in masks] == [[True, False, True], [True], [True, False, True]]
    assert (kept, total) == (2, 3)
    masks, kept, total = comparable_masks(lanes, whole_trajectories=True)
    assert [m.tolist() for m in masks] == [[False, False, True], [True], [False, False, True]]
    assert (kept, total) == (1, 2)


def test_whole_task_masks_ignore_unlabelled_steps() -> None:
    """A task is judged on its labelled steps: an unlabelled step (AMEX's non-TAP ones) neither drops its task nor
    enters it; a labelled step without a score still drops the task, and a task with no label is left out."""
    rows = [
        _row("s", "ceb", "A", 0, 0.9, 1),
        _row("s", "ceb", "A", 1, 0.3, None),
        _row("s", "ceb", "B", 0, 0.4, None, position=1),
        _row("s", "ceb", "C", 0, 0.4, 0, position=2),
        _row("s", "ceb", "C", 1, 0.6, None, position=2),
        _row("s", "static", "A", 0, 0.5, 1),
        _row("s", "static", "A", 1, None, None, error="timeout"),
        _row("s", "static", "B", 0, 0.5, None, position=1),
        _row("s", "static", "C", 0, None, 0, position=2, error="timeout"),
        _row("s", "static", "C", 1, 0.5, None, position=2),
    ]
    lanes = lanes_from_rows(step_rows(rows))
    masks, kept, total = comparable_masks(lanes, whole_trajectories=True)
    assert [m.tolist() for m in masks] == [[True, False, False, False, False], [True, False, False, False, False]]
    assert (kept, total) == (1, 2)


def test_reference_method_prefers_ceb_then_static() -> None:
    assert reference_method(["ppl", "static", "ceb"]) == "ceb"
    assert reference_method(["ppl", "static"]) == "static"
    assert reference_method(["verbalized", "cot"]) == "cot"
    with pytest.raises(ValueError):
        reference_method([])
