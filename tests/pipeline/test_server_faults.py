"""The same run with and without injected server faults on the simulator gives identical results.

Both runs use simulators with the same seed, so every reply is the same function of its prompt; the faulty one
also answers HTTP 5xx, 429 with ``Retry-After``, stalls past the client's timeout (half of them then closed) and
malformed replies (a cut JSON body, or cut message content). The pipeline's policies (retry with backoff for
transport faults, re-ask for unreadable replies) must then reproduce the fault-free run exactly: every step
scored, the same scores, the same metrics. (This was ``ceb bench faults``, a test written as a benchmark;
``benchmarks/results/faults-20261121T051321Z.json`` recorded it at commit ``ac2c659`` on 6 InterCode streams.)

Scores outside [0, 1] are clipped by the method itself (paper Eq. 6), not retried, so that fault changes results by
design and is left out of the mix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from ceb.backends.base import AttemptRecord
from ceb.bench.processes import sim_process, sim_stats
from ceb.config import RunConfig, load_config
from ceb.data import Trajectory
from ceb.eval import run_metrics
from ceb.pipeline import read_rows, run_scoring
from ceb.pipeline.rundir import RunDir
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages
from tests.support.builders import step, trajectory

FAULTS = {
    "rate_500": 0.1,
    "rate_429": 0.05,
    "rate_stall": 0.03,
    "rate_malformed_body": 0.03,
    "rate_malformed_content": 0.03,
}
"""Higher than the recorded run's mix (5% 5xx, 2% 429, 1% stalls, 1% malformed) so a small run meets each kind."""

TIMEOUT_S = 0.5
"""The client's per-attempt timeout; a stall lasts longer (``stall_s``)."""


def _streams() -> dict[str, list[Trajectory]]:
    actions = ["ls", "cat a.txt", "rm -rf /tmp/x", "grep -r foo .", "ls", "echo done"]
    return {
        f"s{s}": [
            trajectory(f"t{s}-{t}", *(step(a, f"out {i}", label=(i + t) % 2) for i, a in enumerate(actions[t:])))
            for t in range(3)
        ]
        for s in range(2)
    }


def _config(url: str, sim: SimConfig) -> RunConfig:
    backend = {"name": "openai", "base_url": url, "model": sim.model, "max_concurrency": sim.max_num_seqs}
    backend |= {"timeout_s": TIMEOUT_S, "max_attempts": 12, "backoff_s": 0.01, "max_backoff_s": 0.2}
    return load_config(
        overrides={"backend": backend, "methods": ["ceb", "static"], "hindsight": {"seed": 0}, "fail_on_error": 0.5}
    )


async def _score(streams: dict[str, list[Trajectory]], config: RunConfig, out: Path) -> list[AttemptRecord]:
    stages = build_stages(config)
    attempts: list[AttemptRecord] = []
    assert stages.chat is not None
    stages.chat.observers.append(attempts.append)
    async with stages:
        await run_scoring(streams, config, out, stages=stages)
    return attempts


def _run(sim: SimConfig, out: Path) -> tuple[list[AttemptRecord], dict[str, Any]]:
    with sim_process(sim) as url:
        attempts = anyio.run(_score, _streams(), _config(url, sim), out)
        return attempts, sim_stats(url)


def _scores(run_dir: Path) -> list[tuple[Any, ...]]:
    return sorted(
        (r["stream"], r["method"], r["trajectory"], r["step"], r["score"], r["error"])
        for r in read_rows(RunDir(run_dir).scores)
    )


def test_a_run_through_injected_server_faults_gives_the_fault_free_runs_results(tmp_path: Path) -> None:
    clean = SimConfig(max_num_seqs=16, time_scale=0.0, seed=7)
    faulty = clean.model_copy(update={"stall_s": TIMEOUT_S + 0.5, "retry_after_s": 0.05, **FAULTS})

    _, clean_server = _run(clean, tmp_path / "fault_free")
    attempts, faulty_server = _run(faulty, tmp_path / "faulty")

    assert not clean_server.get("faults")
    injected = faulty_server.get("faults") or {}
    assert sum(injected.values()) >= 5, injected  # the faulty run did meet faults, several kinds
    assert len(injected) >= 3, injected
    assert sum(not a.ok for a in attempts) >= 5
    expected = _scores(tmp_path / "fault_free")
    assert expected and all(s[4] is not None for s in expected)  # every step scored
    assert _scores(tmp_path / "faulty") == expected
    assert run_metrics(tmp_path / "faulty") == run_metrics(tmp_path / "fault_free")
