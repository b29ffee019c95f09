"""The one percentile summary every benchmark reports with."""

from __future__ import annotations

import math

import pytest

from ceb.bench.bank_policies import Latency
from ceb.bench.stats import summarize


def test_summary_is_linear_interpolation_in_scaled_units() -> None:
    s = summarize([0.001, 0.002, 0.003, 0.004], scale=1e3)
    assert s.n == 4
    assert (s.mean, s.p50, s.max) == pytest.approx((2.5, 2.5, 4.0))
    assert s.p90 == pytest.approx(3.7)  # 1 + 0.9 * 3 = position 3.7 between 3 and 4
    assert s.p99 == pytest.approx(3.97)


def test_empty_sample_is_nan_not_an_error() -> None:
    s = summarize([])
    assert s.n == 0
    assert all(math.isnan(x) for x in (s.mean, s.p50, s.p90, s.p99, s.max))


def test_latency_keeps_its_recorded_keys() -> None:
    lat = Latency.of([0.010, 0.020, 0.030])
    assert (lat.n, lat.p50_ms, lat.mean_ms, lat.max_ms) == (3, pytest.approx(20.0), pytest.approx(20.0), 30.0)
    assert lat.p99_ms == pytest.approx(29.8)
