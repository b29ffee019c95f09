"""One process per run directory, and ``summary.json``: how each call ended and what it did."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

import anyio
import orjson
import pytest

from ceb.backends.base import ChatBackend, ChatRequest, Completion
from ceb.backends.scripted import ScriptedChat, ScriptedTransport
from ceb.bank import Bank
from ceb.config import load_config
from ceb.errors import RunError
from ceb.pipeline import run_scoring
from ceb.pipeline.rundir import RunDir
from ceb.stages import assembly
from tests.support.builders import default_reply, step, trajectory

pytestmark = pytest.mark.anyio


def _stream(n: int = 3) -> list:
    return [trajectory(f"t{i}", step(f"ls {i}", "a", label=1), step("cat a", "x", label=0)) for i in range(n)]


class GatedTransport(ScriptedTransport):
    """Scripted replies, each after ``gate(request)`` returns: a test holds requests back with it."""

    def __init__(self, gate: Callable[[ChatRequest], Awaitable[None]]) -> None:
        super().__init__(default_reply)
        self.gate = gate

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        await self.gate(request)
        return await super().send(request, endpoint)


def _summary(run: Path) -> dict:
    doc: dict = orjson.loads((run / "summary.json").read_bytes())
    return doc


async def test_a_second_process_on_the_same_run_directory_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["static"]})
    entered, release = anyio.Event(), anyio.Event()

    async def slow(request: ChatRequest) -> None:
        entered.set()
        await release.wait()

    chat = ChatBackend(GatedTransport(slow))
    async with anyio.create_task_group() as tg:
        stages = assembly.llm_stages(config, chat)
        tg.start_soon(partial(run_scoring, {"s": _stream()}, config, tmp_path, stages=stages))
        await entered.wait()
        # flock is per open file description, so a second open in this process stands in for a second process.
        busy = rf"{tmp_path} is in use by another ceb process \(pid {os.getpid()}\)"
        with pytest.raises(RunError, match=busy), RunDir(tmp_path).lock():
            pass
        release.set()
    assert _summary(tmp_path)["status"] == "finished"
    with RunDir(tmp_path).lock():  # released at the end
        assert (tmp_path / RunDir.LOCK).exists()


def test_a_file_where_the_run_directory_should_be_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(RunError, match=r"cannot use .*taken as a run directory"), RunDir(tmp_path / "taken").lock():
        pass


def test_a_directory_the_lock_created_and_nothing_used_is_removed(tmp_path: Path) -> None:
    with pytest.raises(ValueError), RunDir(tmp_path / "new").lock():
        raise ValueError("a bad setting, found after the lock")
    assert not (tmp_path / "new").exists()


async def test_summary_of_a_finished_run_counts_what_it_did(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["static", "ceb"]})
    stages = assembly.llm_stages(config, ScriptedChat(default_reply))
    summary = await run_scoring({"s": _stream()}, config, tmp_path, stages=stages)

    doc = _summary(tmp_path)
    assert doc["status"] == "finished" and doc["error"] is None
    assert doc["steps_scored"] == summary.steps_scored == 12 and doc["requests"] == summary.requests > 0
    assert doc["trajectories_voted"] == 3 and doc["wall_s"] > 0 and doc["started_at"] <= doc["ended_at"]


async def test_summary_lists_each_lanes_bank_with_the_order_apart_from_the_stream(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["static", "ceb"], "orders": 2})
    stages = assembly.llm_stages(config, ScriptedChat(default_reply))
    await run_scoring({"s": _stream()}, config, tmp_path, stages=stages)

    banks = {(b["stream"], b["order"], b["method"], b["critic"]): b for b in _summary(tmp_path)["banks"]}
    assert set(banks) == {("s", order, method, "") for order in (0, 1) for method in ("static", "ceb")}
    assert banks[("s", 1, "ceb", "")]["path"] == "banks/s__ceb__o1.json"
    assert banks[("s", 1, "ceb", "")]["records"] == len(Bank.load(tmp_path / "banks" / "s__ceb__o1.json")) > 0
    static = banks[("s", 0, "static", "")]
    assert (static["records"], static["path"]) == (0, None)


async def test_summary_of_a_failed_run_says_why(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["static"], "fail_on_error": 1, "critic": {"format_retries": 0}})
    stages = assembly.llm_stages(config, ScriptedChat(lambda r: "no json"))
    with pytest.raises(RunError, match="stopping"):
        await run_scoring({"s": _stream()}, config, tmp_path, stages=stages)

    doc = _summary(tmp_path)
    assert doc["status"] == "failed" and "stopping" in doc["error"] and doc["steps_failed"] >= 2


async def test_summary_of_an_interrupted_run_says_interrupted_and_keeps_its_counts(tmp_path: Path) -> None:
    config = load_config(overrides={"methods": ["static"]})
    calls = {"n": 0}

    async def stall_after_two(request: ChatRequest) -> None:
        calls["n"] += 1
        if calls["n"] > 2:
            await anyio.sleep_forever()

    stages = assembly.llm_stages(config, ChatBackend(GatedTransport(stall_after_two)))
    with anyio.move_on_after(1.0):
        await run_scoring({"s": _stream()}, config, tmp_path, stages=stages)

    doc = _summary(tmp_path)
    assert doc["status"] == "interrupted" and doc["steps_scored"] == 2
