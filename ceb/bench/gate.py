"""Live-gate figures (issue 14, part 4): the gate's overhead on top of the critic call, and gate calls per second.

Overhead: :attr:`~ceb.gate.Confidence.overhead_s`, seconds in :meth:`Gate.score` minus those in the critic call
(stream lookup, state summary, key, retrieval from a bank of real InterCode-SQL records grown to ``N``, repetition
flag, bookkeeping), steps of the same stream scored one at a time. Throughput: ``streams`` clients post score
requests back to back to one ``ceb serve --in-memory`` (offline backend) over loopback; calls/s over the window.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
from pydantic import Field

from ceb.bank import RETRIEVERS, BankRecord
from ceb.bench.bank_policies import grow, load_sql_trajectories
from ceb.bench.options import BenchSettings, bench_config, progress, run_and_save
from ceb.bench.processes import sim_process
from ceb.bench.stats import summarize
from ceb.config import RunConfig
from ceb.data.trajectory import Step
from ceb.gate import Gate, StepContext
from ceb.gate.state import StateDir
from ceb.sim import SimConfig
from ceb.stages.methods import resolve_method

__all__ = [
    "GateBench",
    "GateResult",
    "OverheadResult",
    "ThroughputResult",
    "main",
    "measure_overhead",
    "measure_throughput",
]


@dataclass(frozen=True, slots=True)
class OverheadResult:
    """Overhead of :meth:`Gate.score` over the critic call at one bank size (milliseconds)."""

    backend: str
    records: int
    calls: int
    overhead_p50_ms: float
    overhead_p99_ms: float
    latency_p50_ms: float
    latency_p99_ms: float
    critic_p50_ms: float


@dataclass(frozen=True, slots=True)
class ThroughputResult:
    """Gate calls per second of one ``ceb serve`` process."""

    streams: int
    calls: int
    seconds: float
    calls_per_s: float
    latency_p50_ms: float
    latency_p99_ms: float
    errors: int


STREAM = "bench"
"""The one stream the overhead figure scores."""


def _write_bank(state_dir: Path, records: Sequence[BankRecord], config: RunConfig) -> None:
    """:data:`STREAM`'s bank of ``records`` in ``state_dir``, through the gate's own files and derived settings."""
    resolved = resolve_method(config.gate.method).resolve(config.ceb)
    files = StateDir(state_dir, fsync=False).open(
        STREAM, RETRIEVERS.get(resolved.retriever)(), config.bank.for_k(resolved.k)
    )
    files.inbox.close()
    with files.journal as journal:
        journal.add_trajectory(records, mark=1)


async def measure_overhead(
    real: Sequence[Sequence[BankRecord]],
    size: int,
    state_dir: Path,
    *,
    config: RunConfig,
    backend: str,
    calls: int = 300,
    seed: int = 0,
) -> OverheadResult:
    """Score ``calls`` steps (after 20 untimed) against a bank of ``size`` records grown from ``real``.

    ``state_dir`` is an empty folder for the gate's state; ``config`` the gate's (``offline``, or ``openai`` at the
    simulator); ``backend`` labels the result.
    """
    grown, _ = grow(real, size)
    flat = [r for traj in grown for r in traj][:size]
    _write_bank(state_dir, flat, config)
    queries = random.Random(seed).sample(flat, min(len(flat), calls + 20))
    overhead, latency, critic = [], [], []
    async with Gate(config, state_dir=state_dir) as gate:
        assert len(gate.bank(STREAM)) == len(flat)
        for i, r in enumerate(queries):
            ctx = StepContext(f"q{i}", r.task, "sql", Step(r.state, r.action, ""))
            c = await gate.score(STREAM, ctx)
            if i >= 20:
                overhead.append(c.overhead_s)
                latency.append(c.latency_s)
                critic.append(c.critic_s)
    o, lat = summarize(overhead, scale=1e3), summarize(latency, scale=1e3)
    critic_p50 = summarize(critic, scale=1e3).p50
    return OverheadResult(backend, len(flat), o.n, o.p50, o.p99, lat.p50, lat.p99, critic_p50)


async def measure_throughput(
    url: str, *, streams: int = 100, seconds: float = 5.0, warmup_s: float = 1.0
) -> ThroughputResult:
    """Drive ``url`` (a running ``ceb serve``) with ``streams`` concurrent clients posting score requests."""
    latencies: list[float] = []
    errors = 0
    measuring = False
    stop = anyio.Event()

    async def client(session: aiohttp.ClientSession, s: int) -> None:
        nonlocal errors
        i = 0
        while not stop.is_set():
            body: dict[str, Any] = {
                "stream": f"s{s}",
                "trajectory_id": f"t{i // 4}",
                "task": f"find the rows of table {s % 13}",
                "domain": "sql",
                "action": f"SELECT * FROM t{s % 13} WHERE id = {i % 50}",
            }
            began = time.perf_counter()
            async with session.post(f"{url}/v1/score", json=body) as r:
                await r.read()
                ok = r.status == 200
            if measuring:
                latencies.append(time.perf_counter() - began)
                errors += not ok
            i += 1

    connector = aiohttp.TCPConnector(limit=streams)
    async with aiohttp.ClientSession(connector=connector) as session, anyio.create_task_group() as tg:
        for s in range(streams):
            tg.start_soon(client, session, s)
        await anyio.sleep(warmup_s)
        measuring = True
        began = time.perf_counter()
        await anyio.sleep(seconds)
        measuring = False
        elapsed = time.perf_counter() - began
        stop.set()
    lat = summarize(latencies, scale=1e3)
    return ThroughputResult(streams, lat.n, elapsed, lat.n / elapsed, lat.p50, lat.p99, errors)


# --- command line: ceb bench gate ---------------------------------------------------------------------------


TARGETS = "overhead p50 <= 2 ms and p99 <= 10 ms at 10k records; >= 1,000 gate calls/s (offline backend)"


@dataclass(frozen=True, slots=True)
class GateResult:
    """``ceb bench gate``'s record: the settings, the overhead per backend and bank size, and the throughput."""

    sizes: tuple[int, ...]
    calls: int
    streams: int
    seconds: float
    overhead: tuple[OverheadResult, ...]
    throughput: ThroughputResult
    targets: str = TARGETS


# The installed console script's entry point, run by this interpreter (no checkout's run.py needed).
_SERVE = "import sys; from ceb.cli import main; sys.argv[0] = 'ceb'; main()"


def _serve() -> tuple[subprocess.Popen[bytes], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE, "serve", "--port", "0", "--in-memory"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    proc.stdout.close()
    if "listening on" not in line:
        proc.kill()
        proc.wait()
        raise SystemExit(f"ceb serve did not start: {line!r}")
    return proc, line.rsplit(" ", 1)[-1].strip()


class GateBench(BenchSettings):
    """Live-gate benchmark: overhead on top of the critic call at banks of 1k/10k/100k records, and gate calls/s.

        ceb bench gate --sizes 1000,10000,100000

    Overhead with the offline backend and with the simulated OpenAI server (``ceb sim-server``, zero service time)
    as the critic; throughput of one ``ceb serve --in-memory`` process (offline backend) under ``--streams`` concurrent
    clients. Prints a Markdown table and writes ``gate-<UTC timestamp>.json``. See ``ceb/bench/gate.py`` for what each
    figure measures.
    """

    sizes: tuple[int, ...] = (1000, 10000, 100000)
    """Bank sizes (records)."""
    calls: int = Field(300, ge=1)
    """Score calls timed per size and backend."""
    streams: int = Field(100, ge=1)
    """Concurrent streams for the throughput figure."""
    seconds: float = Field(5.0, gt=0)
    """Measured window of the throughput figure (seconds)."""
    sim: bool = True
    """Also measure through the simulator backend."""


def _bench(args: GateBench, work: Path) -> GateResult:
    real = load_sql_trajectories(args.intercode)
    overhead: list[OverheadResult] = []

    async def sizes(label: str, config: RunConfig) -> None:
        for i, size in enumerate(args.sizes):
            state = work / f"{label}-{i}"
            state.mkdir()
            r = await measure_overhead(real, size, state, config=config, backend=label, calls=args.calls)
            progress(
                f"{r.backend:>9} {r.records:>7,} records: overhead p50 {r.overhead_p50_ms:.3f} ms, p99 "
                f"{r.overhead_p99_ms:.3f} ms (critic p50 {r.critic_p50_ms:.3f} ms)"
            )
            overhead.append(r)

    anyio.run(sizes, "offline", bench_config(None, None, ("ceb",), backend={"name": "offline"}))
    if args.sim:
        with sim_process(SimConfig(time_scale=0.0)) as url:
            os.environ.setdefault("OPENAI_API_KEY", "sim")
            anyio.run(sizes, "simulator", bench_config(url, SimConfig().model, ("ceb",), backend={"preflight": False}))
    proc, url = _serve()
    try:
        tp = anyio.run(lambda: measure_throughput(url, streams=args.streams, seconds=args.seconds))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return GateResult(tuple(args.sizes), args.calls, args.streams, args.seconds, tuple(overhead), tp)


def _lines(result: GateResult) -> list[str]:
    tp = result.throughput
    return [
        "| backend | bank records | overhead p50 (ms) | overhead p99 (ms) | score p50 (ms) | score p99 (ms) "
        "| critic p50 (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        *(
            f"| {r.backend} | {r.records:,} | {r.overhead_p50_ms:.3f} | {r.overhead_p99_ms:.3f} "
            f"| {r.latency_p50_ms:.3f} | {r.latency_p99_ms:.3f} | {r.critic_p50_ms:.3f} |"
            for r in result.overhead
        ),
        "",
        f"Throughput, one `ceb serve --in-memory` process (offline backend), {tp.streams} concurrent streams over "
        f"loopback HTTP: {tp.calls_per_s:,.0f} gate calls/s ({tp.calls:,} calls in {tp.seconds:.1f} s, p50 "
        f"{tp.latency_p50_ms:.1f} ms, p99 {tp.latency_p99_ms:.1f} ms, {tp.errors} errors).",
        f"Targets: {TARGETS}.",
    ]


def main(args: GateBench) -> int:
    """``ceb bench gate``: overhead per bank size and backend, then ``ceb serve``'s calls/s, printed and saved."""
    return run_and_save("gate", _bench, args, lines=_lines)
