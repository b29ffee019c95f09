"""The warnings that a run's numbers mean little: degenerate scores and one-class pseudo-labels, at their bounds."""

import pytest

from ceb.pipeline.results import HindsightRow
from ceb.pipeline.score_warnings import degenerate_score_warnings, one_class_warnings
from tests.support.builders import step_rows


def scores(values, *, method="ceb", stream="s", readout="text", steps_per_trajectory=4, **kw):
    """One row per value, ``steps_per_trajectory`` steps per trajectory, every row scored."""
    return step_rows(
        {
            "stream": stream,
            "method": method,
            "trajectory": f"t{i // steps_per_trajectory}",
            "step": i % steps_per_trajectory,
            "score": v,
            "label": i % 2,
            "readout": readout,
        }
        | kw
        for i, v in enumerate(values)
    )


@pytest.mark.parametrize(("n", "fires"), [(9, False), (10, True)])
def test_one_value_warns_from_10_steps(n, fires):
    out = degenerate_score_warnings(scores([0.0] * n))
    assert bool(out) is fires
    if fires:
        assert out[0].startswith("method ceb: its scores take 1 distinct value(s) (0) over 10 scored steps")
        assert "readout: text" in out[0]


@pytest.mark.parametrize(("distinct", "fires"), [(2, True), (3, False)])
def test_two_values_warn_three_do_not(distinct, fires):
    values = [0.1 * (i % distinct) for i in range(12)]
    assert bool(degenerate_score_warnings(scores(values))) is fires


def test_a_step_scored_in_several_orders_counts_once():
    rows = scores([0.0] * 5) + scores([0.0] * 5, order=1)  # the same 5 steps, twice
    assert degenerate_score_warnings(rows) == []


def test_failed_steps_are_not_counted():
    rows = scores([0.0] * 9 + [None])
    assert degenerate_score_warnings(rows) == []


def test_each_method_apart_and_a_degenerate_stream_is_named_when_the_pool_is_not():
    good = scores([i / 20 for i in range(12)], stream="a")
    flat = scores([0.5] * 12, stream="b")
    other = scores([i / 20 for i in range(12)], method="static")
    out = degenerate_score_warnings(good + flat + other)
    assert len(out) == 1
    assert out[0].startswith("method ceb: its scores take 1 distinct value(s) (0.5) over 12 scored steps on stream b")


def test_pooled_streams_warn_when_each_is_too_short():
    rows = scores([0.0] * 6, stream="a") + scores([0.0] * 6, stream="b")
    (out,) = degenerate_score_warnings(rows)
    assert "over 12 scored steps on 2 stream(s) pooled" in out


def test_the_expected_readout_is_suggested_as_a_fact_only_when_the_run_shows_log_probs():
    flat = scores([0.0] * 10)
    (conditional,) = degenerate_score_warnings(flat)
    assert 'if the endpoint returns log-probs (`ceb doctor` checks), critic.readout = "expected"' in conditional
    shown = scores([i / 20 for i in range(10)], method="ceb-no-repetition", readout="expected")
    (fact,) = degenerate_score_warnings(flat + shown)
    assert 'this run\'s endpoint returns log-probs, so critic.readout = "expected"' in fact
    (none,) = degenerate_score_warnings(scores([0.0] * 10, method="ppl", readout=None))
    assert "no verbal score" in none and "critic.readout" not in none


def hindsight(labels, *, method="ceb", stream="s", requests=1):
    return HindsightRow(
        stream=stream,
        method=method,
        trajectory="t",
        votes=[],
        soft_votes=[],
        pseudo_labels=list(labels),
        failed_votes=0,
        errors=[],
        records_added=len(labels),
        latency_s=0.0,
        requests=requests,
        prompt_tokens=None,
        completion_tokens=None,
    )


@pytest.mark.parametrize(("n", "fires"), [(4, False), (5, True)])
def test_one_class_pseudo_labels_warn_from_5_steps(n, fires):
    out = one_class_warnings([hindsight([1] * n)])
    assert bool(out) is fires
    if fires:
        assert out[0].startswith("stream s, method ceb: 5 of 5 hindsight pseudo-labels are 1; its banks hold one class")


def test_one_class_counts_each_method_apart():
    # 16 steps x 5 methods all 1 read "78 of 80" pooled before; now each method is judged on its own steps.
    rows = [hindsight([1] * 16, method=m) for m in ("ceb", "ceb-no-repetition")]
    rows.append(hindsight([1] * 15 + [0], method="ceb-positives"))  # 15 of 16 = 94%: not one class
    out = one_class_warnings(rows)
    assert [w.split(":")[0] for w in out] == ["stream s, method ceb", "stream s, method ceb-no-repetition"]
    assert all("16 of 16" in w for w in out)


def test_mixed_or_model_free_pseudo_labels_do_not_warn():
    assert one_class_warnings([hindsight([1, 0, 1, 1, 1])]) == []
    assert one_class_warnings([hindsight([1] * 8, requests=0)]) == []
