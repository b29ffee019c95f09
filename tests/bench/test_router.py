"""``ceb bench router``'s comparison holds only from empty caches: replicas that cannot empty theirs are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from ceb.bench.router import RouterBenchSettings, run_router_bench


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(text="vllm:prefix_cache_queries_total 100.0\nvllm:prefix_cache_hits_total 40.0\n")


@pytest.mark.anyio
async def test_replicas_that_cannot_empty_their_prefix_cache_are_refused_before_any_arm_runs(tmp_path: Path) -> None:
    # A vLLM server not in dev mode: /metrics answers, POST /reset_prefix_cache is a 404. Measured anyway, each
    # consistent_hash run would follow a round_robin run over the same prompts and find them cached.
    app = web.Application()
    app.router.add_get("/metrics", _metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    root = f"http://127.0.0.1:{runner.addresses[0][1]}"
    work = tmp_path / "work"
    try:
        with pytest.raises(RuntimeError, match=r"reset_prefix_cache.*VLLM_SERVER_DEV_MODE=1"):
            await run_router_bench([], [root, f"{root}/v1"], "m", RouterBenchSettings(repeats=1), work)
    finally:
        await runner.cleanup()
    assert not list(work.glob("router-*.log"))  # no router was started, no arm run
