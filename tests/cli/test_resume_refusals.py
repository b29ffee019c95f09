"""Issue 24 item 2: ``--resume`` of a directory that holds no run is refused in one line, never a fresh start.

A resume without the run's ``config.json`` cannot check that the streams and settings are the ones the rows were
scored with; re-scoring everything and appending doubled ``scores.jsonl`` and counted every step twice.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import write_stream
from ceb.pipeline.rundir import RunDir
from tests.support.builders import step, trajectory

runner = CliRunner()


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    path = tmp_path / "s.jsonl"
    steps = [step(f"cmd {j}", "out", label=j % 2) for j in range(3)]
    write_stream(path, [trajectory(f"t{i}", *steps) for i in range(6)])
    return path


def refused(args: list[str]) -> str:
    """Run ``ceb args``; assert one ``error:`` line, no traceback and exit 2; return the line."""
    result = runner.invoke(app, ["--progress", "off", *args])
    assert result.exit_code == EXIT_ERROR, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return " ".join(lines[0].split())


def test_resume_of_a_run_without_its_config_is_refused_and_its_rows_are_left_alone(
    stream: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    assert runner.invoke(app, ["score", str(stream), "--out", str(run)]).exit_code == 0
    (run / "config.json").unlink()
    before = (run / "scores.jsonl").read_bytes()
    line = refused(["score", str(stream), "--resume", str(run)])
    assert f"cannot resume {run}" in line and "config.json" in line and "scores.jsonl" in line
    assert (run / "scores.jsonl").read_bytes() == before  # 36 rows stay 36
    assert not (run / "config.json").exists()


@pytest.mark.parametrize("state", ["missing", "empty"])
def test_resume_of_a_missing_or_empty_directory_is_refused_and_creates_nothing(
    state: str, stream: Path, tmp_path: Path
) -> None:
    run = tmp_path / "runs" / "new"
    if state == "empty":
        run.mkdir(parents=True)
    line = refused(["score", str(stream), "--resume", str(run)])
    assert f"cannot resume {run}" in line
    assert ("no such directory" in line) == (state == "missing")
    assert ("holds no run" in line) == (state == "empty")
    assert "leave out --resume" in line  # how to start one instead
    if state == "missing":
        assert not run.parent.exists()
    else:
        assert list(run.iterdir()) == []


def test_grid_resume_of_a_directory_without_a_run_is_refused(stream: Path, tmp_path: Path) -> None:
    (tmp_path / "grid.toml").write_text(f'[grid]\nstreams = ["{stream.name}"]\nout = "runs/g"\n')
    line = refused(["grid", str(tmp_path / "grid.toml"), "--resume"])
    assert f"cannot resume {tmp_path / 'runs' / 'g'}" in line and "no such directory" in line
    assert not (tmp_path / "runs").exists()
    assert runner.invoke(app, ["grid", str(tmp_path / "grid.toml")]).exit_code == 0
    (tmp_path / "runs" / "g" / "config.json").unlink()
    line = refused(["grid", str(tmp_path / "grid.toml"), "--resume"])
    assert "config.json" in line


def test_resume_of_a_run_another_process_is_starting_is_refused_as_in_use(stream: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    with RunDir(run).lock():  # a `ceb score --out run` that has not written config.json yet
        line = refused(["score", str(stream), "--resume", str(run)])
    assert f"cannot resume {run}: it is in use by another ceb process (pid {os.getpid()})" in line, line
    assert "leave out --resume" not in line
