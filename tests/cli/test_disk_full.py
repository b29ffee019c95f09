"""Issue 24 item 4: a full disk (or a refused write) ends a batch command with one line and its own exit code.

The line names the file and the system's reason, says finished work is kept and how to go on; nothing finished is
lost, and ``--resume`` after a full disk ends with the rows of a run that never met one. The disk fills up through
:mod:`tests.support.faults` (ENOSPC after N rows, as the system gives it), in a real ``ceb`` process for ``score``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_IO, Command
from ceb.data import write_stream
from ceb.pipeline import read_rows
from tests.support.builders import step, trajectory
from tests.support.faults import full_disk_open

# Each case scores a run twice, most in a child process: half a minute apiece on a loaded machine.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
NO_SPACE = os.strerror(errno.ENOSPC)
runner = CliRunner()

# Run ``ceb`` on a disk under argv[1] that is full after argv[2] rows of scores.jsonl.
FULL_DISK_CEB = """
import sys
from pathlib import Path
from tests.support.faults import full_disk_open
Path.open = full_disk_open(Path(sys.argv[1]), int(sys.argv[2]))
from ceb.cli import main
sys.argv = ["ceb", *sys.argv[3:]]
main()
"""


def _streams(tmp: Path) -> list[str]:
    files = []
    for s in range(2):
        steps = [step(f"grep item{t} /data", f"line {t}", label=t % 2) for t in range(4)]
        trajs = [trajectory(f"s{s}-t{i}", *steps[: 2 + i % 3]) for i in range(8)]
        files.append(str(write_stream(tmp / f"stream{s}.jsonl", trajs)))
    return files


def _lines(path: Path) -> list[bytes]:
    return sorted(line for line in path.read_bytes().split(b"\n") if line.strip())


def _one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


def test_score_on_a_full_disk_says_so_in_one_line_keeps_its_rows_and_resumes_to_the_same_rows(tmp_path: Path) -> None:
    files = _streams(tmp_path)
    full = tmp_path / "full"
    assert runner.invoke(app, ["--progress", "off", "score", *files, "--out", str(full)]).exit_code == 0
    run = tmp_path / "disk" / "run"
    args = ["--progress", "off", "score", *files, "--out", str(run)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK_CEB, str(tmp_path / "disk"), "40", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == EXIT_IO, proc.stderr
    line = " ".join(_one_line(proc.stderr).split())
    scores = run / "scores.jsonl"
    assert f"error: {scores}: {NO_SPACE};" in line
    assert f"every finished step is kept in {scores}" in line
    assert f"free some space, then continue with the same command and --resume {run}" in line
    # The 40 rows written before the disk filled are whole rows of the uninterrupted run; the 41st is torn.
    kept = [line for line in scores.read_bytes().split(b"\n")[:-1]]
    assert len(kept) == 40 and set(kept) <= set(_lines(full / "scores.jsonl"))
    assert len(list(read_rows(scores))) == 40
    resumed = runner.invoke(app, ["--progress", "off", "score", *files, "--resume", str(run)])
    assert resumed.exit_code == 0, resumed.output
    for name in ("scores.jsonl", "hindsight.jsonl"):
        assert _lines(run / name) == _lines(full / name), name
    for bank in (full / "banks").glob("*.json"):
        assert (run / "banks" / bank.name).read_bytes() == bank.read_bytes(), bank.name


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    result = runner.invoke(app, ["--progress", "off", "score", *_streams(tmp_path), "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize(
    ("command", "written"),
    [
        (["metrics", "{run}"], "{run}/metrics.json"),
        (["export", "{run}", "--format", "csv"], "{run}/scores.csv"),
        (["report", "{run}", "--boot", "10"], "cannot write the report to {run}/report"),
        (
            [
                "convert",
                "mind2web",
                "--tasks",
                str(FIXTURES / "mind2web"),
                "--predictions",
                str(FIXTURES / "mind2web" / "predictions.jsonl"),
                "--out",
                "{run}/streams",
            ],
            "{run}/",
        ),
    ],
)
def test_every_batch_command_on_a_full_disk_says_so_in_one_line_and_loses_nothing(
    command: list[str], written: str, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    monkeypatch.setattr(Path, "open", full_disk_open(run_dir, 0))
    result = runner.invoke(app, ["--progress", "off", *(arg.format(run=run_dir) for arg in command)])
    assert result.exit_code == EXIT_IO, result.output
    line = " ".join(_one_line(result.stderr).split())
    assert line.startswith(f"error: {written.format(run=run_dir)}") and f": {NO_SPACE};" in line, line
    assert "nothing finished is lost; free some space, then run the same command again" in line
    assert {p: p.read_bytes() for p in before} == before  # metrics.json too: replaced whole or not at all


@pytest.mark.parametrize(
    ("raised", "code", "line"),
    [
        (OSError(errno.EROFS, "Read-only file system", "/r/x"), EXIT_IO, "error: /r/x: Read-only file system;"),
        (PermissionError(errno.EACCES, "Permission denied", "/r/x"), EXIT_IO, "error: /r/x: Permission denied;"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/r/x"), EXIT_ERROR, "error: /r/x: No such"),
    ],
)
def test_a_storage_fault_inside_task_groups_is_unwrapped_to_its_one_line(raised: OSError, code: int, line: str) -> None:
    test_app = typer.Typer()

    def boom() -> None:
        also = OSError(errno.ENOSPC, NO_SPACE)  # a second failure while stopping, without a file name
        raise ExceptionGroup("lanes", [ExceptionGroup("writer", [raised]), also])

    test_app.command("boom", cls=Command)(boom)
    test_app.command("other")(lambda: None)
    result = runner.invoke(test_app, ["boom"])
    assert result.exit_code == code, result.output
    assert _one_line(result.stderr).startswith(line)
    assert ("run the same command again" in result.stderr) == (code == EXIT_IO)


def test_grid_on_a_full_disk_names_its_own_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _streams(tmp_path)
    for name in ("full", "disk"):
        toml = f'methods = ["ceb", "static"]\n[grid]\nstreams = {files!r}\nout = "runs/{name}"\n'.replace("'", '"')
        (tmp_path / f"{name}.toml").write_text(toml)
    assert runner.invoke(app, ["--progress", "off", "grid", str(tmp_path / "full.toml")]).exit_code == 0
    with monkeypatch.context() as patch:
        patch.setattr(Path, "open", full_disk_open(tmp_path / "runs" / "disk", 25))
        result = runner.invoke(app, ["--progress", "off", "grid", str(tmp_path / "disk.toml")])
    assert result.exit_code == EXIT_IO, result.output
    *_, line = result.stderr.strip().splitlines()
    assert "Traceback" not in result.output and f": {NO_SPACE};" in line
    assert " ".join(line.split()).endswith(f"then continue with ceb grid {tmp_path / 'disk.toml'} --resume")
    resumed = runner.invoke(app, ["--progress", "off", "grid", str(tmp_path / "disk.toml"), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    for name in ("scores.jsonl", "hindsight.jsonl"):
        assert _lines(tmp_path / "runs" / "disk" / name) == _lines(tmp_path / "runs" / "full" / name), name


def test_score_on_a_disk_full_from_the_start_says_to_run_it_again_not_to_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _streams(tmp_path)
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(Path, "open", full_disk_open(tmp_path, 0))
        result = runner.invoke(app, ["--progress", "off", "score", *files, "--out", str(run)])
    assert result.exit_code == EXIT_IO, result.output
    line = " ".join(_one_line(result.stderr).split())
    assert line.startswith(f"error: {run / 'config.json'}: {NO_SPACE};") and "--resume" not in line
    assert line.endswith("nothing finished is lost; free some space, then run the same command again")
    assert not run.exists()  # nothing was started: nothing to resume, nothing in the way
    assert runner.invoke(app, ["--progress", "off", "score", *files, "--out", str(run)]).exit_code == 0
