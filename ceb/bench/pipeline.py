"""Pipeline and client-overhead benchmarks against the simulated server (a SIMULATOR, not a model).

Pipeline benchmark: the real InterCode streams (several of them, each cut to its first ``N`` trajectories),
scored with CEB and the static baseline at once through the `openai` backend against the simulator in a child
process. It reports the figures vLLM's serving benchmark reports (request throughput, median and p99 end-to-end
latency, client queue time, failed requests) plus steps/s, the makespan, and the schedule efficiency:

    lower bound = max(total service time / capacity, longest lane's critical path)
    efficiency  = lower bound / makespan

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
estimate over the concurrent makespan.

Client-overhead benchmark: the simulator at ``time_scale = 0`` (no service time), so what is measured is the
client. (1) Requests/s that one process sustains through :meth:`ChatBackend.complete` with real critic prompts,
and CPU ms per request, next to the same requests sent with the `openai` SDK client (the naive way). (2) Client
CPU ms per scored step of a whole `static` run (no retrieval, no bank: everything outside retrieval).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import anyio

from ceb.backends.base import AttemptRecord, ChatRequest
from ceb.backends.scheduling import EndpointLimits
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser
from ceb.bench.processes import sim_process, sim_stats
from ceb.bench.result_files import save_results
from ceb.bench.stats import summarize
from ceb.config import RunConfig, load_config
from ceb.data import Trajectory, convert_intercode, read_stream
from ceb.errors import ConfigError
from ceb.logs import configure_logging
from ceb.pipeline import read_rows, run_scoring
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.runner import check_prompts, progress_callbacks
from ceb.progress import Progress
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages
from ceb.stages.critic import CRITIC_SCHEMA

__all__ = [
    "PipelineSettings",
    "client_main",
    "load_intercode_streams",
    "main",
    "run_client_bench",
    "run_pipeline_bench",
    "service_s",
]


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
    """

    trajectories: int = 30
    methods: tuple[str, ...] = ("ceb", "static")
    votes: int = 5
    sim: SimConfig = SimConfig(max_num_seqs=48, prefill_tok_s=20_000.0, decode_s_per_token=0.02, time_scale=0.25)
    naive_trajectories: int = 3
    orders: int = 2
    port: int | None = None


def service_s(sim: SimConfig, prompt_tokens: float, completion_tokens: float) -> float:
    """Service time of one request under the simulator's model, in seconds."""
    return (sim.overhead_s + prompt_tokens / sim.prefill_tok_s + completion_tokens * sim.decode_s_per_token) * (
        sim.time_scale
    )


def load_intercode_streams(
    root: Path, work: Path, datasets: Sequence[str] = ("bash", "sql")
) -> dict[str, list[Trajectory]]:
    """Convert the real InterCode results into ``work`` and read every stream back (name -> trajectories)."""
    converted = convert_intercode(root, work, datasets=tuple(datasets))
    return {c.path.stem: read_stream([c.path]) for c in converted}


def _config(
    base_url: str, settings: PipelineSettings, *, concurrency: int, lanes: int = 256, orders: int | None = None
) -> RunConfig:
    return load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": base_url,
                "model": settings.sim.model,
                "max_concurrency": concurrency,
                "timeout_s": 600,
            },
            "methods": list(settings.methods),
            "ceb": {"votes": settings.votes},
            "max_active_lanes": lanes,
            "orders": settings.orders if orders is None else orders,
            # Every order asked, as in the figures recorded before static's rows were copied between orders
            # (ceb.pipeline.reuse): the workload stays 28 ordered streams each with CEB and static.
            "reuse_bank_free": False,
        }
    )


async def _score(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path
) -> tuple[float, list[AttemptRecord], Any]:
    stages = build_stages(config, EndpointLimits())
    attempts: list[AttemptRecord] = []
    if stages.chat is not None:
        stages.chat.observers.append(attempts.append)
    started = time.perf_counter()
    with Progress(f"bench {run_dir.name}", None) as progress:
        on_row, on_start = progress_callbacks(progress)
        async with stages:
            summary = await run_scoring(
                streams, config, run_dir, stages=stages, overwrite=True, on_row=on_row, on_start=on_start
            )
    return time.perf_counter() - started, attempts, summary


_LaneKey = tuple[str, int, str, str]  # stream, order, method, critic


def _lane(row: dict[str, Any]) -> _LaneKey:
    return row["stream"], row.get("order", 0), row["method"], row.get("critic", "")


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
        config = _config(url, settings, concurrency=capacity)
        check_prompts(config, [t.domain for ts in cut.values() for t in ts])
        makespan, attempts, summary = anyio.run(_score, cut, config, work / "concurrent")
        server = sim_stats(url, reset=True)
        total_service, paths = _lane_paths(work / "concurrent", sim)
        first = next(iter(cut))
        naive_streams = {first: cut[first][: settings.naive_trajectories]}
        naive_config = _config(url, settings, concurrency=1, lanes=1, orders=1)
        naive_wall, naive_attempts, _ = anyio.run(_score, naive_streams, naive_config, work / "naive")
        naive_service, _ = _lane_paths(work / "naive", sim)
    critical_lane = max(paths, key=paths.__getitem__)
    critical = paths[critical_lane]
    lower_bound = max(total_service / capacity, critical)
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
        "naive": {
            "measured_wall_s": naive_wall,
            "measured_service_s": naive_service,
            "measured_requests": len(naive_attempts),
            "estimated_makespan_s": naive_estimate,
        },
        "ratio_naive_over_concurrent": naive_estimate / makespan,
    }


def _critic_requests(streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, n: int) -> list[ChatRequest]:
    """``n`` real critic requests (the static method's prompts of the first steps of the streams)."""
    from ceb.bank import Retrieval
    from ceb.stages.assembly import prompt_set
    from ceb.stages.base import CriticInput
    from ceb.stages.critic import critic_context

    prompts = prompt_set(config)
    out: list[ChatRequest] = []
    for trajs in streams.values():
        for t in trajs:
            for i, s in enumerate(t.steps):
                inp = CriticInput(
                    domain=t.domain, task=t.task, step=i, state=s.state, action=s.action, retrieval=Retrieval()
                )
                messages = tuple(prompts.messages(t.domain, "critic", critic_context(inp)))
                out.append(ChatRequest(messages=messages, json_schema=CRITIC_SCHEMA, schema_name="critic_score"))
                if len(out) >= n:
                    return out
    return out


async def _blast(config: RunConfig, requests: Sequence[ChatRequest]) -> tuple[float, float]:
    stages = build_stages(config, EndpointLimits())
    assert stages.chat is not None
    async with stages:
        for r in requests[:50]:  # warm the connection pool
            await stages.chat.complete(r)
        wall, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for r in requests:
                tg.start_soon(stages.chat.complete, r)
        return time.perf_counter() - wall, time.process_time() - cpu


async def _blast_sdk(
    base_url: str, model: str, requests: Sequence[ChatRequest], concurrency: int
) -> tuple[float, float]:
    try:
        from openai import AsyncOpenAI
    except ImportError:
        raise ConfigError("the client benchmark compares against the openai SDK: pip install -e '.[bench]'") from None

    limit = anyio.Semaphore(concurrency)
    client = AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)

    async def one(r: ChatRequest) -> None:
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [dict(m) for m in r.messages],
            "temperature": 0.0,
            "max_completion_tokens": r.max_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": r.schema_name, "schema": dict(r.json_schema or {}), "strict": True},
            },
        }
        async with limit:
            await client.chat.completions.create(**kwargs)

    async with client:
        for r in requests[:50]:
            await one(r)
        wall, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for r in requests:
                tg.start_soon(one, r)
        return time.perf_counter() - wall, time.process_time() - cpu


def run_client_bench(
    streams: Mapping[str, Sequence[Trajectory]],
    work: Path,
    *,
    requests: int = 3000,
    concurrency: int = 64,
    port: int | None = None,
    trajectories: int | None = None,
) -> dict[str, Any]:
    """Client requests/s and CPU per request and per scored step against a zero-latency simulator (on ``port``).

    ``trajectories``: those kept from the start of each stream for the per-step figure (``None``: every one).

    Returns:
        ``{"requests", "ceb_client", "sdk_client", "ratio", "per_step"}`` (JSON-ready).
    """
    sim = SimConfig(max_num_seqs=1024, time_scale=0.0)
    settings = PipelineSettings(sim=sim, methods=("static",), port=port)
    with sim_process(sim, port=port) as url:
        config = _config(url, settings, concurrency=concurrency)
        reqs = _critic_requests(streams, config, requests)
        wall, cpu = anyio.run(_blast, config, reqs)
        sdk_wall, sdk_cpu = anyio.run(_blast_sdk, url, sim.model, reqs, concurrency)
        cut = {name: list(trajs)[:trajectories] for name, trajs in streams.items()}
        step_cpu = time.process_time()
        makespan, _, summary = anyio.run(_score, cut, config, work / "client-static")
        step_cpu = time.process_time() - step_cpu
    n = len(reqs)
    steps = summary.steps_scored + summary.steps_failed
    return {
        "requests": n,
        "concurrency": concurrency,
        "mean_prompt_chars": statistics.fmean(sum(len(m["content"]) for m in r.messages) for r in reqs),
        "ceb_client": {"requests_per_s": n / wall, "cpu_ms_per_request": cpu / n * 1000, "wall_s": wall},
        "sdk_client": {"requests_per_s": n / sdk_wall, "cpu_ms_per_request": sdk_cpu / n * 1000, "wall_s": sdk_wall},
        "ratio_requests_per_s": (n / wall) / (n / sdk_wall),
        "per_step": {
            "method": "static",
            "steps": steps,
            "makespan_s": makespan,
            "steps_per_s": steps / makespan,
            "cpu_ms_per_step": step_cpu / steps * 1000,
        },
    }


# --- command lines: ceb bench pipeline, ceb bench client ----------------------------------------------------

PIPELINE_TARGET = "schedule efficiency >= 0.9 with >= 16 streams of real InterCode data mixed with static baselines"
CLIENT_TARGET = ">= 1,000 requests/s in one process and <= 1 ms client CPU per scored step"

_PIPELINE_HELP = """Many ordered streams of the real InterCode data against the SIMULATED server.

    ceb bench pipeline --trajectories 30

Prints the concurrent run's makespan against its lower bound (schedule efficiency) and the naive way's, and writes
``pipeline-<UTC>.json`` with the settings and the machine. The simulator is not a model: it stands for a vLLM
server's queueing and service times (see ``ceb/bench/pipeline.py`` and ``ceb/sim/server.py``).
"""

_CLIENT_HELP = """Requests/s and CPU per request and per step of ceb's client (and the openai SDK's), SIMULATED server.

    ceb bench client --requests 3000

Writes ``client-<UTC>.json`` with the settings and the machine (see ``ceb/bench/pipeline.py``).
"""


def main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench pipeline``: :func:`run_pipeline_bench` on the InterCode streams (``--help`` lists options)."""
    ap = bench_parser("pipeline", _PIPELINE_HELP, sim_port=True)
    ap.add_argument("--trajectories", type=int, default=30, help="trajectories kept per stream")
    ap.add_argument("--max-num-seqs", type=int, default=48, help="the simulator's capacity")
    ap.add_argument("--time-scale", type=float, default=0.25, help="the simulator's time scale")
    ap.add_argument("--orders", type=int, default=2, help="orders per stream (each a stream of its own)")
    args = ap.parse_args(argv)
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        streams = load_intercode_streams(args.intercode, work / "streams")
        base = PipelineSettings(trajectories=args.trajectories, orders=args.orders, port=args.port or None)
        settings = replace(base, sim=replace(base.sim, max_num_seqs=args.max_num_seqs, time_scale=args.time_scale))
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
    print(
        f"lower bound {lb['lower_bound_s']:.1f} s = max(service {lb['total_service_s']:.1f} s / "
        f"capacity {settings.sim.max_num_seqs} = {lb['throughput_bound_s']:.1f} s, critical path "
        f"{lb['critical_path_s']:.1f} s); efficiency {result['efficiency']:.3f}"
    )
    print(
        f"naive: {naive['measured_requests']} requests in {naive['measured_wall_s']:.1f} s measured, "
        f"{naive['estimated_makespan_s']:.0f} s estimated for the whole workload; "
        f"ratio {result['ratio_naive_over_concurrent']:.1f}x"
    )
    print(f"saved {save_results(args.out, 'pipeline', doc)}")
    return 0


def client_main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench client``: :func:`run_client_bench` on the InterCode streams (``--help`` lists options)."""
    ap = bench_parser("client", _CLIENT_HELP, sim_port=True)
    ap.add_argument("--requests", type=int, default=3000, help="requests sent at once")
    ap.add_argument(
        "--trajectories", type=int, help="trajectories kept per stream for the per-step figure (default: every one)"
    )
    args = ap.parse_args(argv)
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        streams = load_intercode_streams(args.intercode, work / "streams")
        result = run_client_bench(
            streams, work, requests=args.requests, port=args.port or None, trajectories=args.trajectories
        )
    doc = {"benchmark": "client", "target": CLIENT_TARGET, **result, "machine": machine_info()}
    ours, sdk, step = result["ceb_client"], result["sdk_client"], result["per_step"]
    print(
        f"ceb client: {ours['requests_per_s']:.0f} req/s, {ours['cpu_ms_per_request']:.3f} CPU ms/request; "
        f"openai SDK: {sdk['requests_per_s']:.0f} req/s, {sdk['cpu_ms_per_request']:.3f} CPU ms/request; "
        f"ratio {result['ratio_requests_per_s']:.1f}x"
    )
    print(
        f"static run: {step['steps']} steps, {step['steps_per_s']:.0f} steps/s, "
        f"{step['cpu_ms_per_step']:.3f} client CPU ms/step"
    )
    print(f"saved {save_results(args.out, 'client', doc)}")
    return 0
