"""Main-table metric rows, calibration by depth and label shift."""

from __future__ import annotations

import pytest

from ceb.eval.calibration import depth_calibration, label_shift, metric_rows
from ceb.eval.lanes import POOLED, lanes_from_rows
from tests.support.builders import step_rows

NAN = float("nan")


def _row(
    stream: str, method: str, traj: str, step: int, score: float | None, label: int | None, **kw: object
) -> dict[str, object]:
    return {"stream": stream, "method": method, "trajectory": traj, "step": step, "score": score, "label": label} | kw


def test_not_available_method_has_no_numbers_and_keeps_its_reason() -> None:
    rows = [
        _row("s", "ppl", "A", 0, None, 1, error="not available: no logprobs"),
        _row("s", "ppl", "A", 1, None, 0, error="not available: no logprobs"),
        _row("s", "ceb", "A", 0, 0.9, 1),
        _row("s", "ceb", "A", 1, 0.2, 0),
    ]
    by_method = {r.method: r for r in metric_rows(lanes_from_rows(step_rows(rows)), n_boot=5)}
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
    out = metric_rows(lanes_from_rows(step_rows(rows)), n_boot=0)
    keys = [(r.stream, r.method, r.n) for r in out]
    # by content (stream, then method), not by the rows' arrival: the same rows give the same table
    assert keys == [("s1", "ceb", 2), ("s1", "static", 1), ("s2", "ceb", 1), (POOLED, "ceb", 3)]
    pooled = out[-1]
    # A method without numbers on one of its streams gets a pooled row without numbers.
    rows += [_row("s1", "ppl", "A", 0, None, 1, error="not available"), _row("s2", "ppl", "C", 0, 0.5, 1)]
    ppl = [
        r for r in metric_rows(lanes_from_rows(step_rows(rows)), n_boot=0) if r.method == "ppl" and r.stream == POOLED
    ]
    assert ppl[0].summary is None and ppl[0].note == "not pooled: no numbers on s1"
    assert pooled.summary is not None
    # Brier over (1, 0.9), (0, 0.1), (1, 0.6): (0.01 + 0.01 + 0.16) / 3 = 0.06
    assert pooled.summary.brier == pytest.approx(0.06)
    assert pooled.n_trajectories == 3


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
