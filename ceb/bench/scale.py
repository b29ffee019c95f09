"""Scale benchmark: how many SIMULATED replicas one `ceb` process keeps busy (the simulator is not a model).

One `ceb` process (this one) runs the real pipeline, the InterCode streams in many orders with CEB and the
static baseline, through the `openai` backend against ``R`` simulated replicas (:mod:`ceb.sim`), each its own
endpoint with ``max_num_seqs`` slots, for ``R`` in ``settings.replicas``. The replicas run in child processes
(:func:`~ceb.bench.processes.sim_replicas`), optionally pinned to other cores than this process, so their CPU and
event loops are not `ceb`'s. Per ``R`` the run is cut after a warm-up and a measured window; in the window:

    achieved      = critic and hindsight calls completed by `ceb` / window seconds
    capacity      = R * max_num_seqs / mean service time (the simulator's own busy seconds per completed call)
    saturation    = achieved / capacity   (equal to the replicas' slot utilisation)
    ceb CPU       = this process's CPU seconds / window seconds (1.0 = one core; asyncio uses one)
    CPU per call  = this process's CPU milliseconds / completed calls
    loop lag      = how late a 50 ms sleep in `ceb`'s event loop wakes up (mean, p99, max)
    core busy     = share of `ceb`'s pinned core busy with any process; busy minus `ceb` CPU is what other
                    processes on a shared machine took from it

The lanes grow with ``R`` (``lanes_per_slot`` lanes per replica slot, as stream x order x method), so there is
always more sequential work than slots; a saturation under 1 then means a CPU ran out (`ceb`'s or the
simulators': both are reported), not that work was missing. Extrapolated to a core of its own, one process
sustains ``1000 / cpu_ms_per_call`` calls/s, i.e. that over ``per-replica calls/s`` replicas.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio

from ceb.backends.base import AttemptRecord
from ceb.backends.scheduling import EndpointLimits
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser, load_intercode_streams
from ceb.bench.processes import SimReplicas, sim_replicas, sim_stats
from ceb.bench.result_files import save_results
from ceb.bench.stats import summarize
from ceb.config import RunConfig, load_config
from ceb.data import Trajectory
from ceb.gc_tuning import quiet_gc
from ceb.logs import configure_logging
from ceb.pipeline import run_scoring
from ceb.sim import SimConfig
from ceb.stages.assembly import build_stages

__all__ = [
    "Extrapolation",
    "GcPauses",
    "GcRatio",
    "Knee",
    "LoopLag",
    "ScalePlan",
    "ScalePoint",
    "ScaleSettings",
    "main",
    "process_cpu_s",
    "run_scale_bench",
    "run_scale_point",
]

_LAG_TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class ScaleSettings:
    """One scale benchmark.

    Attributes:
        replicas: Replica counts ``R`` measured, in order.
        sim: Every replica's load model. The default gives a critic call of the InterCode prompts about 0.5 s
            (15 slots: about 30 critic calls/s per replica); hindsight calls read whole trajectories and take
            longer, so the measured capacity is a little lower.
        methods: Methods run on every stream and order at once.
        votes: Hindsight votes ``V`` of CEB.
        lanes_per_slot: Lanes (stream x order x method) per replica slot; orders are raised to reach it.
        max_trajectories: Trajectories kept per stream and order (enough that no lane ends inside the window).
        warmup_s: Seconds run before the window opens (lanes start, connections open).
        window_s: Seconds measured.
        sim_processes: Child processes serving the replicas (shared out evenly).
        pin: On a machine with at least two usable CPUs, keep this process on the first one and the
            simulators on the others (``os.sched_setaffinity``).
        gc_modes: Garbage-collector settings run per ``R``, back to back: ``"quiet"`` is what ``ceb score``
            and ``ceb grid`` use (:func:`~ceb.gc_tuning.quiet_gc`), ``"default"`` CPython's own.
    """

    replicas: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    sim: SimConfig = SimConfig(max_num_seqs=15, prefill_tok_s=4_000.0, decode_s_per_token=0.01, overhead_s=0.2)
    methods: tuple[str, ...] = ("ceb", "static")
    votes: int = 5
    lanes_per_slot: float = 1.5
    max_trajectories: int = 12
    warmup_s: float = 5.0
    window_s: float = 15.0
    sim_processes: int = 1
    pin: bool = True
    gc_modes: tuple[str, ...] = ("quiet",)


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
    (``R x slots / mean service time``); ``ceb_*`` is this process, ``sim_*`` the simulators' (``None`` when not
    read); ``pinned``: the CPUs each side was kept on (``None``: not pinned).
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
    sim_cpu_utilisation: float | None
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
    """``ceb bench scale``'s record: every point measured, the knee and the extrapolation (on ``gc_mode_of_knee``)."""

    settings: ScaleSettings
    per_replica_calls_s: float
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


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds (user + system) another process has used so far, from ``/proc/<pid>/stat``; None off Linux."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def cpu_ticks(cpus: set[int] | None) -> tuple[int, int] | None:
    """(busy, total) clock ticks of ``cpus`` since boot from ``/proc/stat`` (every CPU when ``None``); None off Linux.

    Busy is everything but idle and iowait, whichever process ran: with this process pinned to a core, the core's
    busy share minus this process's CPU share is what other processes took from it.
    """
    try:
        with open("/proc/stat", "rb") as f:
            lines = f.read().decode().splitlines()
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or (cpus is not None and int(name[3:]) not in cpus):
            continue
        ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


@dataclass(frozen=True, slots=True)
class _Snapshot:
    wall: float
    cpu: float
    cpu_user: float
    cpu_system: float
    counts: _Counts
    sim_cpu: float | None
    sim_busy_s: float
    sim_done: int
    sim_prompt_tokens: int
    sim_completion_tokens: int
    core: tuple[int, int] | None


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

    wall, t, c, core = time.perf_counter(), os.times(), counts.copy(), cpu_ticks(own)
    cpus = [process_cpu_s(p) for p in replicas.pids]
    sim_cpu = None if any(x is None for x in cpus) else sum(x for x in cpus if x is not None)
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
    settings: ScaleSettings,
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


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _orders(settings: ScaleSettings, streams: int, replicas: int) -> int:
    lanes = settings.lanes_per_slot * replicas * settings.sim.max_num_seqs
    return max(1, math.ceil(lanes / (streams * len(settings.methods))))


def run_scale_point(
    streams: Mapping[str, Sequence[Trajectory]],
    settings: ScaleSettings,
    replicas: int,
    work: Path,
    *,
    gc_mode: str = "quiet",
) -> ScalePoint:
    """Measure one replica count ``R`` (see the module docstring); return its figures.

    Args:
        streams: Stream name -> trajectories.
        settings: The replicas' load model, lanes and window.
        replicas: ``R``.
        work: Scratch directory for the run directory.
        gc_mode: ``"quiet"`` (:func:`~ceb.gc_tuning.quiet_gc`, as ``ceb score``) or ``"default"``.

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
    slots = settings.sim.max_num_seqs
    with sim_replicas(settings.sim, replicas, processes=settings.sim_processes, cpus=sim_cpus) as reps:
        config = load_config(
            overrides={
                "backend": {
                    "name": "openai",
                    "base_url": list(reps.base_urls),
                    "model": settings.sim.model,
                    "max_concurrency": slots,
                    "timeout_s": 600,
                },
                "methods": list(settings.methods),
                "ceb": {"votes": settings.votes},
                "orders": orders,
                "max_active_lanes": len(streams) * orders * len(settings.methods),
                "max_trajectories": settings.max_trajectories,
            }
        )
        before = os.sched_getaffinity(0) if pin else None
        collections = _GcPauses()
        gc.callbacks.append(collections)
        try:
            if own is not None:
                os.sched_setaffinity(0, own)
            with quiet_gc() if gc_mode == "quiet" else _nothing():
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
    sim_cpu = None if a.sim_cpu is None or b.sim_cpu is None else b.sim_cpu - a.sim_cpu
    lag = summarize(lags, scale=1e3)
    core_busy = None
    if a.core is not None and b.core is not None and b.core[1] > a.core[1]:
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
        sim_cpu_utilisation=None if sim_cpu is None else sim_cpu / wall,
        sim_cpu_ms_per_call=None if sim_cpu is None or not served else sim_cpu / served * 1000,
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
    settings: ScaleSettings,
    work: Path,
    *,
    per_replica_calls_s: float = 30.0,
    knee_saturation: float = 0.9,
    knee_cpu: float = 0.5,
    on_point: Any = None,
) -> ScalePlan:
    """Measure every replica count of ``settings``; find the knee and extrapolate to a core of `ceb`'s own.

    Args:
        streams: Stream name -> trajectories (each order keeps the first ``settings.max_trajectories``).
        settings: Replica counts, the replicas' load model and the window.
        work: Scratch directory for the run directories.
        per_replica_calls_s: The per-replica rate the extrapolation divides by (calls/s).
        knee_saturation: The knee is the first ``R`` whose saturation falls below this...
        knee_cpu: ...while `ceb` used at least this share of a core. A point below the saturation threshold with
            `ceb` nearly idle was held back by something else (on a shared machine, other processes starving the
            simulator); it is listed under ``knee.unsaturated_not_ceb_bound`` instead.
        on_point: Called with each point's figures as it is measured (to print them).

    Returns:
        Every point; the knee and the extrapolation use the ``"quiet"`` points when they were measured.
    """
    all_points = []
    for r in settings.replicas:
        for mode in settings.gc_modes:
            point = run_scale_point(streams, settings, r, work, gc_mode=mode)
            all_points.append(point)
            if on_point is not None:
                on_point(point)
    main = "quiet" if "quiet" in settings.gc_modes else settings.gc_modes[0]
    points = [p for p in all_points if p.gc == main]
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
        1000 / (cpu_ms * per_replica_calls_s),
        busiest.achieved_calls_per_s / busiest.ceb_cpu_utilisation,
    )
    return ScalePlan(settings, per_replica_calls_s, main, tuple(all_points), gc_ratio, knee, extrapolation)


# --- command line: ceb bench scale --------------------------------------------------------------------------

_HELP = """Scale plan: how many SIMULATED replicas one `ceb` process keeps saturated, and where its CPU runs out.

    ceb bench scale --replicas 1 2 4 8 16 32

One `ceb` process runs the real InterCode pipeline (CEB and static, many orders) against R simulated replicas in a
separate process, each with 15 slots and about 0.5 s per critic call (about 30 calls/s); per R it prints the calls/s
achieved against the replicas' capacity, `ceb`'s CPU use and CPU ms per call, and the event-loop lag, and writes
``scale-<UTC>.json`` with the settings and the machine. The simulator is not a model: it stands for a vLLM
replica's queueing and service times (see ``ceb/bench/scale.py``).
"""


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _print_point(p: ScalePoint) -> None:
    print(
        f"R={p.replicas:>3} lanes={p.lanes:>4} gc={p.gc:<7}: {p.achieved_calls_per_s:7.1f} calls/s of "
        f"{p.capacity_calls_per_s:7.1f} capacity (saturation {p.saturation:.3f}); ceb CPU "
        f"{p.ceb_cpu_utilisation:.2f} cores (its core busy {_share(p.ceb_core_busy)}), "
        f"{p.ceb_cpu_ms_per_call:.2f} ms/call; sim CPU {_share(p.sim_cpu_utilisation)} cores; loop lag mean "
        f"{p.loop_lag_ms.mean:.1f} ms, p99 {p.loop_lag_ms.p99:.1f} ms; GC {p.gc_pauses.total_s:.2f} s, "
        f"{p.gc_pauses.full} full, max {p.gc_pauses.max_ms:.0f} ms; failed {p.failed_attempts}"
        + (" (the run ENDED inside the window: raise --max-trajectories)" if p.ended_inside_window else ""),
        flush=True,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench scale``: :func:`run_scale_bench` over ``--replicas`` and save the figures (``--help``)."""
    d = ScaleSettings()
    ap = bench_parser("scale", _HELP)
    ap.add_argument("--replicas", type=int, nargs="+", default=list(d.replicas), help="replica counts R")
    ap.add_argument("--max-num-seqs", type=int, default=d.sim.max_num_seqs, help="slots per replica")
    ap.add_argument("--time-scale", type=float, default=d.sim.time_scale, help="multiplies every service time")
    ap.add_argument("--per-replica-calls-s", type=float, default=30.0, help="rate the extrapolation divides by")
    ap.add_argument("--warmup-s", type=float, default=d.warmup_s, help="seconds before the window")
    ap.add_argument("--window-s", type=float, default=d.window_s, help="seconds measured per R")
    ap.add_argument("--max-trajectories", type=int, default=d.max_trajectories, help="per stream and order")
    ap.add_argument("--sim-processes", type=int, default=d.sim_processes, help="child processes for the replicas")
    ap.add_argument("--compare-gc", action="store_true", help="also run each R with CPython's default GC, back to back")
    ap.add_argument("--no-pin", action="store_true", help="do not pin ceb and the simulators to separate cores")
    args = ap.parse_args(argv)
    configure_logging("error")
    settings = replace(
        d,
        replicas=tuple(args.replicas),
        sim=replace(d.sim, max_num_seqs=args.max_num_seqs, time_scale=args.time_scale),
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        max_trajectories=args.max_trajectories,
        sim_processes=args.sim_processes,
        pin=not args.no_pin,
        gc_modes=("default", "quiet") if args.compare_gc else ("quiet",),
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        streams = load_intercode_streams(args.intercode, work / "streams")
        result = run_scale_bench(
            streams, settings, work, per_replica_calls_s=args.per_replica_calls_s, on_point=_print_point
        )
    knee, ext = result.knee, result.extrapolation
    print(
        f"knee: saturated up to R={knee.largest_saturated_replicas}, first below {knee.saturation_threshold} at "
        f"R={knee.first_unsaturated_replicas}; max {knee.max_achieved_calls_per_s:.0f} calls/s"
    )
    print(
        f"extrapolated to a core of ceb's own: {ext.ceb_cpu_ms_per_call:.2f} CPU ms/call -> "
        f"{ext.calls_per_s_one_core:.0f} calls/s -> {ext.replicas_one_core:.1f} replicas at "
        f"{args.per_replica_calls_s:g} calls/s; at the busiest point "
        f"{ext.calls_per_s_per_core_at_max:.0f} calls/s per core of ceb CPU"
    )
    path = save_results(args.out, "scale", result, machine_info())
    for c in result.gc_comparison:
        print(
            f"R={c.replicas}: quiet GC / default GC: calls/s x{c.calls_per_s_quiet_over_default:.3f}, "
            f"CPU ms/call x{c.cpu_ms_per_call_quiet_over_default:.3f}"
        )
    print(f"saved {path}")
    return 0
