"""The step pool over the simulator: the rows of the strict lane order, with the trajectories in flight together."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import anyio
import orjson
import pytest

from ceb.config import RunConfig, load_config
from ceb.pipeline import read_rows, run_scoring
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages
from tests.sim.conftest import StartSim
from tests.support.builders import step, trajectory
from tests.support.lane_order import comparable, lane_order_rows

pytestmark = pytest.mark.anyio

BANK_FREE = ("static", "ppl", "me", "ptrue", "cot", "verbalized", "pro")


def _stream(n: int = 8) -> list:
    return [
        trajectory(
            f"t{i}",
            *(step(f"ls /data/{i}/{t}", f"file{i}{t}.txt", label=(i + t) % 2) for t in range(3)),
            task=f"list /data/{i}",
        )
        for i in range(n)
    ]


STREAMS = {"s": _stream()}


def _config(base_url: str, model: str) -> RunConfig:
    backend = {"name": "openai", "base_url": base_url, "model": model}
    return load_config(overrides={"methods": list(BANK_FREE), "backend": backend, "orders": 2})


def _rows(rows: Any) -> list[bytes]:
    return sorted(orjson.dumps(comparable(r), option=orjson.OPT_SORT_KEYS) for r in rows)


async def test_the_pool_writes_the_lane_orders_rows_with_many_trajectories_in_flight(tmp_path, start_sim: StartSim):
    sim = await start_sim(SimConfig(time_scale=0.05))
    config = _config(sim.base_url, sim.config.model)
    await run_scoring(STREAMS, config, tmp_path / "pool")
    peak = sim.stats.max_in_service
    async with build_stages(config) as stages:
        strict = await lane_order_rows(STREAMS, config, stages)
    pooled = list(read_rows(tmp_path / "pool" / "scores.jsonl"))
    assert len(pooled) == len(strict) == 2 * len(BANK_FREE) * 8 * 3
    assert _rows(pooled) == _rows(asdict(r) for r in strict)
    # The lanes of 7 methods x 2 orders kept at most one step each in flight (P(True) two requests, PRO's
    # sampling apart from its teacher forcing): the pool has the trajectories in flight together.
    assert peak > 2 * 2 * len(BANK_FREE)


async def test_a_pool_run_cancelled_anywhere_resumes_to_the_same_rows_asking_only_what_is_missing(
    tmp_path, start_sim: StartSim
):
    sim = await start_sim(SimConfig(time_scale=0.05))
    config = _config(sim.base_url, sim.config.model)
    await run_scoring(STREAMS, config, tmp_path / "full")
    full = list(read_rows(tmp_path / "full" / "scores.jsonl"))
    sources = [r for r in full if r["reused_from"] is None]
    for stop in (1, 5, 23):
        part = tmp_path / f"part{stop}"
        with anyio.CancelScope() as scope:
            seen = 0

            def on_row(row: object, scope: anyio.CancelScope = scope, stop: int = stop) -> None:
                nonlocal seen
                seen += 1
                if seen >= stop:
                    scope.cancel()

            await run_scoring(STREAMS, config, part, on_row=on_row)
        before = [r for r in read_rows(part / "scores.jsonl") if r["reused_from"] is None and r["status"] != "failed"]
        assert 0 < len(before) < len(sources)
        sim.stats.reset()
        summary = await run_scoring(STREAMS, config, part, resume=True)
        resumed = list(read_rows(part / "scores.jsonl"))
        assert _rows(resumed) == _rows(full)
        assert summary.steps_resumed == len(before)
        # Only the steps without a kept row were asked (besides the resume's preflight request).
        asked = sum(r["requests"] for r in resumed) - sum(r["requests"] for r in before)
        assert sim.stats.requests - 1 == asked > 0
