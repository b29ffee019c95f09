"""Speculation against a real vLLM server: the speculating run's rows are the strict run's.

A real server need not answer a request the same way twice (batching changes the numerics, the hindsight votes
sample), so both runs go through the reply cache, sampled votes included: the strict run fills it, and every
request the speculating run shares with the strict order is answered as the strict run was. What it asks ahead
and discards, the cache has never seen: the real model answers it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ceb.config import RunConfig, load_config
from ceb.data import convert_intercode, read_stream
from ceb.pipeline import run_scoring
from tests.support.lane_order import timing_free_rows as rows
from tests.support.paths import INTERCODE
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(2400)]


async def test_speculating_rows_equal_strict_rows_on_real_vllm(vllm_server: VLLMServer, tmp_path: Path) -> None:
    convert_intercode(INTERCODE, tmp_path / "streams", datasets=("bash",))
    stream = read_stream([tmp_path / "streams" / "intercode-bash-gpt-4.jsonl"])[:3]
    cache = {"mode": "read-write", "path": str(tmp_path / "cache.sqlite"), "nondeterministic": True}
    backend = {"name": "openai", "base_url": vllm_server.base_url, "model": vllm_server.model, "max_concurrency": 4}

    def config(speculation: int) -> RunConfig:
        overrides = {"backend": backend, "methods": ["ceb"], "ceb": {"votes": 2}, "cache": cache}
        return load_config(overrides=overrides | {"speculation": speculation})

    strict = await run_scoring({"bash": stream}, config(0), tmp_path / "strict")
    ahead = await run_scoring({"bash": stream}, config(1), tmp_path / "ahead")
    for name in ("scores.jsonl", "hindsight.jsonl"):
        assert rows(tmp_path / "ahead", name) == rows(tmp_path / "strict", name), name
    assert strict.steps_failed == ahead.steps_failed == 0
    assert ahead.steps_kept_ahead + ahead.steps_discarded > 0  # it did ask ahead
