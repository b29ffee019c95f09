"""Issue 24 item 9: SIGTERM stops ``ceb score`` as Ctrl-C does (summary.json written, exit 130); a run in which
every step failed exits 1; after an interruption ``ceb grid`` suggests its own ``--resume``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_FAILED, EXIT_INTERRUPTED
from ceb.data import write_stream
from ceb.pipeline.runner import RunSummary
from tests.support.builders import step, trajectory

REPO = Path(__file__).resolve().parents[2]


def _stream(path: Path, n: int) -> Path:
    steps = [step(f"cmd {j}", "out", label=j % 2) for j in range(4)]
    write_stream(path, [trajectory(f"t{i}", *steps) for i in range(n)])
    return path


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("background", [False, True], ids=["foreground", "background"])
def test_sigterm_writes_the_summary_and_exits_as_ctrl_c(tmp_path: Path, background: bool) -> None:
    """SIGTERM stops the run as Ctrl-C does, also in a process started in the background by a script or ``nohup``
    (``ceb score ... &``), which a non-interactive shell starts with SIGINT ignored: SIGTERM is passed on as SIGINT,
    and an ignored SIGINT had swallowed it, so the run went on to the end and exited 0."""
    stream = _stream(tmp_path / "big.jsonl", 5_000)
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [sys.executable, str(REPO / "run.py"), "--progress", "off", "score", str(stream), "--out", str(run)]
    start = _ignore_sigint if background else None
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=start)
    try:
        deadline = time.monotonic() + 60
        while not ((run / "scores.jsonl").is_file() and (run / "scores.jsonl").stat().st_size > 0):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no step scored within 60 s"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)  # the machine may be busy: stopping writes every bank
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()  # closes the pipes
    assert proc.returncode == EXIT_INTERRUPTED, stderr.decode()
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert summary["status"] == "interrupted"
    assert f"--resume {run}" in " ".join(stderr.decode().split())


def _summary(run_dir: Path, **counts: int) -> RunSummary:
    summary = RunSummary(run_dir=run_dir)
    for name, value in counts.items():
        setattr(summary, name, value)
    return summary


@pytest.mark.parametrize(("scored", "failed", "code"), [(0, 8, EXIT_FAILED), (1, 7, 0), (8, 0, 0)])
def test_score_exits_1_when_every_step_failed(
    scored: int, failed: int, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = _stream(tmp_path / "s.jsonl", 2)
    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["score", str(stream), "--out", str(run)]).exit_code == 0

    async def outcome(*args: Any, **kwargs: Any) -> RunSummary:
        return _summary(run, steps_scored=scored, steps_failed=failed)

    monkeypatch.setattr("ceb.pipeline.run_scoring", outcome)
    result = CliRunner().invoke(app, ["score", str(stream), "--out", str(run), "--overwrite"])
    assert result.exit_code == code, result.output
    assert ("every step failed" in result.output) == (code == EXIT_FAILED)


def test_an_interrupted_grid_suggests_the_grid_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _stream(tmp_path / "s.jsonl", 2)
    grid = tmp_path / "g.toml"
    grid.write_text(f"[grid]\nstreams = ['{stream}']\nout = 'g'\n")

    async def interrupted(*args: Any, **kwargs: Any) -> RunSummary:
        raise KeyboardInterrupt

    monkeypatch.setattr("ceb.pipeline.run_scoring", interrupted)
    result = CliRunner().invoke(app, ["grid", str(grid)])
    assert result.exit_code == EXIT_INTERRUPTED
    output = " ".join(result.output.split())
    assert f"ceb grid {grid} --resume" in output
    assert "--resume " + str(tmp_path / "g") not in output
