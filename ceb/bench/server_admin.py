"""What the benchmarks ask of a running vLLM server besides completions: its Prometheus counters and an empty cache."""

from __future__ import annotations

import aiohttp

from ceb.backends.server_metrics import ServerMetrics, parse_metrics

__all__ = ["reset_prefix_cache", "server_metrics"]


async def server_metrics(session: aiohttp.ClientSession, root: str) -> ServerMetrics:
    """The server's ``/metrics`` at ``root`` (the address without ``/v1``), parsed.

    Raises:
        aiohttp.ClientResponseError: The server answered with an error status.
    """
    async with session.get(f"{root}/metrics") as resp:
        resp.raise_for_status()
        return parse_metrics(await resp.text())


async def reset_prefix_cache(session: aiohttp.ClientSession, root: str) -> bool:
    """Empty the prefix cache (``POST /reset_prefix_cache``, on ``VLLM_SERVER_DEV_MODE=1`` servers); whether it did."""
    async with session.post(f"{root}/reset_prefix_cache") as resp:
        return resp.status == 200
