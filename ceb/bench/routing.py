"""Server-side priority, replica affinity and a router's policy, measured on real vLLM servers.

Three measurements, each alternating its two arms in one run (so the shared machine's noise hits both); each
replica's prefix cache is emptied before each arm (servers started with ``VLLM_SERVER_DEV_MODE=1``):

* **priority**: a server with ``--scheduling-policy priority`` and a small ``--max-num-seqs``, ``ceb`` keeping many
  more requests in flight, so the server's queue decides the order. A chain-bound :func:`mixed_workload` is scored
  with ``backend.server_priority`` ``on`` (each request carries its lane's remaining critical path as vLLM's
  ``priority``) and ``off`` (FIFO). Figure: makespan.
* **affinity**: two replicas as ``ceb``'s endpoints, ``backend.routing`` ``affinity`` against ``least_outstanding``.
  Figures: makespan, and the prefix-cache hit rate per replica and overall (``/metrics`` deltas).
* **router**: replicas behind ``vllm-router``, one router per policy (``--router POLICY=URL``): ``consistent_hash``
  on ceb's ``X-Session-ID`` (its lane key) against ``round_robin``, with several ``ceb score --shard i/N`` processes
  at once, arms in ABBA order (a steady drift of the load weighs on both alike). Figures as for affinity, the
  makespan from launching the shards until the last exits.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import aiohttp
import anyio
from pydantic import Field

from ceb.backends.server_metrics import ServerMetrics
from ceb.bench.machine import machine_info
from ceb.bench.options import BenchSettings, bench_config, load_intercode_streams, progress, run_and_save
from ceb.bench.server_admin import reset_prefix_cache, server_metrics
from ceb.bench.stats import percent, share
from ceb.data.intercode import convert_intercode
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError
from ceb.pipeline import run_scoring
from ceb.pipeline.rundir import RunDir

__all__ = [
    "ROUTER_ARMS",
    "ArmMean",
    "ArmRun",
    "Comparison",
    "ReplicaCache",
    "RoutingBench",
    "RoutingResult",
    "cache_deltas",
    "compare",
    "main",
    "mixed_workload",
    "run_affinity_bench",
    "run_priority_bench",
    "run_router_bench",
]


def mixed_workload(
    streams: Mapping[str, Sequence[Trajectory]], long_steps: int, short_lanes: int
) -> dict[str, list[Trajectory]]:
    """The stream with the most steps cut at ``long_steps``, and ``short_lanes`` one-trajectory streams ``<name>.<i>``.

    Raises:
        ValueError: Fewer than two streams, or not enough trajectories for ``short_lanes``.
    """
    if len(streams) < 2:
        raise ValueError("the mixed workload needs at least two streams")
    longest = max(streams, key=lambda s: sum(len(t.steps) for t in streams[s]))
    long: list[Trajectory] = []
    for t in streams[longest]:
        if sum(len(x.steps) for x in long) >= long_steps:
            break
        long.append(t)
    others = [name for name in sorted(streams) if name != longest]
    out: dict[str, list[Trajectory]] = {longest: long}
    for i in range(short_lanes):
        name = others[i % len(others)]
        k = i // len(others)
        if k >= len(streams[name]):
            raise ValueError(f"stream {name} has fewer than {k + 1} trajectories")
        out[f"{name}.{k}"] = [streams[name][k]]
    return out


async def _score(
    streams: Mapping[str, Sequence[Trajectory]],
    urls: Sequence[str],
    settings: RoutingBench,
    methods: Sequence[str],
    backend: Mapping[str, Any],
    run_dir: Path,
) -> tuple[float, int, int]:
    """One arm's run: makespan (s), steps scored and steps failed."""
    config = bench_config(
        urls,
        settings.model,
        methods,
        votes=settings.votes,
        timeout_s=900,
        backend={"structured_output": settings.structured_output, **backend},
        max_active_lanes=256,
    )
    started = time.perf_counter()
    summary = await run_scoring(streams, config, run_dir, overwrite=True)
    return time.perf_counter() - started, summary.steps_scored, summary.steps_failed


@dataclass(frozen=True, slots=True)
class ReplicaCache:
    """One replica's prefix-cache tokens looked up and hit during a run (``/metrics`` deltas), and the hit rate."""

    root: str
    queries: float
    hits: float
    hit_rate: float | None  # None: no tokens looked up


@dataclass(frozen=True, slots=True)
class ArmRun:
    """One run of an arm: its makespan (s), steps, whether every cache was emptied first, and the caches' hits."""

    arm: str
    repeat: int
    makespan_s: float
    steps_scored: int
    steps_failed: int
    cache_reset: bool
    replicas: tuple[ReplicaCache, ...] = ()

    @property
    def queries(self) -> float:
        """Tokens looked up in every replica's prefix cache."""
        return sum(r.queries for r in self.replicas)

    @property
    def hits(self) -> float:
        """Tokens found there."""
        return sum(r.hits for r in self.replicas)

    @property
    def hit_rate(self) -> float | None:
        """Over all replicas (``None``: no tokens looked up)."""
        return share(self.hits, self.queries)


@dataclass(frozen=True, slots=True)
class ArmMean:
    """An arm over its runs: the mean makespan (s), and the hit rate over all their tokens (``None``: none)."""

    mean_makespan_s: float
    hit_rate: float | None


@dataclass(frozen=True, slots=True)
class Comparison:
    """One part's two arms over its repeats: ``ratio``, the first arm's mean makespan over the second's.

    ``streams``: stream name -> steps (the router part: the stream files' names).
    """

    streams: dict[str, int] | tuple[str, ...]
    runs: tuple[ArmRun, ...]
    arms: dict[str, ArmMean]
    ratio: float
    better: str


@dataclass(frozen=True, slots=True)
class RoutingResult:
    """``ceb bench routing``'s record: its settings and the parts run (``None``: not asked for)."""

    settings: RoutingBench
    priority: Comparison | None
    affinity: Comparison | None
    router: Comparison | None


def cache_deltas(
    roots: Sequence[str], before: Sequence[ServerMetrics], after: Sequence[ServerMetrics]
) -> tuple[ReplicaCache, ...]:
    """Per replica (``roots`` in the readings' order), the prefix-cache tokens looked up and hit between readings.

    Raises:
        RuntimeError: A replica's ``/metrics`` has no prefix-cache counters (prefix caching off, not vLLM).
    """
    out = []
    for root, b, a in zip(roots, before, after, strict=True):
        if None in (b.prefix_cache_queries, b.prefix_cache_hits, a.prefix_cache_queries):
            raise RuntimeError(f"{root}/metrics has no prefix-cache counters: is prefix caching on?")
        queries = (a.prefix_cache_queries or 0.0) - (b.prefix_cache_queries or 0.0)
        hits = (a.prefix_cache_hits or 0.0) - (b.prefix_cache_hits or 0.0)
        out.append(ReplicaCache(root, queries, hits, share(hits, queries)))
    return tuple(out)


def compare(streams: dict[str, int] | tuple[str, ...], runs: Sequence[ArmRun], arms: Sequence[str]) -> Comparison:
    """The :class:`Comparison` of ``runs`` between the two ``arms`` (each arm's hit rate pooled over its tokens)."""
    means = {}
    for arm in arms:
        mine = [r for r in runs if r.arm == arm]
        rate = share(sum(r.hits for r in mine), sum(r.queries for r in mine))
        means[arm] = ArmMean(sum(r.makespan_s for r in mine) / len(mine), rate)
    first, second = (means[a].mean_makespan_s for a in arms)
    return Comparison(streams, tuple(runs), means, first / second, arms[1] if second <= first else arms[0])


def _run_line(r: ArmRun) -> str:
    per = ", ".join(percent(x.hit_rate) for x in r.replicas)
    return (
        f"  {r.arm:>17} #{r.repeat}: makespan {r.makespan_s:6.1f} s, {r.steps_scored} steps "
        f"({r.steps_failed} failed), hit rate {percent(r.hit_rate)} (per replica {per}; "
        f"{r.queries:,.0f} tokens looked up)"
    )


def _lines(result: RoutingResult) -> list[str]:
    lines = []
    for name in ("priority", "affinity", "router"):
        c: Comparison | None = getattr(result, name)
        if c is not None:
            lines.append(f"\n{name}: streams {c.streams}")
            lines += [
                f"  {arm:>17}: mean makespan {a.mean_makespan_s:.1f} s, hit rate {percent(a.hit_rate)}"
                for arm, a in c.arms.items()
            ]
            lines.append(f"  {'/'.join(c.arms)} makespan = {c.ratio:.3f}; better: {c.better}")
    return lines


async def run_priority_bench(
    streams: Mapping[str, Sequence[Trajectory]], root: str, settings: RoutingBench, work: Path
) -> Comparison:
    """Makespan of ``streams`` with ``backend.server_priority`` ``off`` and ``on``, alternated ``repeats`` times.

    ``root`` is the server's root URL (no ``/v1``), running ``--scheduling-policy priority``; ``work`` a fresh
    directory. A ratio above 1: forwarding the priority shortened the run.
    """
    root = root.rstrip("/")
    runs: list[ArmRun] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            for arm in ("off", "on"):
                reset = await reset_prefix_cache(session, root)
                backend = {"server_priority": arm, "max_concurrency": settings.priority_concurrency}
                run_dir = work / f"priority-{arm}-{i}"
                wall, scored, failed = await _score(
                    streams, [f"{root}/v1"], settings, settings.priority_methods, backend, run_dir
                )
                runs.append(ArmRun(arm, i, wall, scored, failed, reset))
                progress(_run_line(runs[-1]))
    steps = {name: sum(len(t.steps) for t in ts) for name, ts in streams.items()}
    return compare(steps, runs, ("off", "on"))


async def run_affinity_bench(
    streams: Mapping[str, Sequence[Trajectory]], roots: Sequence[str], settings: RoutingBench, work: Path
) -> Comparison:
    """Makespan and prefix-cache hit rates with ``backend.routing`` ``least_outstanding`` and ``affinity``.

    ``roots`` are the replicas' root URLs (no ``/v1``), serving ``settings.model``; each run empties every
    replica's prefix cache first and reads its ``/metrics`` before and after.

    Raises:
        RuntimeError: A replica's ``/metrics`` has no prefix-cache counters (prefix caching off, not vLLM).
    """
    roots = [r.rstrip("/") for r in roots]
    runs: list[ArmRun] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            for arm in ("least_outstanding", "affinity"):
                reset = [await reset_prefix_cache(session, r) for r in roots]
                before = [await server_metrics(session, r) for r in roots]
                backend = {"routing": arm, "max_concurrency": settings.affinity_concurrency}
                wall, scored, failed = await _score(
                    streams, [f"{r}/v1" for r in roots], settings, settings.affinity_methods, backend,
                    work / f"affinity-{arm}-{i}",
                )  # fmt: skip
                after = [await server_metrics(session, r) for r in roots]
                runs.append(ArmRun(arm, i, wall, scored, failed, all(reset), cache_deltas(roots, before, after)))
                progress(_run_line(runs[-1]))
    steps = {name: sum(len(t.steps) for t in ts) for name, ts in streams.items()}
    return compare(steps, runs, ("least_outstanding", "affinity"))


ROUTER_ARMS = ("round_robin", "consistent_hash")
"""The router's policies compared, in the order even-numbered repeats run them (odd ones reverse it)."""

_CLI = "from ceb.cli import main; main()"


def _shards(streams: Sequence[Path], base_url: str, settings: RoutingBench, work: Path) -> tuple[float, int, int]:
    """Run the ``settings.shards`` shard processes at once; the makespan (s), steps scored and steps failed.

    Raises:
        RuntimeError: A shard exited non-zero (the message ends with its output's tail).
    """
    runs = [work / f"shard-{i}" for i in range(settings.shards)]
    common = ["--backend", "openai", "--base-url", base_url, "--model", settings.model]
    common += ["--methods", ",".join(settings.router_methods), "--limit", str(settings.router_limit)]
    common += ["--max-concurrency", str(settings.shard_concurrency)]
    logs = [work / f"shard-{i}.log" for i in range(settings.shards)]
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    procs = []
    for i, (run, log) in enumerate(zip(runs, logs, strict=True)):
        with log.open("wb") as out:
            cmd = [sys.executable, "-c", _CLI, "--progress", "off", "score", *map(str, streams), "--out", str(run)]
            procs.append(subprocess.Popen([*cmd, "--shard", f"{i}/{settings.shards}", *common], stdout=out, stderr=out))
    codes = [p.wait() for p in procs]
    wall = time.perf_counter() - started
    for code, log in zip(codes, logs, strict=True):
        if code != 0:
            tail = log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"a ceb score shard exited with {code}:\n{tail}")
    rows = [r for run in runs for r in RunDir(run).step_rows()]
    return wall, sum(r.status == "scored" for r in rows), sum(r.status == "failed" for r in rows)


async def run_router_bench(
    streams: Sequence[Path],
    routers: Mapping[str, str],
    roots: Sequence[str],
    settings: RoutingBench,
    work: Path,
) -> Comparison:
    """Makespan and prefix-cache hit rates behind ``vllm-router`` under ``round_robin`` and ``consistent_hash``.

    ``streams``: trajectory JSONL files; ``routers``: policy (:data:`ROUTER_ARMS`) -> the API root of a router
    running it in front of ``roots``. A ratio above 1: consistent hashing finished sooner.

    Raises:
        RuntimeError: A replica cannot empty its prefix cache (not in dev mode), a shard failed, or a replica has no
            prefix-cache counters.
    """
    roots = [r.rstrip("/").removesuffix("/v1") for r in roots]
    work.mkdir(parents=True, exist_ok=True)
    runs: list[ArmRun] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            # ABBA: the arms swap places every repeat, so a steady drift of the machine's load (shared, here)
            # weighs on both alike; round_robin first every time would give consistent_hash the later slot in each.
            for arm in ROUTER_ARMS if i % 2 == 0 else ROUTER_ARMS[::-1]:
                reset = [await reset_prefix_cache(session, r) for r in roots]
                if not all(reset):
                    # Each consistent_hash run follows a round_robin run over the same prompts: from a cache not
                    # emptied it would find them there, and the comparison would favour it.
                    kept = ", ".join(r for r, ok in zip(roots, reset, strict=True) if not ok)
                    raise RuntimeError(
                        f"{kept}: POST /reset_prefix_cache did not empty the prefix cache; start the replicas with "
                        f"VLLM_SERVER_DEV_MODE=1"
                    )
                before = [await server_metrics(session, r) for r in roots]
                wall, scored, failed = await anyio.to_thread.run_sync(
                    _shards, streams, routers[arm], settings, work / f"{arm}-{i}"
                )
                after = [await server_metrics(session, r) for r in roots]
                runs.append(ArmRun(arm, i, wall, scored, failed, all(reset), cache_deltas(roots, before, after)))
                progress(_run_line(runs[-1]))
    return compare(tuple(p.stem for p in streams), runs, ROUTER_ARMS)


# --- command line: ceb bench routing ------------------------------------------------------------------------


class RoutingBench(BenchSettings):
    r"""Server-side priority, replica affinity and a router's policy on REAL vLLM servers (``ceb/bench/routing.py``).

        # --priority-root: a server started with --scheduling-policy priority and a small --max-num-seqs; --replica:
        # two or more (VLLM_SERVER_DEV_MODE=1 so their caches can be emptied); --router: one router per policy in
        # front of those replicas (vllm-router --policy round_robin / consistent_hash):
        ceb bench routing --priority-root http://127.0.0.1:8000 \
            --replica http://127.0.0.1:8001,http://127.0.0.1:8002 --model M \
            --router round_robin=http://127.0.0.1:9001/v1,consistent_hash=http://127.0.0.1:9002/v1
        # from a checkout, the tests' CPU build with their tiny random-weight model (needs .venv-vllm):
        python benchmarks/tiny_vllm.py --server-arg=--scheduling-policy --server-arg=priority \
            --server-arg=--max-num-seqs --server-arg=2 -- \
            routing --parts priority --priority-root {root0} --model {model}
        python benchmarks/tiny_vllm.py --servers 2 --routers -- routing --parts affinity,router \
            --replica {root0},{root1} --model {model} \
            --router round_robin={router_round_robin},consistent_hash={router_consistent_hash}

    Prints the makespan with the priority forwarded and not; the makespan and prefix-cache hit rates with affinity
    routing and least-outstanding, and behind the router per policy; writes ``routing-<UTC>.json`` with the settings
    and the machine.
    """

    model: str
    """The served model name."""
    parts: tuple[Literal["priority", "affinity", "router"], ...] = ("priority", "affinity")
    """The measurements run."""
    priority_root: str | None = None
    """A running server with --scheduling-policy priority (priority)."""
    replica: tuple[str, ...] = ()
    """Running replicas' root URLs (affinity, router)."""
    router: tuple[str, ...] = ()
    """POLICY=URL: each router's API root (router)."""
    priority_concurrency: int = Field(64, ge=1)
    """ceb's max_concurrency for priority."""
    affinity_concurrency: int = Field(8, ge=1)
    """ceb's max_concurrency per replica."""
    long_steps: int = Field(48, ge=1)
    """Steps of the long stream (priority)."""
    short_lanes: int = Field(8, ge=0)
    """One-trajectory streams beside it (priority)."""
    streams: int = Field(4, ge=1)
    """Bash streams scored (affinity)."""
    trajectories: int = Field(4, ge=1)
    """Trajectories kept per stream (affinity)."""
    router_methods: tuple[str, ...] = ("static",)
    """Methods scored (router)."""
    router_streams: int = Field(7, ge=1)
    """InterCode-Bash streams scored (router)."""
    router_limit: int = Field(3, ge=1)
    """Trajectories per stream (router)."""
    shards: int = Field(2, ge=1)
    """ceb score processes at once (router)."""
    shard_concurrency: int = Field(8, ge=1)
    """Each shard's requests in flight (router)."""
    repeats: int = Field(2, ge=1)
    """Runs per arm, arms alternated (the router's in ABBA order: odd repeats run consistent_hash first)."""
    priority_methods: tuple[str, ...] = ("static",)
    """Methods of the priority part (static: one critic request per step, so a lane is a chain of requests)."""
    affinity_methods: tuple[str, ...] = ("ceb", "static")
    """Methods of the affinity part."""
    votes: int = Field(3, ge=1)
    """Hindsight votes V of the bank methods."""
    structured_output: str = "vllm"
    """The backend's structured-output mode."""


def _check_parts(args: RoutingBench) -> None:
    """Refuse a part without the servers it measures."""
    if "priority" in args.parts and not args.priority_root:
        raise ConfigError("the priority part needs --priority-root")
    if {"affinity", "router"} & set(args.parts) and len(args.replica) < 2:
        raise ConfigError("the affinity and router parts need two --replica roots or more")
    if "router" in args.parts and {r.split("=", 1)[0] for r in args.router} != set(ROUTER_ARMS):
        raise ConfigError(f"the router part needs one --router POLICY=URL for each of {', '.join(ROUTER_ARMS)}")


async def _bench(args: RoutingBench, work: Path) -> RoutingResult:
    every = load_intercode_streams(args.intercode, work / "streams", ("bash",))
    priority = affinity = router = None
    if "priority" in args.parts:
        assert args.priority_root is not None  # _check_parts
        streams = mixed_workload(every, args.long_steps, args.short_lanes)
        priority = await run_priority_bench(streams, args.priority_root, args, work / "priority")
    if "affinity" in args.parts:
        streams = {name: every[name][: args.trajectories] for name in sorted(every)[: args.streams]}
        affinity = await run_affinity_bench(streams, args.replica, args, work / "affinity")
    if "router" in args.parts:
        converted = convert_intercode(args.intercode, work / "router-streams", datasets=("bash",))
        paths = [c.path for c in converted][: args.router_streams]
        routers = dict(r.split("=", 1) for r in args.router)
        router = await run_router_bench(paths, routers, args.replica, args, work / "router")
    return RoutingResult(args, priority, affinity, router)


def main(args: RoutingBench) -> int:
    """``ceb bench routing``: the parts asked for, printed and saved.

    Raises:
        ConfigError: A part without its servers.
    """
    _check_parts(args)
    shared = {"shared": "the machine was shared with other jobs during the run"}
    return run_and_save("routing", _bench, args, lines=_lines, machine=machine_info() | shared)
