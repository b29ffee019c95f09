"""``ceb bench bank-policies``: the replay of real records, the scale measurement's fields and its checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ceb.bench.bank_policies import (
    Latency,
    ScaleResult,
    Setting,
    format_scale_table,
    grow,
    measure_scale,
    records_from_labels,
    replay,
    scale_checks,
)
from tests.support.builders import shell_stream


def test_replay_makes_exactly_the_records_asked_for_by_copying_the_real_ones() -> None:
    real = records_from_labels(shell_stream("r", 4))  # 12 records
    trajectories, passes = grow(real, 30)

    assert sum(map(len, trajectories)) == 30 and passes == 3
    assert trajectories[4][0].action.endswith(" #copy1") and trajectories[4][0].trajectory_id == "r0#copy1"
    assert [len(t) for t in replay(real, 30)] == [len(t) for t in trajectories]
    with pytest.raises(ValueError):
        next(replay(real, 0))


def test_scale_measures_a_capped_bank_past_its_cap_and_writes_its_files(tmp_path: Path) -> None:
    real = records_from_labels(shell_stream("s", 10), observation_chars=300)
    queries = [r.key for traj in real[:3] for r in traj]

    result = measure_scale(real, 100, Setting("window", 40), queries, tmp_path, update_trajectories=5, chunk_records=20)

    assert result.size == 100 and result.held == 40 and result.replay_passes == 4
    assert result.query.n == len(queries) and result.update.n == 5
    assert result.save_bytes > 0 and result.journal_bytes > 0
    assert result.peak_rss_mb >= result.rss_base_mb > 0
    assert list(tmp_path.iterdir()) == []  # the files were measured, then removed
    with pytest.raises(ValueError, match="chunks"):
        measure_scale(real, 100, Setting("usefulness", 40), queries, tmp_path)


def test_scale_checks_compare_each_capped_size_with_the_uncapped_bank() -> None:
    def fake(size: int, setting: Setting, update_ms: float, rss: float) -> ScaleResult:
        lat = Latency(1, 1.0, 1.0, update_ms, update_ms)
        return ScaleResult(
            size, setting, size, 1, 1, 1, 1, 2, 10, 0.0, Latency(1, 1.0, 1.0, 1.0, 1.0), lat,
            100.0, rss, rss, 1000, 0.0, 1000, 0.0, rss,
        )  # fmt: skip

    results = [
        fake(10, Setting(), 2.0, 200.0),
        fake(1_000_000, Setting(), 40.0, 3000.0),
        fake(10, Setting("window", 5), 1.0, 150.0),
        fake(1_000_000, Setting("window", 5), 1.0, 150.0),
    ]
    checks = scale_checks(results)

    assert checks["naive"]["window 5"] == {"10": 2.0, "1000000": 40.0}
    assert checks["flat"]["window 5"]["rss_above_base_ratio"] == 1.0
    assert checks["uncapped_1m"]["rss_ok"] is False
    assert "1,000,000" in format_scale_table(results)
