"""Cumulative ECE over the stream and its average over stream orders."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ceb.eval.averaging import cumulative_ece, stream_averaging, task_count_grid
from ceb.eval.lanes import lanes_from_rows
from tests.support.builders import step_rows

NAN = float("nan")


def _row(
    stream: str, method: str, traj: str, step: int, score: float | None, label: int | None, **kw: object
) -> dict[str, object]:
    return {"stream": stream, "method": method, "trajectory": traj, "step": step, "score": score, "label": label} | kw


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
    curves = {c.method: c for c in stream_averaging(lanes_from_rows(step_rows(rows)))}
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
    (curve,) = stream_averaging(lanes_from_rows(step_rows(rows)))
    assert curve.orders == (0,)
    assert all(math.isnan(v) for v in curve.std)
    assert curve.at(2) is not None and curve.at(3) is None
