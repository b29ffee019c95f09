"""``ceb bench routing``'s router part: from empty caches only, and with the arms' order balanced against drift."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ceb.bench import routing as bench
from ceb.bench.routing import ROUTER_ARMS, ArmMean, ArmRun, ReplicaCache, RoutingBench, compare, run_router_bench


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(text="vllm:prefix_cache_queries_total 100.0\nvllm:prefix_cache_hits_total 40.0\n")


async def _reset(request: web.Request) -> web.Response:
    return web.Response(text="")


@contextlib.asynccontextmanager
async def _replica(*, dev_mode: bool) -> AsyncIterator[str]:
    """A stand-in for a vLLM replica: ``/metrics`` with prefix-cache counters, the reset route in dev mode only."""
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    if dev_mode:
        app.router.add_post("/reset_prefix_cache", _reset)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.anyio
async def test_each_repeat_runs_the_arms_in_the_other_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # round_robin first in every pair would hand consistent_hash the later slot each time: on a machine whose load
    # falls (or rises) during the run, that alone moves the ratio. ABBA cancels a steady drift.
    ran: list[str] = []

    def shards(streams: Any, base_url: str, *args: Any) -> tuple[float, int, int]:
        ran.append(base_url.rsplit("/", 1)[1])
        return 1.0, 1, 0

    monkeypatch.setattr(bench, "_shards", shards)
    routers = {arm: f"http://router/{arm}" for arm in ROUTER_ARMS}
    async with _replica(dev_mode=True) as root:
        doc = await run_router_bench([], routers, [root, root], RoutingBench(model="m", repeats=4), tmp_path)
    first, second = ROUTER_ARMS
    assert ran == [first, second, second, first, first, second, second, first]
    assert [r.arm for r in doc.runs] == ran and doc.ratio == 1.0


@pytest.mark.anyio
async def test_replicas_that_cannot_empty_their_prefix_cache_are_refused_before_any_arm_runs(tmp_path: Path) -> None:
    # A vLLM server not in dev mode: /metrics answers, POST /reset_prefix_cache is a 404. Measured anyway, each
    # consistent_hash run would follow a round_robin run over the same prompts and find them cached.
    work = tmp_path / "work"
    async with _replica(dev_mode=False) as root:
        with pytest.raises(RuntimeError, match=r"reset_prefix_cache.*VLLM_SERVER_DEV_MODE=1"):
            await run_router_bench([], {}, [root, f"{root}/v1"], RoutingBench(model="m", repeats=1), work)
    assert not work.exists() or not any(work.iterdir())  # no arm ran


def test_an_arms_hit_rate_pools_its_runs_tokens_and_its_makespan_is_their_mean() -> None:
    replica = (ReplicaCache("r", 100.0, 90.0, 0.9),)
    small = (ReplicaCache("r", 10.0, 0.0, 0.0),)
    runs = [
        ArmRun("a", 0, 10.0, 5, 0, True, replica),
        ArmRun("a", 1, 20.0, 5, 0, True, small),
        ArmRun("b", 0, 30.0, 5, 1, False),
    ]
    assert runs[2].hit_rate is None  # no tokens looked up: no rate
    c = compare((), runs, ("a", "b"))
    assert c.arms["a"] == ArmMean(15.0, 90.0 / 110.0)  # pooled, not the mean of 0.9 and 0
    assert c.arms["b"] == ArmMean(30.0, None)
    assert c.ratio == 0.5 and c.better == "a"
