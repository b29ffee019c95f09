"""The scale benchmark: simulated replicas in child processes, and one point's figures against a known capacity."""

from __future__ import annotations

import urllib.request
from dataclasses import fields
from pathlib import Path
from typing import Any

import orjson
import pytest

import ceb.bench.scale as scale
from ceb.bench.processes import sim_replicas, sim_stats
from ceb.bench.scale import ScaleBench, ScalePoint, run_scale_bench, run_scale_point
from ceb.data import Trajectory
from ceb.sim import SimConfig
from tests.support.builders import step, trajectory


def _streams(n_streams: int = 2, n_trajectories: int = 40, n_steps: int = 6) -> dict[str, list[Trajectory]]:
    return {
        f"s{i}": [
            trajectory(f"s{i}-t{j}", *[step(f"ls dir{k}", f"file{k}", label=k % 2) for k in range(n_steps)])
            for j in range(n_trajectories)
        ]
        for i in range(n_streams)
    }


def test_replicas_are_separate_endpoints_shared_by_fewer_processes() -> None:
    with sim_replicas(SimConfig(time_scale=0.0), 3, processes=2) as reps:
        assert len(set(reps.base_urls)) == 3
        assert len(reps.pids) == 2
        body = {"model": "ceb-simulator", "messages": [{"role": "user", "content": "hi"}]}
        req = urllib.request.Request(
            f"{reps.base_urls[1]}/chat/completions",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
        counts = [sim_stats(u)["requests"] for u in reps.base_urls]
        assert counts == [0, 1, 0]  # each replica counts its own requests: they are independent servers


@pytest.mark.serial  # measures a throughput: a test beside it on the other core halves it
def test_one_replica_is_kept_saturated_and_its_capacity_is_measured(tmp_path: Path) -> None:
    # 4 slots, 0.05 s per call whatever its size: 80 calls/s, far below what one process sends.
    sim = {"max_num_seqs": 4, "prefill_tok_s": 1e12, "decode_s_per_token": 0.0, "overhead_s": 0.05}
    settings = ScaleBench(**sim, warmup_s=0.5, window_s=1.5, max_trajectories=40, pin=False)
    p = run_scale_point(_streams(), settings, 1, tmp_path)
    assert p.capacity_calls_per_s == pytest.approx(80, rel=0.1)
    assert p.saturation > 0.8
    assert p.lanes >= 4 * settings.lanes_per_slot
    assert not p.ended_inside_window
    assert p.failed_attempts == 0
    assert p.calls_by_stage["critic"] > 0
    assert p.ceb_cpu_ms_per_call > 0
    assert p.loop_lag_ms.max >= p.loop_lag_ms.mean >= 0


def _point(r: int, saturation: float, cpu_ms: float, gc_mode: str = "quiet") -> ScalePoint:
    calls = 240.0 * r * saturation
    unread: dict[str, Any] = dict.fromkeys(f.name for f in fields(ScalePoint))  # what the knee does not read
    figures = {"replicas": r, "gc": gc_mode, "saturation": saturation, "achieved_calls_per_s": calls}
    return ScalePoint(
        **unread | figures | {"ceb_cpu_ms_per_call": cpu_ms, "ceb_cpu_utilisation": calls * cpu_ms / 1000}
    )


def test_the_knee_is_the_first_replica_count_below_the_threshold(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    measured = {1: (0.99, 2.0), 2: (0.97, 2.0), 4: (0.85, 1.6), 8: (0.5, 1.5)}

    def fake(streams: object, settings: ScaleBench, r: int, work: Path, *, gc_mode: str) -> ScalePoint:
        sat, cpu = measured[r]
        return _point(r, sat if gc_mode == "quiet" else sat * 0.9, cpu, gc_mode)

    monkeypatch.setattr(scale, "run_scale_point", fake)
    out = run_scale_bench({}, ScaleBench(replicas=(1, 2, 4, 8), compare_gc=True), tmp_path)
    assert out.knee.largest_saturated_replicas == 2
    assert out.knee.first_unsaturated_replicas == 4
    assert out.knee.unsaturated_not_ceb_bound == ()
    assert out.knee.max_achieved_calls_per_s == pytest.approx(960)  # 8 replicas at half their 240 calls/s
    assert out.extrapolation.ceb_cpu_ms_per_call == 2.0  # measured where the replicas were the limit
    assert out.extrapolation.replicas_one_core == pytest.approx(1000 / (2.0 * 30))
    assert [c.calls_per_s_quiet_over_default for c in out.gc_comparison] == pytest.approx([1 / 0.9] * 4)


def test_a_point_starved_by_other_processes_is_not_the_knee(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # R=4 fell below the threshold while ceb sat nearly idle (the simulator was starved): not ceb's limit.
    measured = {1: (0.99, 2.0), 2: (0.97, 2.0), 4: (0.05, 2.0), 8: (0.97, 2.0), 16: (0.6, 2.0)}

    def fake(streams: object, settings: ScaleBench, r: int, work: Path, *, gc_mode: str) -> ScalePoint:
        return _point(r, *measured[r], gc_mode)

    monkeypatch.setattr(scale, "run_scale_point", fake)
    out = run_scale_bench({}, ScaleBench(replicas=(1, 2, 4, 8, 16)), tmp_path)
    assert out.knee.first_unsaturated_replicas == 16
    assert out.knee.unsaturated_not_ceb_bound == (4,)
