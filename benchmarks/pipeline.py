"""Pipeline and client-overhead benchmarks against the simulated server (a SIMULATOR, not a model).

Pipeline benchmark: the real InterCode streams (several of them, each cut to its first ``N`` trajectories),
scored with CEB and the static baseline at once through the `openai` backend against the simulator in a child
process. It reports the figures vLLM's serving benchmark reports (request throughput, median and p99 end-to-end
latency, client queue time, failed requests) plus steps/s, the makespan, and the schedule efficiency:

    lower bound = max(useful service time / capacity, longest lane's critical path)
    efficiency  = lower bound / makespan

Useful service is that of the requests whose replies are in the rows; what speculation asked ahead and discarded
(``speculation``, the default 1) is reported beside it. A lane's critical path is the strict order's chain, which
speculation shortens, so with ``speculation`` > 0 the lower bound is the service bound alone and the critical path
is reported for comparison.

Service times come from the simulator's own model (:class:`~ceb.sim.SimConfig`): ``(overhead + prompt_tokens /
prefill_tok_s + completion_tokens * decode_s_per_token) * time_scale`` with the token counts it reported in
``usage``. A lane's critical path is the sum of the service times of its sequential requests: each step's critic
call, and per trajectory one hindsight round, whose votes run side by side (so the round costs one vote: the
round's total divided by its requests). Capacity is the simulator's ``max_num_seqs``.

Each stream is scored in ``orders`` orders (the input order and seeded permutations, paper section 4.4), each
order a stream of its own: 14 InterCode streams x 2 orders = 28 ordered streams, each with CEB and static.

The naive way, in the same run: lanes one after another and one request at a time (one slot, one lane), on a
slice of the same work (the first ``naive_trajectories`` trajectories of the first stream, both methods). Its
wall time per second of service is measured and scaled to the whole workload's service time; the ratio is that

Measured: ``benchmarks/results/pipeline-20261121T051505Z.json`` and ``pipeline-20261121T051537Z.json`` (commit
``ac2c659``; docs/performance.md quotes them). It proves the scheduler once, on the simulator: no deployment of a
user's is measured, so it lives in the checkout (``python benchmarks/pipeline.py --help``).
"""

from __future__ import annotations

import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.backends.base import AttemptRecord
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_config, load_intercode_streams
from ceb.bench.processes import sim_process, sim_stats
from ceb.bench.result_files import save_results
from ceb.bench.scale import timed_scoring
from ceb.bench.stats import summarize
from ceb.config import RunConfig
from ceb.data import Trajectory
from ceb.logs import configure_logging
from ceb.pipeline import read_rows
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.runner import check_prompts
from ceb.sim import SimConfig

__all__ = ["PipelineSettings", "main", "run_pipeline_bench", "service_s"]


@dataclass(frozen=True, slots=True)
class PipelineSettings:
    """One pipeline benchmark.

    Attributes:
        trajectories: Trajectories kept from the start of each stream.
        methods: Methods run on every stream at once.
        votes: Hindsight votes ``V``.
        sim: The simulator's load model (its ``max_num_seqs`` is the capacity).
        naive_trajectories: Trajectories of the first stream run the naive way.
        orders: Stream orders per stream (paper section 4.4); each order is a stream of its own.
        port: The simulator's port; ``None`` takes a free one.
        speculation: ``speculation`` of the concurrent run; ``None``: ceb's default.
    """

    trajectories: int = 30
    methods: tuple[str, ...] = ("ceb", "static")
    votes: int = 5
    sim: SimConfig = SimConfig(max_num_seqs=48, prefill_tok_s=20_000.0, decode_s_per_token=0.02, time_scale=0.25)
    naive_trajectories: int = 3
    orders: int = 2
    port: int | None = None
    speculation: int | None = None


def _config(url: str, settings: PipelineSettings, *, concurrency: int, lanes: int, orders: int) -> RunConfig:
    # static is asked once for both orders (its rows copied, ceb.pipeline.pool), its trajectories concurrently; the
    # figures recorded before the step pool (issue 39) asked every order, in lanes.
    config = bench_config(
        url,
        settings.sim.model,
        settings.methods,
        concurrency=concurrency,
        max_active_lanes=lanes,
        orders=orders,
        votes=settings.votes,
    )
    if settings.speculation is None:
        return config
    return config.model_copy(update={"speculation": settings.speculation})


def service_s(sim: SimConfig, prompt_tokens: float, completion_tokens: float) -> float:
    """Service time of one request under the simulator's model, in seconds."""
    return (sim.overhead_s + prompt_tokens / sim.prefill_tok_s + completion_tokens * sim.decode_s_per_token) * (
        sim.time_scale
    )


_LaneKey = tuple[str, int, str, str]  # stream, order, method, critic


def _lane(row: dict[str, Any]) -> _LaneKey:
    # A bank method's lane is its chain; static's chain is one trajectory (the step pool, ceb.pipeline.pool).
    method = row["method"] if row["method"] != "static" else f"static:{row['trajectory']}"
    return row["stream"], row.get("order", 0), method, row.get("critic", "")


def _lane_paths(run_dir: Path, sim: SimConfig) -> tuple[float, dict[_LaneKey, float]]:
    """Total service time and each lane's critical path, from the run's rows (see the module docstring)."""
    total = 0.0
    path: dict[_LaneKey, float] = defaultdict(float)
    for row in read_rows(RunDir(run_dir).scores):
        if row["requests"] and row["prompt_tokens"] is not None:
            s = service_s(sim, row["prompt_tokens"] / row["requests"], row["completion_tokens"] / row["requests"])
            total += s * row["requests"]
            path[_lane(row)] += s * row["requests"]
    for row in read_rows(RunDir(run_dir).hindsight):
        if row["requests"] and row["prompt_tokens"] is not None:
            each = service_s(sim, row["prompt_tokens"] / row["requests"], row["completion_tokens"] / row["requests"])
            total += each * row["requests"]
            path[_lane(row)] += each  # votes of a round run together
    return total, dict(path)


def _request_figures(attempts: Sequence[AttemptRecord], makespan_s: float) -> dict[str, Any]:
    ok = [a for a in attempts if a.ok]
    e2el = summarize((a.latency_s for a in ok), scale=1e3)
    queue = summarize((a.queue_s for a in attempts), scale=1e3)
    return {
        "completed": len(ok),
        "failed": len(attempts) - len(ok),
        "request_throughput": len(ok) / makespan_s,
        "median_e2el_ms": e2el.p50,
        "p99_e2el_ms": e2el.p99,
        "mean_client_queue_ms": queue.mean,
        "p99_client_queue_ms": queue.p99,
    }


def run_pipeline_bench(
    streams: Mapping[str, Sequence[Trajectory]], settings: PipelineSettings, work: Path
) -> dict[str, Any]:
    """Run the concurrent pipeline and the naive way on the same simulator; return every figure.

    Args:
        streams: Stream name -> trajectories (cut to ``settings.trajectories`` here).
        settings: Workload and simulator.
        work: Scratch directory for the two run directories.

    Returns:
        ``{"settings", "workload", "concurrent", "naive", "ratio", "efficiency", ...}`` (JSON-ready).
    """
    cut = {name: list(trajs[: settings.trajectories]) for name, trajs in streams.items()}
    sim = settings.sim
    capacity = sim.max_num_seqs
    with sim_process(sim, port=settings.port) as url:
        config = _config(url, settings, concurrency=capacity, lanes=256, orders=settings.orders)
        check_prompts(config, [t.domain for ts in cut.values() for t in ts])
        makespan, attempts, summary = anyio.run(timed_scoring, cut, config, work / "concurrent")
        server = sim_stats(url, reset=True)
        total_service, paths = _lane_paths(work / "concurrent", sim)
        first = next(iter(cut))
        naive_streams = {first: cut[first][: settings.naive_trajectories]}
        naive_config = _config(url, settings, concurrency=1, lanes=1, orders=1)
        naive_wall, naive_attempts, _ = anyio.run(timed_scoring, naive_streams, naive_config, work / "naive")
        naive_service, _ = _lane_paths(work / "naive", sim)
    critical_lane = max(paths, key=paths.__getitem__)
    critical = paths[critical_lane]
    lower_bound = max(total_service / capacity, critical if config.speculation == 0 else 0.0)
    steps = summary.steps_scored + summary.steps_failed
    naive_estimate = naive_wall / naive_service * total_service
    return {
        "settings": {**asdict(replace(settings, sim=sim)), "capacity": capacity},
        "workload": {
            "streams": len(cut),
            "orders": settings.orders,
            "stream_orders": len(cut) * settings.orders,
            "lanes": len(cut) * settings.orders * len(settings.methods),
            "trajectories": sum(len(t) for t in cut.values()),
            "steps_per_method_and_order": sum(len(t.steps) for ts in cut.values() for t in ts),
        },
        "concurrent": {
            "makespan_s": makespan,
            "steps_scored": summary.steps_scored,
            "steps_failed": summary.steps_failed,
            "steps_per_s": steps / makespan,
            **_request_figures(attempts, makespan),
            "server_max_in_service": server.get("max_in_service"),
            "speculation": config.speculation,
            "steps_kept_ahead": summary.steps_kept_ahead,
            "steps_discarded": summary.steps_discarded,
            "discarded_requests": summary.discarded_requests,
            "discarded_prompt_tokens": summary.discarded_prompt_tokens,
            "server_max_queue_len": server.get("max_queue_len"),
        },
        "lower_bound": {
            "total_service_s": total_service,
            "throughput_bound_s": total_service / capacity,
            "critical_path_s": critical,
            "critical_lane": dict(zip(("stream", "order", "method", "critic"), critical_lane, strict=True)),
            "lower_bound_s": lower_bound,
        },
        "efficiency": lower_bound / makespan,
        "makespan_over_service_bound": makespan / (total_service / capacity),
        "naive": {
            "measured_wall_s": naive_wall,
            "measured_service_s": naive_service,
            "measured_requests": len(naive_attempts),
            "estimated_makespan_s": naive_estimate,
        },
        "ratio_naive_over_concurrent": naive_estimate / makespan,
    }


# --- command line: python benchmarks/pipeline.py ------------------------------------------------------------

PIPELINE_TARGET = "schedule efficiency >= 0.9 with >= 16 streams of real InterCode data mixed with static baselines"

_PIPELINE_HELP = """Many ordered streams of the real InterCode data against the SIMULATED server.

    python benchmarks/pipeline.py --trajectories 30

Prints the concurrent run's makespan against its lower bound (schedule efficiency) and the naive way's, and writes
``pipeline-<UTC>.json`` with the settings and the machine. The simulator is not a model: it stands for a vLLM
server's queueing and service times (see ``benchmarks/pipeline.py`` and ``ceb/sim/server.py``).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: :func:`run_pipeline_bench` on the InterCode streams (``--help`` lists options)."""
    ap = bench_parser("pipeline", _PIPELINE_HELP, sim_port=True, prog="python benchmarks/pipeline.py")
    ap.add_argument("--trajectories", type=int, default=30, help="trajectories kept per stream")
    ap.add_argument("--max-num-seqs", type=int, default=48, help="the simulator's capacity")
    ap.add_argument("--time-scale", type=float, default=0.25, help="the simulator's time scale")
    ap.add_argument("--orders", type=int, default=2, help="orders per stream (each a stream of its own)")
    ap.add_argument("--speculation", type=int, default=None, help="speculation of the concurrent run (ceb's default)")
    args = ap.parse_args(argv)
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        streams = load_intercode_streams(args.intercode, work / "streams")
        base = PipelineSettings(
            trajectories=args.trajectories, orders=args.orders, port=args.port or None, speculation=args.speculation
        )
        sim = base.sim.model_copy(update={"max_num_seqs": args.max_num_seqs, "time_scale": args.time_scale})
        settings = replace(base, sim=sim)
        result = run_pipeline_bench(streams, settings, work)
    doc = {"benchmark": "pipeline", "target": PIPELINE_TARGET, **result, "machine": machine_info()}
    c, lb, naive = result["concurrent"], result["lower_bound"], result["naive"]
    print(f"workload: {result['workload']}")
    print(
        f"concurrent: makespan {c['makespan_s']:.1f} s, {c['steps_per_s']:.1f} steps/s, "
        f"{c['request_throughput']:.1f} req/s, median e2el {c['median_e2el_ms']:.1f} ms, "
        f"p99 e2el {c['p99_e2el_ms']:.1f} ms, mean client queue {c['mean_client_queue_ms']:.1f} ms, "
        f"failed {c['failed']}"
    )
    bound = "max(service bound, critical path)" if not c["speculation"] else "the service bound"
    print(
        f"lower bound {lb['lower_bound_s']:.1f} s = {bound}: useful service {lb['total_service_s']:.1f} s / "
        f"capacity {settings.sim.max_num_seqs} = {lb['throughput_bound_s']:.1f} s; the strict order's critical path "
        f"{lb['critical_path_s']:.1f} s; efficiency {result['efficiency']:.3f}, makespan / service bound "
        f"{result['makespan_over_service_bound']:.3f}"
    )
    print(
        f"speculation {c['speculation']}: {c['steps_kept_ahead']} steps kept from ahead, {c['discarded_requests']} "
        f"requests discarded ({c['discarded_prompt_tokens']} prompt tokens), not in the useful service"
    )
    print(
        f"naive: {naive['measured_requests']} requests in {naive['measured_wall_s']:.1f} s measured, "
        f"{naive['estimated_makespan_s']:.0f} s estimated for the whole workload; "
        f"ratio {result['ratio_naive_over_concurrent']:.1f}x"
    )
    print(f"saved {save_results(args.out, 'pipeline', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
