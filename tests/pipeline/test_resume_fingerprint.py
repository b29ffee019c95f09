"""Issue 33 item 3: a stream's fingerprint is its content, not where it was read from; a change is said as what changed.

A run's resume and ``ceb merge`` compare the fingerprints recorded in ``config.json``. Before, each trajectory's
``source`` (``path:line``) was hashed, so the same bytes named by another path (copied, absolute, mounted elsewhere
on another node) were refused as "content changed". Runs recorded that way still resume from their own paths.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import read_stream, write_stream
from ceb.pipeline.resume import diff_fingerprints, legacy_stream_fingerprint, stream_fingerprint
from ceb.pipeline.rundir import RunDir
from tests.support.builders import step, trajectory

runner = CliRunner()


def _trajectories(n: int = 4) -> list:
    return [trajectory(f"t{i}", step(f"ls {i}", "x", label=1), step("rm -rf tmp", "denied", label=0)) for i in range(n)]


@pytest.fixture
def stream(tmp_path: Path) -> Path:
    path = tmp_path / "here" / "bash.jsonl"
    path.parent.mkdir()
    write_stream(path, _trajectories())
    return path


def _score(*args: str) -> str:
    result = runner.invoke(app, ["score", *args, "--methods", "ceb,static"])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_same_bytes_at_another_path_fingerprint_the_same(stream: Path, tmp_path: Path) -> None:
    copy = tmp_path / "elsewhere" / "bash.jsonl"
    copy.parent.mkdir()
    shutil.copyfile(stream, copy)
    here, there = read_stream([stream]), read_stream([copy])
    assert here[0].source != there[0].source  # read from two paths ...
    assert stream_fingerprint(here) == stream_fingerprint(there)  # ... the same content
    assert legacy_stream_fingerprint(here) != legacy_stream_fingerprint(there)  # what version 1 got wrong


def test_a_run_resumes_from_a_copy_and_from_an_absolute_path(
    stream: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(stream.parent)
    run = tmp_path / "run"
    _score("bash.jsonl", "--out", str(run))  # a relative path
    _score(str(stream.resolve()), "--resume", str(run))  # the same file, named by its absolute path
    copy = tmp_path / "node2" / "bash.jsonl"
    copy.parent.mkdir()
    shutil.copyfile(stream, copy)
    _score(str(copy), "--resume", str(run))  # a copy, as on a node that mounts the data elsewhere


def test_what_changed_is_said() -> None:
    trajs = _trajectories()
    before = {"config": {}, "streams": {"s": stream_fingerprint(trajs)}}

    def change(new: list) -> list[str]:
        return diff_fingerprints(before, {"config": {}, "streams": {"s": stream_fingerprint(new)}})

    assert change(trajs) == []
    assert change(trajs[:3]) == ["stream s: 4 trajectories in the run, 3 now"]
    assert change([trajs[1], trajs[0], *trajs[2:]]) == [
        "stream s: the same number of trajectories (4), but other ids or another order"
    ]
    relabelled = [replace(trajs[0], steps=(replace(trajs[0].steps[0], label=0), *trajs[0].steps[1:])), *trajs[1:]]
    (content,) = change(relabelled)
    assert content.startswith("stream s: content changed (the same 4 trajectory ids in the same order")


def test_a_run_recorded_with_the_old_fingerprint_resumes_from_its_own_paths(stream: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _score(str(stream), "--out", str(run))
    # As an older ceb recorded it: a bare SHA-256 string that hashed each trajectory's path:line.
    doc = orjson.loads(RunDir(run).config_file.read_bytes())
    (name,) = doc["fingerprints"]["streams"]
    doc["fingerprints"]["streams"][name] = legacy_stream_fingerprint(read_stream([stream]))
    RunDir(run).config_file.write_bytes(orjson.dumps(doc))
    _score(str(stream), "--resume", str(run))  # the same files at the same paths: as before
    copy = tmp_path / "elsewhere" / "bash.jsonl"
    copy.parent.mkdir()
    shutil.copyfile(stream, copy)
    moved = runner.invoke(app, ["score", str(copy), "--resume", str(run), "--methods", "ceb,static"])
    assert moved.exit_code == EXIT_ERROR
    assert "recorded by an older ceb, which hashed each file's path" in moved.output
    assert "Traceback" not in moved.output
