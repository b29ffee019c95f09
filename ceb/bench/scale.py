"""Client and scale benchmarks against SIMULATED servers (:mod:`ceb.sim`, not a model): `ceb bench client` and `scale`.

Both run ceb's real client and pipeline through the ``openai`` backend against simulators in child processes
(:mod:`ceb.bench.processes`); what each figure means is the settings' ``--help``. docs/performance.md and
docs/serving.md ("Scale plan") quote the results.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from pydantic import Field

from ceb.backends.base import AttemptRecord, ChatRequest
from ceb.backends.scheduling import EndpointLimits
from ceb.bench.options import BenchSettings, bench_config, load_intercode_streams, progress, run_and_save
from ceb.bench.processes import SimReplicas, sim_process, sim_replicas, sim_stats
from ceb.bench.stats import summarize
from ceb.config import RunConfig
from ceb.data import Trajectory
from ceb.gc_tuning import default_gc, quiet_gc
from ceb.pipeline import run_scoring
from ceb.pipeline.runner import progress_callbacks
from ceb.progress import Progress
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages
from ceb.stages.critic import CRITIC_SCHEMA

__all__ = [
    "ClientBench",
    "ClientFigures",
    "ClientResult",
    "Extrapolation",
    "GcPauses",
    "GcRatio",
    "Knee",
    "LoopLag",
    "PerStep",
    "ScaleBench",
    "ScalePlan",
    "ScalePoint",
    "client_main",
    "main",
    "run_client_bench",
    "run_scale_bench",
    "run_scale_point",
    "timed_scoring",
]

_LAG_TICK_S = 0.05


async def timed_scoring(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path
) -> tuple[float, list[AttemptRecord], Any]:
    """Score ``streams`` into ``run_dir``: wall seconds, every attempt the backend made, the run's summary."""
    stages = build_stages(config, EndpointLimits())
    attempts: list[AttemptRecord] = []
    if stages.chat is not None:
        stages.chat.observers.append(attempts.append)
    started = time.perf_counter()
    with Progress(f"bench {run_dir.name}", None) as bar:
        on_row, on_start = progress_callbacks(bar)
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


async def _send_all(
    send: Callable[[ChatRequest], Coroutine[Any, Any, object]], requests: Sequence[ChatRequest]
) -> tuple[float, float]:
    """Send 50 requests one by one (to warm the connection pool), then all at once: (wall s, CPU s) of the latter."""
    for r in requests[:50]:
        await send(r)
    wall, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for r in requests:
            tg.start_soon(send, r)
    return time.perf_counter() - wall, time.process_time() - cpu


async def _blast(config: RunConfig, requests: Sequence[ChatRequest]) -> tuple[float, float]:
    stages = build_stages(config, EndpointLimits())
    assert stages.chat is not None
    async with stages:
        return await _send_all(stages.chat.complete, requests)


async def _blast_sdk(
    base_url: str, model: str, requests: Sequence[ChatRequest], concurrency: int
) -> tuple[float, float]:
    from openai import AsyncOpenAI  # extra `bench` (ceb.bench.commands checks it is installed)

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
        return await _send_all(one, requests)


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


class ClientBench(BenchSettings):
    """Requests/s and CPU per request and per step of ceb's client (and the openai SDK's), SIMULATED server.

        ceb bench client --requests 3000

    The simulator runs at time_scale 0 (no service time), so what is measured is the client: the requests/s one process
    sustains through ceb's backend with real critic prompts, and CPU ms per request, next to the same requests sent
    with the openai SDK's client (the naive way); then client CPU ms per scored step of a whole `static` run (no
    retrieval, no bank: everything outside retrieval). Writes ``client-<UTC>.json`` with the settings and the machine.
    """

    port: int = Field(0, ge=0, le=65535)
    """The simulator's port on 127.0.0.1 (0: a free one)."""
    requests: int = Field(3000, ge=1)
    """Requests sent at once."""
    concurrency: int = Field(64, ge=1)
    """Requests in flight at most, for both clients and the static run."""
    trajectories: int | None = Field(None, ge=1)
    """Trajectories kept per stream for the per-step figure (default: every one)."""


def run_client_bench(args: ClientBench, work: Path) -> ClientResult:
    """Both clients' requests/s and CPU per request, and CPU per step of a ``static`` run, on the InterCode streams."""
    streams = load_intercode_streams(args.intercode, work / "streams")
    sim = SimConfig(max_num_seqs=1024, time_scale=0.0)
    with sim_process(sim, port=args.port or None) as url:
        # One order: static's rows are asked once for every order (ceb.pipeline.pool), so a second order would add
        # copies and no request.
        config = bench_config(url, sim.model, ("static",), concurrency=args.concurrency, max_active_lanes=256)
        reqs = _critic_requests(streams, config, args.requests)
        wall, cpu = anyio.run(_blast, config, reqs)
        sdk_wall, sdk_cpu = anyio.run(_blast_sdk, url, sim.model, reqs, args.concurrency)
        cut = {name: list(trajs)[: args.trajectories] for name, trajs in streams.items()}
        step_cpu = time.process_time()
        makespan, _, summary = anyio.run(timed_scoring, cut, config, work / "client-static")
        step_cpu = time.process_time() - step_cpu
    n = len(reqs)
    steps = summary.steps_scored + summary.steps_failed
    return ClientResult(
        requests=n,
        concurrency=args.concurrency,
        mean_prompt_chars=statistics.fmean(sum(len(m["content"]) for m in r.messages) for r in reqs),
        ceb_client=ClientFigures(n / wall, cpu / n * 1000, wall),
        sdk_client=ClientFigures(n / sdk_wall, sdk_cpu / n * 1000, sdk_wall),
        ratio_requests_per_s=sdk_wall / wall,
        per_step=PerStep(steps, makespan, steps / makespan, step_cpu / steps * 1000),
    )


def _client_lines(result: ClientResult) -> list[str]:
    ours, sdk, step = result.ceb_client, result.sdk_client, result.per_step
    return [
        f"ceb client: {ours.requests_per_s:.0f} req/s, {ours.cpu_ms_per_request:.3f} CPU ms/request; "
        f"openai SDK: {sdk.requests_per_s:.0f} req/s, {sdk.cpu_ms_per_request:.3f} CPU ms/request; "
        f"ratio {result.ratio_requests_per_s:.1f}x",
        f"static run: {step.steps} steps, {step.steps_per_s:.0f} steps/s, "
        f"{step.cpu_ms_per_step:.3f} client CPU ms/step",
    ]


def client_main(args: ClientBench) -> int:
    """``ceb bench client``: :func:`run_client_bench`, printed and saved."""
    return run_and_save("client", run_client_bench, args, lines=_client_lines)


class ScaleBench(BenchSettings):
    """Scale plan: how many SIMULATED replicas one `ceb` process keeps saturated, and where its CPU runs out.

        ceb bench scale --replicas 1,2,4,8,16,32

    One `ceb` process (this one) runs the real InterCode pipeline (CEB and static, many orders) against R simulated
    replicas in child processes, pinned to other cores than this one when there are two or more, each with 15 slots
    and about 0.5 s per critic call (about 30 calls/s). The simulator is not a model: it stands for a vLLM replica's
    queueing and service times. Lanes grow with R (1.5 per replica slot), so a saturation under 1 means a CPU ran out
    (`ceb`'s or the simulators', both reported), not work. Per R, after a warm-up, over a measured window:

        achieved      = critic and hindsight calls completed by `ceb` / window seconds
        capacity      = R * max_num_seqs / mean service time (the simulator's own busy seconds per completed call)
        saturation    = achieved / capacity   (equal to the replicas' slot utilisation)
        ceb CPU       = this process's CPU seconds / window seconds (1.0 = one core; asyncio uses one)
        CPU per call  = this process's CPU milliseconds / completed calls
        loop lag      = how late a 50 ms sleep in `ceb`'s event loop wakes up (mean, p99, max)
        core busy     = share of `ceb`'s pinned core busy with any process; busy minus `ceb` CPU is what other
                        processes on a shared machine took from it

    Extrapolated to a core of its own, one process sustains 1000 / (CPU ms per call) calls/s, i.e. that over
    --per-replica-calls-s replicas. Writes ``scale-<UTC>.json`` with the settings and the machine.
    """

    replicas: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    """Replica counts R."""
    max_num_seqs: int = Field(15, ge=1)
    """Slots per replica."""
    prefill_tok_s: float = Field(4_000.0, gt=0)
    """Each replica's prefill rate (the simulator's tokens per second)."""
    decode_s_per_token: float = Field(0.01, ge=0)
    """Seconds per generated token."""
    overhead_s: float = Field(0.2, ge=0)
    """Fixed seconds per call (with the above: about 0.5 s per critic call of the InterCode prompts)."""
    time_scale: float = Field(1.0, ge=0)
    """Multiplies every service time."""
    methods: tuple[str, ...] = ("ceb", "static")
    """Methods run on every stream and order at once."""
    votes: int = Field(5, ge=1)
    """Hindsight votes V of CEB."""
    lanes_per_slot: float = Field(1.5, gt=0)
    """Lanes (stream x order x method) per replica slot; orders are raised to reach it."""
    per_replica_calls_s: float = Field(30.0, gt=0)
    """Rate the extrapolation divides by (calls/s)."""
    warmup_s: float = Field(5.0, ge=0)
    """Seconds before the window."""
    window_s: float = Field(15.0, gt=0)
    """Seconds measured per R."""
    max_trajectories: int = Field(12, ge=1)
    """Trajectories per stream and order (enough that no lane ends inside the window)."""
    sim_processes: int = Field(1, ge=1)
    """Child processes for the replicas."""
    compare_gc: bool = False
    """Also run each R with CPython's default GC, back to back."""
    pin: bool = True
    """Pin ceb and the simulators to separate cores."""

    @property
    def sim(self) -> SimConfig:
        """Every replica's load model."""
        return SimConfig(
            max_num_seqs=self.max_num_seqs,
            prefill_tok_s=self.prefill_tok_s,
            decode_s_per_token=self.decode_s_per_token,
            overhead_s=self.overhead_s,
            time_scale=self.time_scale,
        )

    @property
    def gc_modes(self) -> tuple[str, ...]:
        """Collector settings per R: ``quiet`` (:func:`~ceb.gc_tuning.quiet_gc`, as ``ceb score``), ``default``."""
        return ("default", "quiet") if self.compare_gc else ("quiet",)


@dataclass(frozen=True, slots=True)
class LoopLag:
    """The event loop's lag behind its ticks during the window (ms)."""

    mean: float
    p99: float
    max: float


@dataclass(frozen=True, slots=True)
class GcPauses:
    """The collector's pauses during the window: how many, full ones, their total (s) and the longest (ms)."""

    count: int
    full: int
    total_s: float
    max_ms: float


@dataclass(frozen=True, slots=True)
class ScalePoint:
    """One replica count ``R`` measured over the window (``nan`` where the simulators served nothing).

    Rates are per second of the window; ``saturation`` is the calls achieved over the replicas' capacity
    (``R x slots / mean service time``); ``ceb_*`` is this process, ``sim_*`` the simulators' (CPU per call ``None``
    when they served nothing); ``pinned``: the CPUs each side was kept on (``None``: not pinned).
    """

    replicas: int
    gc: str
    lanes: int
    orders: int
    slots: int
    window_s: float
    ended_inside_window: bool
    calls: int
    calls_by_stage: dict[str, int]
    failed_attempts: int
    achieved_calls_per_s: float
    mean_service_s: float
    mean_prompt_tokens: float
    mean_completion_tokens: float
    capacity_calls_per_s: float
    saturation: float
    mean_client_queue_ms: float
    mean_latency_ms: float
    ceb_cpu_utilisation: float
    ceb_cpu_user_s: float
    ceb_cpu_system_s: float
    ceb_cpu_ms_per_call: float
    ceb_core_busy: float | None
    sim_cpu_utilisation: float
    sim_cpu_ms_per_call: float | None
    loop_lag_ms: LoopLag
    gc_pauses: GcPauses
    pinned: dict[str, list[int]] | None


@dataclass(frozen=True, slots=True)
class Knee:
    """Where one process stops keeping the replicas busy (see :func:`run_scale_bench`)."""

    saturation_threshold: float
    largest_saturated_replicas: int | None
    knee_cpu: float
    first_unsaturated_replicas: int | None
    unsaturated_not_ceb_bound: tuple[int, ...]
    max_achieved_calls_per_s: float
    ceb_cpu_utilisation_at_max: float


@dataclass(frozen=True, slots=True)
class Extrapolation:
    """To a core of ceb's own: CPU ms per call, calls/s and replicas it serves, calls/s per core at the busiest."""

    ceb_cpu_ms_per_call: float
    calls_per_s_one_core: float
    replicas_one_core: float
    calls_per_s_per_core_at_max: float


@dataclass(frozen=True, slots=True)
class GcRatio:
    """At one ``R``: the quiet collector's calls/s and CPU per call over the default's."""

    replicas: int
    calls_per_s_quiet_over_default: float
    cpu_ms_per_call_quiet_over_default: float


@dataclass(frozen=True, slots=True)
class ScalePlan:
    """``ceb bench scale``'s record: its settings, the replicas' load model, every point, knee and extrapolation."""

    settings: ScaleBench
    sim: SimConfig
    gc_mode_of_knee: str
    points: tuple[ScalePoint, ...]
    gc_comparison: tuple[GcRatio, ...]
    knee: Knee
    extrapolation: Extrapolation
    simulator: str = "ceb-simulator (not a model)"


@dataclass
class _Counts:
    ok: int = 0
    failed: int = 0
    by_stage: dict[str, int] = field(default_factory=dict)
    queue_s: float = 0.0
    latency_s: float = 0.0

    def __call__(self, a: AttemptRecord) -> None:
        if a.ok:
            self.ok += 1
            self.by_stage[a.stage] = self.by_stage.get(a.stage, 0) + 1
            self.queue_s += a.queue_s
            self.latency_s += a.latency_s
        else:
            self.failed += 1

    def copy(self) -> _Counts:
        return _Counts(self.ok, self.failed, dict(self.by_stage), self.queue_s, self.latency_s)


def _busy_s(cpus: set[int] | None) -> tuple[float, float]:
    """(busy, total) CPU seconds of ``cpus`` (``None``: all) since boot; busy is all but idle and iowait."""
    import psutil  # extra `bench`, checked by ceb.bench.commands before a run

    busy = total = 0.0
    for i, t in enumerate(psutil.cpu_times(percpu=True)):
        if cpus is None or i in cpus:
            ticks = sum(t[:8])  # user nice system idle iowait irq softirq steal (Linux; guest is inside user)
            total += ticks
            busy += ticks - t.idle - getattr(t, "iowait", 0.0)
    return busy, total


@dataclass(frozen=True, slots=True)
class _Snapshot:
    wall: float
    cpu: float
    cpu_user: float
    cpu_system: float
    counts: _Counts
    sim_cpu: float
    sim_busy_s: float
    sim_done: int
    sim_prompt_tokens: int
    sim_completion_tokens: int
    core: tuple[float, float]


async def _snapshot(counts: _Counts, replicas: SimReplicas, own: set[int] | None) -> _Snapshot:
    def read_sims() -> tuple[float, int, int, int]:
        busy, done, ptok, ctok = 0.0, 0, 0, 0
        for url in replicas.base_urls:
            s = sim_stats(url)
            busy += s["busy_s"]
            done += s["by_status"].get("200", 0)
            ptok += s["prompt_tokens"]
            ctok += s["completion_tokens"]
        return busy, done, ptok, ctok

    import psutil  # extra `bench`

    wall, t, c, core = time.perf_counter(), os.times(), counts.copy(), _busy_s(own)
    sim_cpu = sum(sum(psutil.Process(p).cpu_times()[:2]) for p in replicas.pids)  # user + system
    busy, done, ptok, ctok = await anyio.to_thread.run_sync(read_sims)
    return _Snapshot(wall, t.user + t.system, t.user, t.system, c, sim_cpu, busy, done, ptok, ctok, core)


class _GcPauses:
    """Records each collection's (end time, seconds, generation) while installed in ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        now = time.perf_counter()
        if phase == "start":
            self._start = now
        else:
            self.pauses.append((now, now - self._start, info["generation"]))


async def _lag_monitor(lags: list[float]) -> None:
    while True:
        t = time.perf_counter()
        await anyio.sleep(_LAG_TICK_S)
        lags.append(time.perf_counter() - t - _LAG_TICK_S)


async def _drive(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    run_dir: Path,
    settings: ScaleBench,
    replicas: SimReplicas,
    own: set[int] | None,
) -> tuple[_Snapshot, _Snapshot, list[float], float | None]:
    """Run the pipeline, measure one window after the warm-up, cancel the rest; (start, end, lags, ended_at)."""
    stages = build_stages(config, EndpointLimits())
    assert stages.chat is not None
    counts = _Counts()
    stages.chat.observers.append(counts)
    lags: list[float] = []
    ended_at: list[float] = []

    async def score() -> None:
        await run_scoring(streams, config, run_dir, stages=stages, overwrite=True)
        ended_at.append(time.perf_counter())

    async with stages, anyio.create_task_group() as tg:
        tg.start_soon(score)
        await anyio.sleep(settings.warmup_s)
        start = await _snapshot(counts, replicas, own)
        with anyio.move_on_after(settings.window_s):
            await _lag_monitor(lags)
        end = await _snapshot(counts, replicas, own)
        tg.cancel_scope.cancel()
    return start, end, lags, ended_at[0] if ended_at else None


def _orders(settings: ScaleBench, streams: int, replicas: int) -> int:
    lanes = settings.lanes_per_slot * replicas * settings.max_num_seqs
    return max(1, math.ceil(lanes / (streams * len(settings.methods))))


def run_scale_point(
    streams: Mapping[str, Sequence[Trajectory]],
    settings: ScaleBench,
    replicas: int,
    work: Path,
    *,
    gc_mode: str = "quiet",
) -> ScalePoint:
    """Measure ``replicas`` (``R``) over one window, its figures as :class:`ScaleBench`'s help defines them.

    ``gc_mode``: ``"quiet"`` (:func:`~ceb.gc_tuning.quiet_gc`, as ``ceb score``) or ``"default"``.

    Raises:
        ValueError: Unknown ``gc_mode``.
        RuntimeError: A simulator did not start.
    """
    if gc_mode not in ("quiet", "default"):
        raise ValueError(f"gc_mode is 'quiet' or 'default', got {gc_mode!r}")
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    pin = settings.pin and len(cpus) >= 2
    own, sim_cpus = ({cpus[0]}, set(cpus[1:])) if pin else (None, None)
    orders = _orders(settings, len(streams), replicas)
    sim, slots = settings.sim, settings.max_num_seqs
    with sim_replicas(sim, replicas, processes=settings.sim_processes, cpus=sim_cpus) as reps:
        config = bench_config(
            reps.base_urls,
            sim.model,
            settings.methods,
            concurrency=slots,
            max_active_lanes=len(streams) * orders * len(settings.methods),
            orders=orders,
            votes=settings.votes,
            max_trajectories=settings.max_trajectories,
        )
        before = os.sched_getaffinity(0) if pin else None
        collections = _GcPauses()
        gc.callbacks.append(collections)
        try:
            if own is not None:
                os.sched_setaffinity(0, own)
            with quiet_gc() if gc_mode == "quiet" else default_gc():
                a, b, lags, ended_at = anyio.run(_drive, streams, config, work / f"r{replicas}", settings, reps, own)
        finally:
            gc.callbacks.remove(collections)
            if before is not None:
                os.sched_setaffinity(0, before)
    wall = b.wall - a.wall
    calls = b.counts.ok - a.counts.ok
    served = b.sim_done - a.sim_done
    mean_service = (b.sim_busy_s - a.sim_busy_s) / served if served else math.nan
    capacity = replicas * slots / mean_service if served else math.nan
    cpu = b.cpu - a.cpu
    sim_cpu = b.sim_cpu - a.sim_cpu
    lag = summarize(lags, scale=1e3)
    core_busy = None
    if b.core[1] > a.core[1]:
        core_busy = (b.core[0] - a.core[0]) / (b.core[1] - a.core[1]) * (len(own) if own else os.cpu_count() or 1)
    pauses = [(s, g) for end, s, g in collections.pauses if a.wall <= end <= b.wall]
    return ScalePoint(
        replicas=replicas,
        gc=gc_mode,
        lanes=len(streams) * orders * len(settings.methods),
        orders=orders,
        slots=replicas * slots,
        window_s=wall,
        ended_inside_window=ended_at is not None and ended_at < b.wall,
        calls=calls,
        calls_by_stage={k: v - a.counts.by_stage.get(k, 0) for k, v in b.counts.by_stage.items()},
        failed_attempts=b.counts.failed - a.counts.failed,
        achieved_calls_per_s=calls / wall,
        mean_service_s=mean_service,
        mean_prompt_tokens=(b.sim_prompt_tokens - a.sim_prompt_tokens) / served if served else math.nan,
        mean_completion_tokens=(b.sim_completion_tokens - a.sim_completion_tokens) / served if served else math.nan,
        capacity_calls_per_s=capacity,
        saturation=(calls / wall) / capacity if served else math.nan,
        mean_client_queue_ms=(b.counts.queue_s - a.counts.queue_s) / calls * 1000 if calls else math.nan,
        mean_latency_ms=(b.counts.latency_s - a.counts.latency_s) / calls * 1000 if calls else math.nan,
        ceb_cpu_utilisation=cpu / wall,
        ceb_cpu_user_s=b.cpu_user - a.cpu_user,
        ceb_cpu_system_s=b.cpu_system - a.cpu_system,
        ceb_cpu_ms_per_call=cpu / calls * 1000 if calls else math.nan,
        ceb_core_busy=core_busy,
        sim_cpu_utilisation=sim_cpu / wall,
        sim_cpu_ms_per_call=sim_cpu / served * 1000 if served else None,
        loop_lag_ms=LoopLag(lag.mean, lag.p99, lag.max),
        gc_pauses=GcPauses(
            len(pauses),
            sum(1 for _, g in pauses if g == 2),
            sum(s for s, _ in pauses),
            max((s for s, _ in pauses), default=0.0) * 1000,
        ),
        pinned={"ceb": sorted(own), "sim": sorted(sim_cpus or ())} if own is not None else None,
    )


def run_scale_bench(
    streams: Mapping[str, Sequence[Trajectory]],
    settings: ScaleBench,
    work: Path,
    *,
    knee_saturation: float = 0.9,
    knee_cpu: float = 0.5,
    on_point: Any = None,
) -> ScalePlan:
    """Measure every replica count of ``settings``; find the knee and extrapolate to a core of `ceb`'s own.

    The knee is the first ``R`` whose saturation falls below ``knee_saturation`` while `ceb` used at least
    ``knee_cpu`` of a core; a point below it with `ceb` nearly idle was held back by something else (other
    processes starving the simulator) and goes to ``knee.unsaturated_not_ceb_bound``. Knee and extrapolation use the
    ``"quiet"`` points; ``on_point`` is called with each point as it is measured.
    """
    all_points = []
    for r in settings.replicas:
        for mode in settings.gc_modes:
            point = run_scale_point(streams, settings, r, work, gc_mode=mode)
            all_points.append(point)
            if on_point is not None:
                on_point(point)
    points = [p for p in all_points if p.gc == "quiet"]
    below = [p for p in points if p.saturation < knee_saturation]
    ceb_bound = [p for p in below if p.ceb_cpu_utilisation >= knee_cpu]
    saturated = [p for p in points if p.saturation >= knee_saturation]
    # CPU per call measured where neither side ran out of CPU is what a core of ceb's own would pay per call.
    unhurried = [p.ceb_cpu_ms_per_call for p in saturated] or [p.ceb_cpu_ms_per_call for p in points]
    cpu_ms = statistics.median(unhurried)
    busiest = max(points, key=lambda p: p.achieved_calls_per_s)
    by_r = {(p.replicas, p.gc): p for p in all_points}
    gc_ratio = tuple(
        GcRatio(
            r,
            by_r[r, "quiet"].achieved_calls_per_s / by_r[r, "default"].achieved_calls_per_s,
            by_r[r, "quiet"].ceb_cpu_ms_per_call / by_r[r, "default"].ceb_cpu_ms_per_call,
        )
        for r in settings.replicas
        if (r, "quiet") in by_r and (r, "default") in by_r
    )
    knee = Knee(
        knee_saturation,
        max((p.replicas for p in saturated), default=None),
        knee_cpu,
        ceb_bound[0].replicas if ceb_bound else None,
        tuple(p.replicas for p in below if p not in ceb_bound),
        busiest.achieved_calls_per_s,
        busiest.ceb_cpu_utilisation,
    )
    extrapolation = Extrapolation(
        cpu_ms,
        1000 / cpu_ms,
        1000 / (cpu_ms * settings.per_replica_calls_s),
        busiest.achieved_calls_per_s / busiest.ceb_cpu_utilisation,
    )
    return ScalePlan(settings, settings.sim, "quiet", tuple(all_points), gc_ratio, knee, extrapolation)


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _point_line(p: ScalePoint) -> str:
    return (
        f"R={p.replicas:>3} lanes={p.lanes:>4} gc={p.gc:<7}: {p.achieved_calls_per_s:7.1f} calls/s of "
        f"{p.capacity_calls_per_s:7.1f} capacity (saturation {p.saturation:.3f}); ceb CPU "
        f"{p.ceb_cpu_utilisation:.2f} cores (its core busy {_share(p.ceb_core_busy)}), "
        f"{p.ceb_cpu_ms_per_call:.2f} ms/call; sim CPU {_share(p.sim_cpu_utilisation)} cores; loop lag mean "
        f"{p.loop_lag_ms.mean:.1f} ms, p99 {p.loop_lag_ms.p99:.1f} ms; GC {p.gc_pauses.total_s:.2f} s, "
        f"{p.gc_pauses.full} full, max {p.gc_pauses.max_ms:.0f} ms; failed {p.failed_attempts}"
        + (" (the run ENDED inside the window: raise --max-trajectories)" if p.ended_inside_window else "")
    )


def _scale_lines(result: ScalePlan) -> list[str]:
    knee, ext = result.knee, result.extrapolation
    return [
        *(_point_line(p) for p in result.points),
        f"knee: saturated up to R={knee.largest_saturated_replicas}, first below {knee.saturation_threshold} at "
        f"R={knee.first_unsaturated_replicas}; max {knee.max_achieved_calls_per_s:.0f} calls/s",
        f"extrapolated to a core of ceb's own: {ext.ceb_cpu_ms_per_call:.2f} CPU ms/call -> "
        f"{ext.calls_per_s_one_core:.0f} calls/s -> {ext.replicas_one_core:.1f} replicas at "
        f"{result.settings.per_replica_calls_s:g} calls/s; at the busiest point "
        f"{ext.calls_per_s_per_core_at_max:.0f} calls/s per core of ceb CPU",
        *(
            f"R={c.replicas}: quiet GC / default GC: calls/s x{c.calls_per_s_quiet_over_default:.3f}, "
            f"CPU ms/call x{c.cpu_ms_per_call_quiet_over_default:.3f}"
            for c in result.gc_comparison
        ),
    ]


def _scale(args: ScaleBench, work: Path) -> ScalePlan:
    streams = load_intercode_streams(args.intercode, work / "streams")
    return run_scale_bench(streams, args, work, on_point=lambda p: progress(_point_line(p)))


def main(args: ScaleBench) -> int:
    """``ceb bench scale``: :func:`run_scale_bench` over ``--replicas``, printed and saved."""
    return run_and_save("scale", _scale, args, lines=_scale_lines)
