"""SIGKILL a real `score` process at random points, resume it, and compare with an uninterrupted run.

The offline backend is deterministic and reports no timings, so the result files must agree byte for byte
once their lines are sorted (lanes interleave their rows in a run-dependent order).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ceb.data import write_stream
from tests.support.builders import step, trajectory
from tests.support.kills import kill_at_a_random_row

RUN_PY = Path(__file__).resolve().parents[2] / "run.py"
SEEDS = (1, 2, 3, 4, 5)


def _streams(tmp: Path) -> list[str]:
    files = []
    for s in range(2):
        trajs = [
            trajectory(
                f"s{s}-t{i}",
                *(
                    step(f"grep -r item{i % 7} /data/{t}", f"line {i * t % 5}", state=f"$ {t}", label=(i + t) % 2)
                    for t in range(4)
                ),
            )
            for i in range(80)
        ]
        files.append(str(write_stream(tmp / f"stream{s}.jsonl", trajs)))
    return files


def _cmd(files: list[str], *args: str) -> list[str]:
    return [sys.executable, str(RUN_PY), "score", *files, "--orders", "2", *args]


def _sorted_lines(path: Path) -> list[bytes]:
    return sorted(line for line in path.read_bytes().split(b"\n") if line.strip())


def test_resume_after_sigkill_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    env = {**os.environ, "NO_COLOR": "1"}
    files = _streams(tmp_path)
    full = tmp_path / "full"
    subprocess.run(_cmd(files, "--out", str(full)), check=True, capture_output=True, env=env, timeout=300)
    total = len(_sorted_lines(full / "scores.jsonl"))
    killed_mid_run = 0
    for seed in SEEDS:
        run = tmp_path / f"killed{seed}"
        proc = subprocess.Popen(
            _cmd(files, "--out", str(run)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        # Kill once a random number of step rows is on disk: somewhere inside the run, not in its start-up.
        killed_mid_run += kill_at_a_random_row(proc, run / "scores.jsonl", seed, total)
        done = subprocess.run(_cmd(files, "--resume", str(run)), capture_output=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        for name in ("scores.jsonl", "hindsight.jsonl"):
            assert _sorted_lines(run / name) == _sorted_lines(full / name), f"seed {seed}: {name} differs"
        for bank in (full / "banks").glob("*.json"):
            assert (run / "banks" / bank.name).read_bytes() == bank.read_bytes(), f"seed {seed}: {bank.name}"
    if killed_mid_run < len(SEEDS) - 1:
        pytest.fail(f"only {killed_mid_run} of {len(SEEDS)} kills landed while results were being written")
