"""Speculation (``speculation = D``): a bank lane scored ahead of its bank writes the strict order's rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from ceb.bench.processes import sim_process
from ceb.config import RunConfig, load_config
from ceb.data import write_stream
from ceb.eval.report import build_report
from ceb.pipeline import run_scoring
from ceb.pipeline.lane import Lane, _Future
from ceb.pipeline.summary import RunSummary
from ceb.sim import SimConfig, serve_sim
from tests.support.builders import step, trajectory
from tests.support.kills import kill_at_a_random_row
from tests.support.lane_order import timing_free_rows as rows

pytestmark = pytest.mark.anyio

RUN_PY = Path(__file__).resolve().parents[2] / "run.py"
FILES = ("scores.jsonl", "hindsight.jsonl")
# Service times of a few milliseconds: long enough that trajectories run ahead while the bank catches up.
SIM = SimConfig(time_scale=0.02, max_num_seqs=64)


def stream(n: int = 10) -> list:
    """Shell trajectories whose commands share words, so a new trajectory changes some retrievals and not others."""
    return [
        trajectory(
            f"t{i}",
            *(
                step(f"grep -r item{(i + t) % 5} /data/{t}", f"line {i * t % 3}", state=f"$ {t}", label=(i + t) % 2)
                for t in range(4)
            ),
        )
        for i in range(n)
    ]


def banks(run: Path) -> dict[str, bytes]:
    """The saved banks of a run, by file name."""
    saved = {p.name: p.read_bytes() for p in (run / "banks").iterdir()}
    assert saved, f"{run}: no bank saved"
    return saved


def config(base_url: str, speculation: int) -> RunConfig:
    backend = {"name": "openai", "base_url": base_url, "model": SIM.model, "max_concurrency": 16}
    return load_config(
        overrides={"backend": backend, "methods": ["ceb"], "ceb": {"votes": 3}, "speculation": speculation}
    )


async def test_speculative_rows_are_the_strict_orders_on_the_simulator(tmp_path: Path) -> None:
    """Trajectories ahead read the bank the strict order gives them: the same rows, and no request discarded."""
    streams = {"bash": stream()}
    async with serve_sim(SIM) as server:
        strict = await run_scoring(streams, config(server.base_url, 0), tmp_path / "strict")
        summaries: dict[int, RunSummary] = {}
        for depth in (3, 1):
            summaries[depth] = await run_scoring(streams, config(server.base_url, depth), tmp_path / f"d{depth}")
    assert strict.steps_kept_ahead == strict.steps_discarded == strict.discarded_requests == 0
    for depth, summary in summaries.items():
        for name in FILES:  # one lane: the same rows in the same order, hindsight votes and bank records included
            assert rows(tmp_path / f"d{depth}", name) == rows(tmp_path / "strict", name), (depth, name)
        # The bank the lane ends with (the one ahead, adopted once its scores settled) is the strict order's.
        assert banks(tmp_path / f"d{depth}") == banks(tmp_path / "strict"), depth
        assert summary.steps_kept_ahead > 0 and summary.steps_discarded == summary.discarded_requests == 0, depth
        assert summary.requests == strict.requests and summary.prompt_tokens == strict.prompt_tokens


async def test_a_bank_ahead_that_is_wrong_costs_requests_not_rows(tmp_path: Path, monkeypatch) -> None:
    """Trajectories ahead on the bank as it stands (one short): steps whose request differs are asked again."""
    streams = {"bash": stream()}

    async def as_it_stands(self: Lane, position: int) -> _Future:
        return _Future(self.bank, self._version)

    async with serve_sim(SIM) as server:
        strict = await run_scoring(streams, config(server.base_url, 0), tmp_path / "strict")
        monkeypatch.setattr(Lane, "_future", as_it_stands)
        summary = await run_scoring(streams, config(server.base_url, 1), tmp_path / "d1")
    for name in FILES:
        assert rows(tmp_path / "d1", name) == rows(tmp_path / "strict", name), name
    # Some steps were taken from ahead, some were asked again, and what was discarded is counted on top.
    assert summary.steps_kept_ahead > 0 and summary.steps_discarded > 0
    assert summary.discarded_requests >= summary.steps_discarded
    assert summary.requests == strict.requests + summary.discarded_requests
    assert summary.prompt_tokens == strict.prompt_tokens + summary.discarded_prompt_tokens
    doc = orjson.loads((tmp_path / "d1" / "summary.json").read_bytes())
    assert doc["discarded_requests"] == summary.discarded_requests > 0
    # The report's cost section says what speculation discarded, as summary.json counts it.
    report = orjson.loads((build_report(tmp_path / "d1", n_boot=10).parent / "report.json").read_bytes())
    assert report["discarded_speculation"]["discarded_requests"] == summary.discarded_requests
    assert report["discarded_speculation"]["discarded_prompt_tokens"] == summary.discarded_prompt_tokens


def test_a_run_killed_while_speculating_resumes_to_the_strict_orders_rows(tmp_path: Path) -> None:
    """SIGKILL `ceb score --speculation 2` at random points; each resume ends with the rows of a strict run."""
    files = [str(write_stream(tmp_path / "bash.jsonl", stream(12)))]
    env = {**os.environ, "NO_COLOR": "1"}
    with sim_process(SIM) as url:

        def cmd(*args: str) -> list[str]:
            endpoint = ["--backend", "openai", "--base-url", url, "--model", SIM.model, "--methods", "ceb"]
            return [sys.executable, str(RUN_PY), "score", *files, *endpoint, *args]

        strict = tmp_path / "strict"
        subprocess.run(cmd("--out", str(strict), "--speculation", "0"), check=True, capture_output=True, env=env)
        total = len(rows(strict, "scores.jsonl"))
        killed_mid_run = 0
        for seed in (1, 2):
            run = tmp_path / f"killed{seed}"
            proc = subprocess.Popen(
                cmd("--out", str(run), "--speculation", "2"),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=env,
            )
            killed_mid_run += kill_at_a_random_row(proc, run / "scores.jsonl", seed, total)
            done = subprocess.run(cmd("--resume", str(run)), capture_output=True, env=env, timeout=300)
            assert done.returncode == 0, done.stderr.decode()[-2000:]
            for name in FILES:
                assert sorted(rows(run, name)) == sorted(rows(strict, name)), f"seed {seed}: {name} differs"
    assert killed_mid_run >= 1  # a kill landed inside a run, not after it
