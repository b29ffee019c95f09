"""The gate's state directory: one gate at a time, writable from the start, and a full disk acknowledges nothing."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from ceb.errors import RunError
from ceb.gate import Gate
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


async def test_a_second_gate_on_the_same_state_dir_is_refused_naming_the_directory_and_the_holder(
    tmp_path: Path,
) -> None:
    async with Gate(state_dir=tmp_path) as gate:
        await gate.finish("s", trajectory("t0", step("ls", "a")))
        # flock is per open file description, so a second gate in this process stands in for a second process.
        with pytest.raises(RunError, match=rf"^{tmp_path} is in use by another ceb process \(pid {os.getpid()}\)"):
            async with Gate(state_dir=tmp_path):
                pass
        assert (await gate.finish("s", trajectory("t1", step("cat a", "b")))).seq == 2
    async with Gate(state_dir=tmp_path) as gate:  # released at the end, and each seq given once
        assert gate.stats("s")["streams"]["s"]["accepted"] == 2
        assert [orjson.loads(line)["seq"] for line in (tmp_path / "s" / "inbox.jsonl").read_bytes().splitlines()] == [
            1,
            2,
        ]


_HOLD = """
import sys, anyio
from ceb.gate import Gate

async def main() -> None:
    async with Gate(state_dir=sys.argv[1]):
        print("holding", flush=True)
        await anyio.sleep_forever()

anyio.run(main)
"""


async def test_a_sigkilled_gate_leaves_no_stale_lock(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", _HOLD, str(tmp_path)]
    with subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as holder:
        try:
            assert holder.stdout is not None
            first = holder.stdout.readline()  # the holder says when it holds the lock: no sleep
            assert first == "holding\n", first + holder.stdout.read()
            with pytest.raises(RunError, match=rf"{tmp_path} is in use by another ceb process \(pid {holder.pid}\)"):
                async with Gate(state_dir=tmp_path):
                    pass
        finally:
            holder.send_signal(signal.SIGKILL)
            holder.wait(timeout=30)
    assert holder.returncode == -signal.SIGKILL
    async with Gate(state_dir=tmp_path) as gate:  # the kernel released it with the process
        assert (await gate.finish("s", trajectory("t0", step("ls", "a")))).seq == 1


def _unwritable(tmp_path: Path, kind: str) -> Path:
    if kind == "a file":
        (tmp_path / "state").write_text("not a directory")
        return tmp_path / "state"
    if kind == "under /proc":
        return Path("/proc/ceb-state-test")
    if os.geteuid() == 0:
        pytest.skip("root writes through a read-only mode; the file and /proc cases stand in for it")
    (tmp_path / "ro").mkdir(mode=0o555)
    return tmp_path / "ro" / "state"


@pytest.mark.parametrize("kind", ["a file", "under /proc", "a read-only directory"])
async def test_a_state_dir_that_cannot_be_written_stops_the_gate_at_start(tmp_path: Path, kind: str) -> None:
    state = _unwritable(tmp_path, kind)
    with pytest.raises(RunError, match=rf"^cannot use {state} as a gate state directory: ") as info:
        async with Gate(state_dir=state):
            pass
    assert "\n" not in str(info.value)


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _inbox(state: Path) -> list[tuple[int, str]]:
    lines = (state / "s" / "inbox.jsonl").read_bytes().splitlines()
    return [(doc["seq"], doc["trajectory"]["id"]) for doc in map(orjson.loads, lines)]


async def test_a_full_disk_acknowledges_nothing_and_a_retry_after_space_returns_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traj = trajectory("t0", step("ls", "a"))
    async with Gate(state_dir=tmp_path) as gate:
        await gate.finish("s", trajectory("warm", step("pwd", "/")))
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", _no_space)  # the line is written, then the disk cannot make it durable
            with pytest.raises(OSError) as info:
                await gate.accept("s", traj)
        assert info.value.errno == errno.ENOSPC
        assert gate.stats("s")["streams"]["s"]["accepted"] == 1 and _inbox(tmp_path) == [(1, "warm")]
        assert (await gate.finish("s", traj)).seq == 2  # the retry is the first acknowledgement
    assert _inbox(tmp_path) == [(1, "warm"), (2, "t0")]
    async with Gate(state_dir=tmp_path) as gate:
        assert gate.stats("s")["streams"]["s"]["accepted"] == 2


async def test_a_line_torn_by_a_full_disk_is_cut_before_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write = os.write

    def half_then_full(fd: int, data: bytes) -> int:  # the disk fills in the middle of the line
        write(fd, bytes(data)[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async with Gate(state_dir=tmp_path) as gate:
        with monkeypatch.context() as m:
            m.setattr(os, "write", half_then_full)
            with pytest.raises(OSError):
                await gate.accept("s", trajectory("t0", step("ls", "a")))
        await gate.finish("s", trajectory("t1", step("cat a", "b")))
    assert _inbox(tmp_path) == [(1, "t1")]
    async with Gate(state_dir=tmp_path) as gate:
        assert gate.stats("s")["streams"]["s"]["accepted"] == 1
