"""The step pool against a real vLLM server: its rows are the strict lane order's (issue 39, item 1).

A real server need not answer one request the same way twice (the batch a request lands in moves bf16 sums), so
the pool's run goes through the reply cache and the lane order then reads that cache only (``cache.mode =
"read"``): every request the lane order sends must be one the pool sent (no miss), and the rows built from the
same replies must be the same rows.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import orjson
import pytest

from ceb.config import load_config
from ceb.data import convert_intercode, read_stream
from ceb.pipeline import read_rows, run_scoring
from ceb.stages.assembly import build_stages
from tests.support.lane_order import comparable, lane_order_rows
from tests.support.paths import INTERCODE
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(1800)]

METHODS = ["static", "ppl", "ptrue", "verbalized"]
"""``static`` reads its own earlier scores; the others read nothing across steps, one per kind of request."""


def _sorted(rows: list[dict]) -> list[bytes]:
    return sorted(orjson.dumps(comparable(r), option=orjson.OPT_SORT_KEYS) for r in rows)


async def test_the_pool_sends_the_lane_orders_requests_and_writes_its_rows_on_real_vllm(
    vllm_server: VLLMServer, tmp_path: Path
) -> None:
    convert_intercode(INTERCODE, tmp_path / "streams", datasets=("bash",))
    streams = {"bash": read_stream([tmp_path / "streams" / "intercode-bash-gpt-4.jsonl"])[:2]}
    backend = {"name": "openai", "base_url": vllm_server.base_url, "model": vllm_server.model, "max_concurrency": 8}
    cache = {"path": str(tmp_path / "cache.sqlite"), "nondeterministic": True}

    def config(mode: str):  # type: ignore[no-untyped-def]
        return load_config(overrides={"methods": METHODS, "backend": backend, "cache": cache | {"mode": mode}})

    summary = await run_scoring(streams, config("read-write"), tmp_path / "pool")
    assert summary.steps_failed == 0
    async with build_stages(config("read")) as stages:
        strict = await lane_order_rows(streams, config("read"), stages)
        assert stages.cache is not None
        counts = stages.cache.counts
    assert counts.misses == counts.uncacheable == 0 and counts.hits > 0, counts
    pooled = [dict(r) for r in read_rows(tmp_path / "pool" / "scores.jsonl")]
    assert len(pooled) == len(strict) > 0
    assert _sorted(pooled) == _sorted([asdict(r) for r in strict])
