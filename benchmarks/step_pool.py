"""The step pool against the lane order: one stream of bank-free methods against the SIMULATED server (issue 39 (a)).

One stream of 40 web trajectories (synthetic, Mind2Web-shaped: ``[CLICK] <button> ...`` actions; 4 to 16 steps,
seeded), methods ``static, ppl, me, ptrue, verbalized``, against the simulator with ``max_num_seqs`` 256 in a
child process (``ceb sim-server``'s server). Two ways, in the same run, on the same server:

* the step pool (:mod:`ceb.pipeline.pool`), as ``ceb score`` runs it now;
* the lane order, as ``ceb score`` ran it before: one :class:`~ceb.pipeline.lane.Lane` per method, all at once,
  each strictly sequential (a trajectory after the other, a step after the other).

Printed: each way's wall time, the ratio, whether their rows are identical (timing and cost fields aside), and the
longest trajectory's own chain: the simulator's service time (its own model, :func:`benchmarks.pipeline.service_s`,
over the token counts it reported) of ``static``'s requests on the longest trajectory, which no schedule can beat.
Targets: the pool at least 10x faster than the lane order, and within 2x of that chain.
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from benchmarks.pipeline import service_s
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_config
from ceb.bench.processes import sim_process
from ceb.bench.result_files import save_results
from ceb.bench.scale import timed_scoring
from ceb.data.trajectory import Step, Trajectory
from ceb.logs import configure_logging
from ceb.pipeline import read_rows
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages

METHODS = ("static", "ppl", "me", "ptrue", "verbalized")
_APART = ("latency_s", "queue_s", "requests", "retries", "retry_reason", "prompt_tokens", "completion_tokens")
"""Row fields in which two schedules may differ: timing, and which method's row carries a shared request."""
TARGET = "pool >= 10x faster than the lane order, and within 2x of the longest trajectory's own chain"


_ACTIONS = ("[CLICK] <button> Item {t}", "[TYPE] <input> q -> shoes {t}", "[SELECT] <a> Page {t}")


def web_stream(n: int = 40, seed: int = 0) -> list[Trajectory]:
    """``n`` Mind2Web-shaped trajectories of 4 to 16 steps (synthetic: a load shape, not a data set)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        steps = tuple(
            Step(
                state=f"<html><body><h1>Shop {i}</h1><button id={t}>Item {t}</button><input name=q></body></html>",
                action=rng.choice(
                    ("[CLICK] <button> Item {t}", "[TYPE] <input> q -> shoes {t}", "[SELECT] <a> Page {t}")
                ).format(t=t),
                observation=f"page {t + 1} of shop {i}",
                label=rng.randint(0, 1),
            )
            for t in range(rng.randint(4, 16))
        )
        out.append(Trajectory(id=f"web-{i}", task=f"buy item {i} in shop {i}", domain="web", steps=steps))
    return out


async def lane_order(streams: dict[str, list[Trajectory]], config: Any, rows: list[dict[str, Any]]) -> float:
    """The old runner's schedule: every method's lane at once, each strictly sequential; wall seconds."""
    from ceb.pipeline.lane import Lane
    from ceb.stages.assembly import build_critic
    from ceb.stages.methods import resolve_method

    async def emit(row: Any) -> None:
        rows.append(asdict(row))

    async with build_stages(config) as stages:
        lanes = [
            Lane(name, m, trajs, stages, config, emit, critic_stage=build_critic(m, config, stages))
            for m in map(resolve_method, config.methods)
            for name, trajs in streams.items()
        ]
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for lane in lanes:
                tg.start_soon(lane.run)
        return time.perf_counter() - started


def longest_chain_s(rows: Sequence[dict[str, Any]], sim: SimConfig) -> tuple[str, float]:
    """The trajectory whose ``static`` chain takes longest, and that chain's service seconds."""
    chains: dict[str, float] = {}
    for r in rows:
        if r["method"] == "static" and r["requests"]:
            per = service_s(sim, r["prompt_tokens"] / r["requests"], r["completion_tokens"] / r["requests"])
            chains[r["trajectory"]] = chains.get(r["trajectory"], 0.0) + per * r["requests"]
    longest = max(chains, key=chains.__getitem__)
    return longest, chains[longest]


def run(work: Path, *, trajectories: int, time_scale: float, port: int | None) -> dict[str, Any]:
    """Both ways on one simulator; every figure (JSON-ready)."""
    sim = SimConfig(max_num_seqs=256, time_scale=time_scale)
    streams = {"web": web_stream(trajectories)}
    with sim_process(sim, port=port) as url:
        config = bench_config(url, sim.model, METHODS, concurrency=256, max_active_lanes=256, orders=1)
        pool_s, _, summary = anyio.run(timed_scoring, streams, config, work / "pool")
        old: list[dict[str, Any]] = []
        lanes_s = anyio.run(lane_order, streams, config, old)
    pooled = list(read_rows(work / "pool" / "scores.jsonl"))

    def key(rows: Sequence[dict[str, Any]]) -> list[bytes]:
        kept = ({k: v for k, v in r.items() if k not in _APART} for r in rows)
        return sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in kept)

    trajectory, chain_s = longest_chain_s(pooled, sim)
    return {
        "settings": {"trajectories": trajectories, "methods": METHODS, "max_num_seqs": 256, "time_scale": time_scale},
        "steps": sum(len(t.steps) for t in streams["web"]),
        "rows": len(pooled),
        "steps_failed": summary.steps_failed,
        "pool_s": pool_s,
        "lane_order_s": lanes_s,
        "ratio_lane_order_over_pool": lanes_s / pool_s,
        "longest_chain": {"trajectory": trajectory, "service_s": chain_s},
        "ratio_pool_over_longest_chain": pool_s / chain_s,
        "rows_identical": key(pooled) == key(old),
    }


_HELP = """One stream of 40 web trajectories, bank-free methods: the step pool against the lane order (SIMULATED).

    python benchmarks/step_pool.py

Prints both wall times, their ratio, the longest trajectory's own chain and whether the rows are identical; writes
``step-pool-<UTC>.json`` with the settings and the machine.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``python benchmarks/step_pool.py``: :func:`run` (``--help`` lists options)."""
    ap = bench_parser("step-pool", _HELP, sim_port=True, prog="python benchmarks/step_pool.py")
    ap.add_argument("--trajectories", type=int, default=40, help="trajectories in the stream")
    ap.add_argument("--time-scale", type=float, default=0.25, help="the simulator's time scale")
    args = ap.parse_args(argv)
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(Path(tmp), trajectories=args.trajectories, time_scale=args.time_scale, port=args.port or None)
    print(f"{result['steps']} steps x {len(METHODS)} methods; failed {result['steps_failed']}")
    print(
        f"step pool {result['pool_s']:.1f} s, lane order {result['lane_order_s']:.1f} s: "
        f"{result['ratio_lane_order_over_pool']:.1f}x; rows identical: {result['rows_identical']}"
    )
    chain = result["longest_chain"]
    print(
        f"longest trajectory's own chain ({chain['trajectory']}, static) {chain['service_s']:.1f} s: "
        f"the pool takes {result['ratio_pool_over_longest_chain']:.2f}x it"
    )
    doc = {"benchmark": "step-pool", "target": TARGET, **result, "machine": machine_info()}
    print(f"saved {save_results(args.out, 'step-pool', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
