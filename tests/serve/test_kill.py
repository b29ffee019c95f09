"""SIGKILL or SIGTERM a real `ceb serve` under load, restart it: every acknowledged trajectory is banked, once.

SIGTERM also answers the requests in flight before the process exits (0).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest

from ceb.bank import BankJournal
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

RUN_PY = Path(__file__).resolve().parents[2] / "run.py"
STREAMS = ("alpha", "beta", "gamma")


def _start(state: Path, log: Path, *args: str) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, str(RUN_PY), "serve", "--port", "0", "--state-dir", str(state), *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "NO_COLOR": "1"},
        )
    assert proc.stdout is not None
    with proc.stdout:
        line = proc.stdout.readline().decode()
    assert "listening on" in line, line + log.read_text()
    return proc, line.rsplit(" ", 1)[-1].strip()


def _trajectory(stream: str, i: int) -> dict[str, Any]:
    steps = [
        {"state": "", "action": f"grep item{i % 7} /data/{stream}", "observation": f"line {i % 5}"},
        {"state": f"line {i % 5}", "action": f"wc -l /data/{i}", "observation": f"{i} /data/{i}"},
    ]
    return {
        "stream": stream,
        "trajectory": {"id": f"{stream}-{i}", "task": f"count item{i % 7}", "domain": "shell", "steps": steps},
    }


async def _load(url: str, acked: list[str], stop: anyio.Event) -> None:
    async def client(stream: str, worker: int) -> None:
        async with aiohttp.ClientSession() as session:
            i = worker
            while not stop.is_set():
                body = _trajectory(stream, i)
                score = {
                    "stream": stream,
                    "trajectory_id": body["trajectory"]["id"],
                    "task": body["trajectory"]["task"],
                    "domain": "shell",
                    "action": body["trajectory"]["steps"][0]["action"],
                }
                try:
                    async with session.post(f"{url}/v1/score", json=score) as r:
                        assert r.status == 200, await r.text()
                    async with session.post(f"{url}/v1/trajectories", json=body) as r:
                        if r.status == 202:
                            acked.append((await r.json())["trajectory_id"])
                except (aiohttp.ClientError, ConnectionError):
                    return  # the server is gone
                i += 4

    async with anyio.create_task_group() as tg:
        for stream in STREAMS:
            for worker in range(4):
                tg.start_soon(client, stream, worker)


@pytest.mark.parametrize("snapshot_every", [None, 2], ids=["default", "snapshot-every-2"])
async def test_every_acknowledged_trajectory_survives_kill_9(tmp_path: Path, snapshot_every: int | None) -> None:
    state = tmp_path / "state"
    log = tmp_path / "serve.log"
    # Snapshots every 2 updates (when the records since are half the bank's): the kill may land in one.
    config = tmp_path / "gate.toml"
    config.write_text(f"[gate]\nsnapshot_every = {snapshot_every}\n" if snapshot_every else "")
    proc, url = _start(state, log, "--config", str(config))
    acked: list[str] = []
    stop = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_load, url, acked, stop)
            while len(acked) < 150:  # well into the load, with updates in flight
                await anyio.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            await anyio.to_thread.run_sync(proc.wait)
            stop.set()
    finally:
        proc.kill()
    assert proc.returncode == -signal.SIGKILL

    # fewer streams than the state holds: all come back anyway
    proc, url = _start(state, log, "--config", str(config), "--max-streams", "2")
    replays = []
    try:
        async with aiohttp.ClientSession() as session:
            with anyio.fail_after(60):
                while True:
                    async with session.get(f"{url}/v1/streams") as r:
                        stats = (await r.json())["streams"]
                    if set(stats) == set(STREAMS) and all(s["pending"] == 0 for s in stats.values()):
                        break
                    await anyio.sleep(0.05)
            for tid in acked:  # a client retrying every acknowledged trajectory after the crash
                stream, i = tid.rsplit("-", 1)
                async with session.post(f"{url}/v1/trajectories", json=_trajectory(stream, int(i))) as r:
                    replays.append((r.status, r.headers.get("Idempotent-Replayed")))
            async with session.post(f"{url}/v1/trajectories", json=_trajectory("delta", 0)) as r:
                assert r.status == 409 and "gate.max_streams = 2" in (await r.json())["error"]
            async with session.get(f"{url}/v1/streams") as r:
                after = (await r.json())["streams"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()

    banked: Counter[tuple[str, int]] = Counter()
    for stream in STREAMS:
        with BankJournal.open(state / stream / "bank.journal") as journal:
            banked.update((r.trajectory_id, r.step) for r in journal.bank.records)
            assert journal.mark == stats[stream]["accepted"]
    assert {tid for tid, _ in banked} >= set(acked)
    assert set(banked.values()) == {1}  # nothing applied twice
    assert set(replays) == {(202, "true")} and len(replays) == len(acked)
    assert {s: a["accepted"] for s, a in after.items()} == {s: a["accepted"] for s, a in stats.items()}
    if snapshot_every:  # the banks did come back from snapshots
        assert all(b'"snapshot"' in (state / s / "bank.journal").read_bytes().split(b"\n")[1] for s in STREAMS)


def _answer(body: dict[str, Any], i: int, delay_s: float) -> Reply:
    """The critic (slow, so that scores are in flight) and the hindsight votes (one label per step)."""
    schema = body["response_format"]["json_schema"]["schema"]
    if "labels" in schema["properties"]:
        n = schema["properties"]["labels"]["minItems"]
        return Reply(orjson.dumps({"labels": [1] * n}).decode(), delay_s=delay_s / 4)
    return Reply('{"score": 0.7, "reason": "ok"}', delay_s=delay_s)


@pytest.mark.serial  # its drain deadline is wall time: a loaded machine misses it
async def test_sigterm_answers_the_requests_in_flight_and_loses_no_acknowledged_trajectory(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    state = tmp_path / "state"
    log = tmp_path / "serve.log"
    openai_server.responder = lambda body, i: _answer(body, i, delay_s=1.5)
    endpoint = ("--backend", "openai", "--base-url", openai_server.base_url, "--model", openai_server.model)
    proc, url = _start(state, log, *endpoint)
    acked: list[str] = []
    stop = anyio.Event()
    scores: list[int | str] = []

    async def one_score(session: aiohttp.ClientSession, n: int) -> None:
        body = {"stream": "alpha", "trajectory_id": f"s-{n}", "task": "t", "domain": "shell", "action": f"ls {n}"}
        try:
            async with session.post(f"{url}/v1/score", json=body) as r:
                scores.append(r.status if r.status != 200 else (await r.json())["status"])
        except (aiohttp.ClientError, ConnectionError) as exc:
            scores.append(repr(exc))

    def critic_calls() -> int:
        return sum(
            "labels" not in b["response_format"]["json_schema"]["schema"]["properties"] for b in openai_server.requests
        )

    try:
        async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
            tg.start_soon(_load, url, acked, stop)  # trajectories acknowledged while hindsight runs behind
            with anyio.fail_after(60):
                while len(acked) < 30:
                    await anyio.sleep(0.05)
                before = critic_calls()
                for n in range(6):
                    tg.start_soon(one_score, session, n)
                while critic_calls() < before + 6:  # each of the six waits on the critic, inside the server
                    await anyio.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            with anyio.fail_after(60):
                await anyio.to_thread.run_sync(proc.wait)
            stop.set()
    finally:
        proc.kill()
    assert proc.returncode == 0, log.read_text()
    assert scores == ["scored"] * 6, scores  # drained: every score in flight was answered, none cut off

    openai_server.responder = lambda body, i: _answer(body, i, delay_s=0)
    proc, url = _start(state, log, *endpoint)
    try:
        async with aiohttp.ClientSession() as session:
            with anyio.fail_after(60):
                while True:
                    async with session.get(f"{url}/v1/streams") as r:
                        stats = (await r.json())["streams"]
                    if set(STREAMS) <= set(stats) and all(s["pending"] == 0 for s in stats.values()):
                        break
                    await anyio.sleep(0.05)
            replays = []
            for tid in acked:
                stream, i = tid.rsplit("-", 1)
                async with session.post(f"{url}/v1/trajectories", json=_trajectory(stream, int(i))) as r:
                    replays.append((r.status, r.headers.get("Idempotent-Replayed")))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()

    banked: Counter[tuple[str, int]] = Counter()
    for stream in STREAMS:
        with BankJournal.open(state / stream / "bank.journal") as journal:
            banked.update((r.trajectory_id, r.step) for r in journal.bank.records)
    assert {tid for tid, _ in banked} >= set(acked)  # every acknowledged trajectory is in its bank
    assert set(banked.values()) == {1}  # and once
    assert set(replays) == {(202, "true")} and len(replays) == len(acked)
