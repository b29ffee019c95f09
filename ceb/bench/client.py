"""Client overhead against the simulated server (a SIMULATOR, not a model): ``ceb bench client``.

The simulator runs at ``time_scale = 0`` (no service time), so what is measured is the client. (1) Requests/s that
one process sustains through :meth:`ChatBackend.complete` with real critic prompts, and CPU ms per request, next to
the same requests sent with the `openai` SDK client (the naive way). (2) Client CPU ms per scored step of a whole
`static` run (no retrieval, no bank: everything outside retrieval).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ceb.backends.base import AttemptRecord, ChatRequest
from ceb.backends.scheduling import EndpointLimits
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser, load_intercode_streams
from ceb.bench.processes import sim_process
from ceb.bench.result_files import save_results
from ceb.config import RunConfig, load_config
from ceb.data import Trajectory
from ceb.errors import ConfigError
from ceb.logs import configure_logging
from ceb.pipeline import run_scoring
from ceb.pipeline.runner import progress_callbacks
from ceb.progress import Progress
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages
from ceb.stages.critic import CRITIC_SCHEMA

__all__ = [
    "ClientFigures",
    "ClientResult",
    "PerStep",
    "PipelineSettings",
    "client_main",
    "run_client_bench",
    "run_config",
    "timed_scoring",
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


def run_config(
    base_url: str, settings: PipelineSettings, *, concurrency: int, lanes: int = 256, orders: int | None = None
) -> RunConfig:
    """The simulator run's configuration: backend ``openai`` at ``base_url``, ``settings``' methods and orders."""
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


async def timed_scoring(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path
) -> tuple[float, list[AttemptRecord], Any]:
    """Score ``streams`` into ``run_dir``: wall seconds, every attempt the backend made, the run's summary."""
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


@dataclass(frozen=True, slots=True)
class ClientFigures:
    """One client sending every request at once: requests/s, CPU ms per request (ceb's process) and wall (s)."""

    requests_per_s: float
    cpu_ms_per_request: float
    wall_s: float


@dataclass(frozen=True, slots=True)
class PerStep:
    """A whole ``static`` run: steps, makespan (s), steps/s and client CPU ms per scored step."""

    steps: int
    makespan_s: float
    steps_per_s: float
    cpu_ms_per_step: float
    method: str = "static"


@dataclass(frozen=True, slots=True)
class ClientResult:
    """``ceb bench client``'s record: ceb's client against the openai SDK's on the same requests, and per step."""

    requests: int
    concurrency: int
    mean_prompt_chars: float
    ceb_client: ClientFigures
    sdk_client: ClientFigures
    ratio_requests_per_s: float
    per_step: PerStep
    target: str = ">= 1,000 requests/s in one process and <= 1 ms client CPU per scored step"


def run_client_bench(
    streams: Mapping[str, Sequence[Trajectory]],
    work: Path,
    *,
    requests: int = 3000,
    concurrency: int = 64,
    port: int | None = None,
    trajectories: int | None = None,
) -> ClientResult:
    """Client requests/s and CPU per request and per scored step against a zero-latency simulator (on ``port``).

    ``trajectories``: those kept from the start of each stream for the per-step figure (``None``: every one).

    Returns:
        Both clients' figures and the per-step figures.
    """
    sim = SimConfig(max_num_seqs=1024, time_scale=0.0)
    settings = PipelineSettings(sim=sim, methods=("static",), port=port)
    with sim_process(sim, port=port) as url:
        config = run_config(url, settings, concurrency=concurrency)
        reqs = _critic_requests(streams, config, requests)
        wall, cpu = anyio.run(_blast, config, reqs)
        sdk_wall, sdk_cpu = anyio.run(_blast_sdk, url, sim.model, reqs, concurrency)
        cut = {name: list(trajs)[:trajectories] for name, trajs in streams.items()}
        step_cpu = time.process_time()
        makespan, _, summary = anyio.run(timed_scoring, cut, config, work / "client-static")
        step_cpu = time.process_time() - step_cpu
    n = len(reqs)
    steps = summary.steps_scored + summary.steps_failed
    return ClientResult(
        requests=n,
        concurrency=concurrency,
        mean_prompt_chars=statistics.fmean(sum(len(m["content"]) for m in r.messages) for r in reqs),
        ceb_client=ClientFigures(n / wall, cpu / n * 1000, wall),
        sdk_client=ClientFigures(n / sdk_wall, sdk_cpu / n * 1000, sdk_wall),
        ratio_requests_per_s=sdk_wall / wall,
        per_step=PerStep(steps, makespan, steps / makespan, step_cpu / steps * 1000),
    )


# --- command line: ceb bench client ---------------------------------------------------------------------------

_CLIENT_HELP = """Requests/s and CPU per request and per step of ceb's client (and the openai SDK's), SIMULATED server.

    ceb bench client --requests 3000

Writes ``client-<UTC>.json`` with the settings and the machine (see ``ceb/bench/client.py``).
"""


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
    ours, sdk, step = result.ceb_client, result.sdk_client, result.per_step
    print(
        f"ceb client: {ours.requests_per_s:.0f} req/s, {ours.cpu_ms_per_request:.3f} CPU ms/request; "
        f"openai SDK: {sdk.requests_per_s:.0f} req/s, {sdk.cpu_ms_per_request:.3f} CPU ms/request; "
        f"ratio {result.ratio_requests_per_s:.1f}x"
    )
    print(
        f"static run: {step.steps} steps, {step.steps_per_s:.0f} steps/s, {step.cpu_ms_per_step:.3f} client CPU ms/step"
    )
    print(f"saved {save_results(args.out, 'client', result, machine_info())}")
    return 0
