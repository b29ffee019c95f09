"""The bounded-bank benchmark: its grid, the quality runs' caps and metrics, the scale measurement's fields."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from ceb.bench.bank_policies import format_quality_table, format_scale_table
from ceb.bench.bank_quality import Setting, quality_settings, run_quality
from ceb.bench.bank_scale import Latency, ScaleResult, grow, measure_scale, records_from_labels, replay, scale_checks
from ceb.bench.processes import run_fresh
from ceb.data import Trajectory, write_stream
from ceb.eval.lanes import POOLED
from tests.support.builders import step, trajectory


def _stream(prefix: str, n: int) -> list[Trajectory]:
    """Shell trajectories the offline labeler can read: failing commands are 0, the others 1."""
    out = []
    for i in range(n):
        ok = step(f"ls /data/{prefix}{i % 4}", observation=f"file{i}.txt", label=1)
        bad = step(f"cat /nope/{prefix}{i % 3}", observation="cat: /nope: No such file or directory", label=0)
        out.append(trajectory(f"{prefix}{i}", ok, bad, step(f"wc -l file{i}.txt", observation=f"{i} lines", label=1)))
    return out


def test_the_grid_skips_caps_that_cannot_bind_and_gives_the_reservoir_half_the_cap_per_class() -> None:
    run, skipped = quality_settings([10, 100, 1000], compress=0.9, compress_window=10, most_records=150)

    labels = [s.label for s in run]
    assert labels[0] == "unbounded"
    assert "window 10" in labels and "window 100" in labels and "compress 0.9 + window 10" in labels
    assert "reservoir 2x50" in labels
    # 500 records per class is more than the longest stream's 150 steps: the same run as unbounded.
    assert {s.label for s in skipped} == {"window 1k", "reservoir 2x500", "usefulness 1k"}
    assert Setting("reservoir", 1000).bank_settings() == {
        "policy": "reservoir",
        "compress_threshold": None,
        "max_per_class": 500,
    }
    assert Setting("usefulness", 50).bank_settings(usefulness_k=3)["usefulness_k"] == 3


def test_quality_runs_the_pipeline_once_per_setting_and_the_cap_holds_at_every_step(tmp_path: Path) -> None:
    streams = {"a": _stream("a", 8), "b": _stream("b", 6)}
    capped = run_quality(streams, Setting("window", 5), tmp_path / "w", stream_set="toy", n_boot=20)
    free = run_quality(streams, Setting(), tmp_path / "u", stream_set="toy", n_boot=20)

    assert [r.stream for r in capped.rows] == ["a", "b", POOLED]
    pooled = capped.headline
    assert pooled.stream == POOLED and pooled.n == 3 * 14 and pooled.n_trajectories == 14
    assert pooled.ece_low is not None and pooled.ece_high is not None and pooled.ece_low <= pooled.ece_high
    for bank in capped.banks:
        assert bank.records == 5 and bank.max_seen == 5 and bank.within_cap
        saved = orjson.loads((tmp_path / "w" / "banks" / f"{bank.stream}__ceb.json").read_bytes())
        assert len(saved["records"]) == 5
    # Unbounded, each lane banks every labelled step; the cap is what made the difference.
    assert sorted(b.records for b in free.banks) == [18, 24]
    assert "window 5" in format_quality_table([capped, free])


def test_a_reservoir_cap_is_per_class() -> None:
    assert Setting("reservoir", 10).within(records=10, positives=5)
    assert not Setting("reservoir", 10).within(records=7, positives=6)
    assert Setting("window", 10).within(records=10, positives=9)
    assert not Setting("window", 10).within(records=11, positives=0)


def test_replay_makes_exactly_the_records_asked_for_by_copying_the_real_ones() -> None:
    real = records_from_labels(_stream("r", 4))  # 12 records
    trajectories, passes = grow(real, 30)

    assert sum(map(len, trajectories)) == 30 and passes == 3
    assert trajectories[4][0].action.endswith(" #copy1") and trajectories[4][0].trajectory_id == "r0#copy1"
    assert [len(t) for t in replay(real, 30)] == [len(t) for t in trajectories]
    with pytest.raises(ValueError):
        next(replay(real, 0))


def test_scale_measures_a_capped_bank_past_its_cap_and_writes_its_files(tmp_path: Path) -> None:
    real = records_from_labels(_stream("s", 10), observation_chars=300)
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


def test_a_quality_worker_runs_in_its_own_process(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "toy.jsonl", _stream("t", 5))
    spec = {
        "stream_set": "toy",
        "streams": {"toy": [str(path)]},
        "setting": {"policy": "window", "cap": 4, "compress_threshold": None},
        "run_dir": str(tmp_path / "run"),
        "n_boot": 10,
        "seed": 0,
        "max_trajectories": None,
    }

    doc = run_fresh("ceb.bench.bank_quality:quality_worker", spec, timeout_s=120)

    assert doc["setting"]["cap"] == 4 and doc["banks"][0]["records"] == 4
    assert doc["rows"][0]["n"] == 15
