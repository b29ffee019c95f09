"""``ceb serve`` refuses, at start, a state directory another gate holds or it cannot write: one line, exit 2."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.gate import SyncGate

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """A serve that got past its start returns at once instead of serving until Ctrl-C."""

    async def served(*args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr("ceb.serve.app.run_server", served)


def _refused(state: Path) -> str:
    result = runner.invoke(app, ["serve", "--state-dir", str(state), "--port", "0"])
    assert result.exit_code == EXIT_ERROR, result.output
    assert result.exc_info is None or result.exc_info[0] is SystemExit, result.exc_info
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    return lines[0]


def test_serve_on_a_state_dir_another_gate_holds_exits_2_naming_it_and_the_holder(tmp_path: Path) -> None:
    with SyncGate(state_dir=tmp_path):
        line = _refused(tmp_path)
    assert line == (
        f"error: {tmp_path} is in use by another ceb process (pid {os.getpid()}); wait for it to end, or use another "
        "directory"
    )
    assert runner.invoke(app, ["serve", "--state-dir", str(tmp_path), "--port", "0"]).exit_code == 0  # released


@pytest.mark.parametrize("where", ["a file", "/proc"])
def test_serve_on_a_state_dir_it_cannot_write_exits_2_naming_it(tmp_path: Path, where: str) -> None:
    state = tmp_path / "state" if where == "a file" else Path("/proc/ceb-serve-test")
    if where == "a file":
        state.write_text("not a directory")
    assert _refused(state).startswith(f"error: cannot use {state} as a gate state directory: ")


def test_a_disk_error_after_serving_started_is_not_blamed_on_the_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def fails_later(*args: Any, ready: Any = None, **kwargs: Any) -> None:
        ready("http://127.0.0.1:1")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # a bank journal write in the gate's worker

    monkeypatch.setattr("ceb.serve.app.run_server", fails_later)
    result = runner.invoke(app, ["serve", "--state-dir", str(tmp_path), "--port", "0"])
    assert result.exit_code == EXIT_ERROR and "Traceback" not in result.output
    assert result.output.splitlines()[-1] == f"error: the gate stopped ({tmp_path}): No space left on device"
