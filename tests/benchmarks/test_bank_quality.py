"""``python benchmarks/bank_quality.py``: offline CEB under each bank setting, the cap held at every step."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from benchmarks.bank_quality import format_quality_table, quality_settings, run_quality, within_cap
from ceb.bench.bank_policies import Setting
from ceb.bench.processes import run_fresh
from ceb.data import write_stream
from ceb.eval.lanes import POOLED
from tests.support.builders import shell_stream


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
    streams = {"a": shell_stream("a", 8), "b": shell_stream("b", 6)}
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


def test_a_quality_worker_runs_in_its_own_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_stream(tmp_path / "toy.jsonl", shell_stream("t", 5))
    spec = {
        "stream_set": "toy",
        "streams": {"toy": [str(path)]},
        "setting": {"policy": "window", "cap": 4, "compress_threshold": None},
        "run_dir": str(tmp_path / "run"),
        "n_boot": 10,
        "seed": 0,
        "max_trajectories": None,
    }

    root = str(Path(__file__).resolve().parents[2])  # the child imports benchmarks/ from the checkout
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
    doc = run_fresh("benchmarks.bank_quality:quality_worker", spec, timeout_s=120)

    assert doc["setting"]["cap"] == 4 and doc["banks"][0]["records"] == 4
    assert doc["rows"][0]["n"] == 15


def test_a_reservoir_cap_is_per_class() -> None:
    assert within_cap(Setting("reservoir", 10), records=10, positives=5)
    assert not within_cap(Setting("reservoir", 10), records=7, positives=6)
    assert within_cap(Setting("window", 10), records=10, positives=9)
    assert not within_cap(Setting("window", 10), records=11, positives=0)
