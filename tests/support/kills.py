"""Kill a command mid-run for the kill-and-resume tests: a scoring run at a random row, a judging one mid-way."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import orjson

from tests.support.openai_server import OpenAITestServer, Reply
from tests.support.paths import REPO


async def kill_after_two_judged(server: OpenAITestServer, args: list[str], journal: Path) -> None:
    """Run ``python run.py ARGS`` against ``server`` one trajectory at a time, SIGKILL it while the third hangs, and
    check that the journal holds exactly the first two trajectories (``t0``, ``t1``)."""

    def slow_after_two(body: dict[str, Any], i: int) -> Reply:
        return Reply('{"labels": [1]}', delay_s=0 if i < 2 else 60)  # the third hangs until the kill

    server.responder = slow_after_two
    cmd = [sys.executable, str(REPO / "run.py"), *args, "--max-concurrency", "1"]
    cmd += ["--base-url", server.base_url, "--model", server.model]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"})
    try:
        with anyio.fail_after(60):
            while len(server.requests) < 3:  # two judged and journalled, the third in flight
                await anyio.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        await anyio.to_thread.run_sync(proc.wait)
    finally:
        proc.kill()
        proc.communicate()
    assert [orjson.loads(line)["trajectory"] for line in journal.read_bytes().splitlines()] == ["t0", "t1"]


def kill_at_a_random_row(proc: subprocess.Popen[bytes], scores: Path, seed: int, total: int) -> bool:
    """SIGKILL ``proc`` once a seeded random number of rows (1 to ``total - 1``) is in ``scores``, or after 120 s;
    whether it was killed with a part of the rows written (inside the run, not in its start-up or after it)."""
    target = random.Random(seed).randint(1, total - 1)
    deadline = time.monotonic() + 120
    while proc.poll() is None and time.monotonic() < deadline:
        if scores.exists() and scores.read_bytes().count(b"\n") >= target:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    return proc.returncode == -signal.SIGKILL and 0 < scores.read_bytes().count(b"\n") < total
