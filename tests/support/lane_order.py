"""The strict lane order of the bank-free methods, as the reference the step pool's rows must equal.

Before the step pool (issue 39) every method ran as a :class:`~ceb.pipeline.lane.Lane`: one stream order, one
trajectory after the other, one step at a time. :func:`lane_order_rows` runs exactly that, one lane per stream,
order and bank-free method, and returns the rows it writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.pipeline.lane import Lane
from ceb.pipeline.planning import stream_order
from ceb.pipeline.results import StepRow, read_rows
from ceb.stages.assembly import Stages, build_critic
from ceb.stages.methods import resolve_method

TIMING = ("latency_s", "queue_s")
COST = ("requests", "retries", "retry_reason", "prompt_tokens", "completion_tokens")
COPY = ("status", "reused_from")


async def lane_order_rows(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, stages: Stages
) -> list[StepRow]:
    """The step rows of every bank-free method of ``config``, each order of each stream scored as one strict lane."""
    rows: list[StepRow] = []

    async def emit(row: Any) -> None:
        rows.append(row)

    for method in (resolve_method(m) for m in config.methods):
        if method.use_bank:
            continue
        critic = build_critic(method, config, stages)
        for name, trajs in streams.items():
            for order in range(config.orders):
                trajectories = stream_order(trajs, order, config.order_seed)[: config.max_trajectories]
                lane = Lane(name, method, trajectories, stages, config, emit, order=order, critic_stage=critic)
                await lane.run()
    return rows


def comparable(row: Mapping[str, Any], leave_out: Sequence[str] = TIMING + COST + COPY) -> dict[str, Any]:
    """``row`` without the fields in which a copy, or another schedule, may differ (timing, cost, copy marks)."""
    return {k: v for k, v in row.items() if k not in leave_out}


def timing_free_rows(run_dir: Path, name: str) -> list[bytes]:
    """The rows of the result file ``name`` of ``run_dir`` in file order, without timing fields, keys sorted."""
    out = []
    for r in read_rows(run_dir / name):
        for f in TIMING:
            r.pop(f, None)
        out.append(orjson.dumps(r, option=orjson.OPT_SORT_KEYS))
    return out
