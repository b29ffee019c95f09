"""A router in front of real vLLM replicas: ``consistent_hash`` on ceb's session header against ``round_robin``.

Two or more vLLM replicas sit behind vLLM's own router (``vllm-router``, started here once per arm with the arm's
``--policy``); several ``ceb score --shard i/N`` processes run at once with the router as their one endpoint, so
the choice of replica is the router's alone. ``consistent_hash`` keys on ``X-Session-ID``, which carries ceb's
lane key, so a lane's requests meet the prefix cache its earlier requests filled; ``round_robin`` spreads them.

Both arms in one run, alternated in ABBA order (``round_robin``, ``consistent_hash``, then ``consistent_hash``,
``round_robin``, ...: a steady drift of the machine's load weighs on both alike), each replica's
prefix cache emptied before each arm (``POST /reset_prefix_cache``: the replicas need ``VLLM_SERVER_DEV_MODE=1``).
Figures per arm: the makespan (from launching the shard processes until the last one exits, their start-up
included alike in both arms) and the prefix-cache hit rate per replica and overall, from each replica's
``/metrics`` counters before and after (:func:`ceb.bench.routing.cache_deltas`); the ratio is the mean makespan
of ``round_robin`` over that of ``consistent_hash``.

The router is started by the checkout's ``tests/support/vllm_router.py`` (so the benchmark needs a checkout),
from ``.venv-vllm`` (``.ci/install-vllm`` installs it) unless ``--router-bin`` names another ``vllm-router``;
``--real`` also starts two replicas of the tests' real model (SmolLM2-135M-Instruct, vLLM's CPU build).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser, checkout_module, require_checkout, run_and_save
from ceb.bench.routing import arm_means, cache_deltas, print_arms, print_run, run_record
from ceb.bench.server_admin import reset_prefix_cache, server_metrics
from ceb.data.intercode import convert_intercode
from ceb.pipeline.rundir import RunDir

__all__ = ["ARMS", "RouterBenchSettings", "main", "run_router_bench"]

ARMS = ("round_robin", "consistent_hash")
"""The router's policies compared, in the order even-numbered repeats run them (odd ones reverse it)."""

_CLI = "from ceb.cli import main; main()"


@dataclass(frozen=True, slots=True)
class RouterBenchSettings:
    """The knobs of one measurement.

    Attributes:
        methods: Methods scored (``static``: one critic request per step; ``ceb`` adds bank prompts and votes).
        limit: Trajectories scored per stream (``ceb score --limit``).
        shards: ``ceb score`` processes run at once (``--shard i/N``).
        max_concurrency: ``backend.max_concurrency`` of each process (its requests in flight to the router).
        repeats: Runs per arm, arms alternated (ABBA: odd-numbered repeats run ``consistent_hash`` first).
    """

    methods: tuple[str, ...] = ("static",)
    limit: int = 3
    shards: int = 2
    max_concurrency: int = 8
    repeats: int = 2


def _shards(
    streams: Sequence[Path], base_url: str, model: str, settings: RouterBenchSettings, work: Path
) -> tuple[float, int, int]:
    """Run the ``settings.shards`` shard processes at once; the makespan (s), steps scored and steps failed.

    Raises:
        RuntimeError: A shard exited non-zero (the message ends with its output's tail).
    """
    runs = [work / f"shard-{i}" for i in range(settings.shards)]
    common = ["--backend", "openai", "--base-url", base_url, "--model", model, "--methods", ",".join(settings.methods)]
    common += ["--limit", str(settings.limit), "--max-concurrency", str(settings.max_concurrency)]
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
    roots: Sequence[str],
    model: str,
    settings: RouterBenchSettings,
    work: Path,
    router_bin: Path | None = None,
) -> dict[str, Any]:
    """Makespan and prefix-cache hit rates behind ``vllm-router`` under ``round_robin`` and ``consistent_hash``.

    Args:
        streams: Trajectory JSONL files, one stream each.
        roots: The replicas' root URLs (no ``/v1``), serving ``model``, started with ``VLLM_SERVER_DEV_MODE=1``.
        model: The served model name.
        settings: Methods, trajectories, shards, concurrency, repeats.
        work: A fresh directory for the runs and the routers' logs.
        router_bin: The ``vllm-router`` launcher (``None``: the checkout's ``.venv-vllm``).

    Returns:
        Per run: arm, makespan (s), steps scored and failed, whether every cache was emptied, and per replica the
        tokens looked up and hit with the hit rate, plus the overall rate; per arm the mean makespan and pooled
        hit rate; ``makespan_ratio_rr_over_hash`` (above 1: consistent hashing finished sooner) and ``better``.

    Raises:
        RuntimeError: A replica cannot empty its prefix cache (not in dev mode), a shard failed, or a replica has no
            prefix-cache counters.
        ConfigError: This ``ceb`` is not imported from a checkout (the router is started by its
            ``tests/support/vllm_router.py``).
    """
    router = checkout_module("vllm_router")
    roots = [r.rstrip("/").removesuffix("/v1") for r in roots]
    binary = {"binary": router_bin} if router_bin is not None else {}
    work.mkdir(parents=True, exist_ok=True)
    runs: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            # ABBA: the arms swap places every repeat, so a steady drift of the machine's load (shared, here)
            # weighs on both alike; round_robin first every time would give consistent_hash the later slot in each.
            for arm in ARMS if i % 2 == 0 else ARMS[::-1]:
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
                with router.serve_router(roots, work / f"router-{arm}-{i}.log", policy=arm, **binary) as served:
                    wall, scored, failed = await anyio.to_thread.run_sync(
                        _shards, streams, served.base_url, model, settings, work / f"{arm}-{i}"
                    )
                after = [await server_metrics(session, r) for r in roots]
                runs.append(run_record(arm, i, wall, scored, failed, reset, cache_deltas(roots, before, after)))
                print_run(runs[-1], 15)
    arms = arm_means(runs, ARMS)
    rr, ch = arms["round_robin"]["mean_makespan_s"], arms["consistent_hash"]["mean_makespan_s"]
    return {
        "settings": asdict(settings),
        "streams": [p.stem for p in streams],
        "replicas": roots,
        "runs": runs,
        "arms": arms,
        "makespan_ratio_rr_over_hash": rr / ch,
        "better": "consistent_hash" if ch <= rr else "round_robin",
    }


# --- command line: ceb bench router -------------------------------------------------------------------------

_HELP = """vLLM's router in front of REAL vLLM replicas: consistent_hash (on ceb's X-Session-Id) against round_robin,
with several ceb score shards at once (see ``ceb/bench/router.py``).

    # two replicas of the tests' real model (SmolLM2-135M-Instruct, vLLM's CPU build; needs .venv-vllm with
    # vllm-router, built by .ci/install-vllm):
    ceb bench router --real --limit 3 --repeats 2
    # replicas you run (VLLM_SERVER_DEV_MODE=1 so their caches can be emptied, prefix caching on):
    ceb bench router --replica http://127.0.0.1:8001 --replica http://127.0.0.1:8002 --model M

Prints each run's makespan and prefix-cache hit rates (per replica and overall), the means per arm and the
makespan ratio round_robin / consistent_hash; writes ``router-<UTC>.json`` with the settings and the machine.
"""


def _print(doc: dict[str, Any]) -> None:
    print_arms(doc["arms"], 15)
    print(f"  round_robin/consistent_hash makespan = {doc['makespan_ratio_rr_over_hash']:.3f}; better: {doc['better']}")


async def _bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    converted = convert_intercode(args.intercode, work / "streams", datasets=("bash",))
    streams = [c.path for c in converted][: args.streams]
    settings = RouterBenchSettings(
        methods=tuple(args.methods.split(",")),
        limit=args.limit,
        shards=args.shards,
        max_concurrency=args.max_concurrency,
        repeats=args.repeats,
    )
    doc: dict[str, Any] = {"benchmark": "router", "server": "real" if args.real else "given"}
    with contextlib.ExitStack() as stack:
        if args.real:
            roots, model = _real_replicas(stack, work / "replica-logs", args.kv_cache_gib)
        else:
            roots, model = args.replica, args.model
        print(f"router in front of {roots}: streams {[p.stem for p in streams]}, {settings}", flush=True)
        doc["router"] = await run_router_bench(streams, roots, model, settings, work / "runs", args.router_bin)
    _print(doc["router"])
    return doc


def _real_replicas(stack: contextlib.ExitStack, logs: Path, kv_cache_gib: int) -> tuple[list[str], str]:
    """Two replicas of the tests' real model in dev mode, stopped when ``stack`` closes; replica i on core i."""
    server = checkout_module("vllm_server")
    model_dir = checkout_module("real_model").real_model_dir()
    logs.mkdir(parents=True, exist_ok=True)
    roots = []
    for i in range(2):
        s = stack.enter_context(
            server.serve_vllm(
                model_dir,
                logs / f"vllm-{i}.log",
                load_format="auto",
                model_name=server.REAL_MODEL_NAME,
                kv_cache_gib=kv_cache_gib,
                ready_timeout_s=900,
                extra_args=("--enforce-eager",),
                dev_mode=True,
                # One core each: vLLM's CPU build otherwise binds both engines to the same first core.
                env={"VLLM_CPU_OMP_THREADS_BIND": str(i % (os.cpu_count() or 1))},
            )
        )
        print(f"replica {s.base_url} ready after {s.start_s:.0f} s", flush=True)
        roots.append(s.base_url.removesuffix("/v1"))
    return roots, str(server.REAL_MODEL_NAME)


def main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench router``: both arms, alternated, and save the figures (``--help`` lists options)."""
    ap = bench_parser("router", _HELP)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--real", action="store_true", help="start two replicas of the tests' real model")
    where.add_argument("--replica", action="append", help="a running replica's root URL (repeat it)")
    ap.add_argument("--model", help="served model name (with --replica)")
    ap.add_argument("--router-bin", type=Path, help="a vllm-router launcher (default: the checkout's .venv-vllm)")
    ap.add_argument("--methods", default="static", help="comma-separated methods scored (default: static)")
    ap.add_argument("--streams", type=int, default=7, help="InterCode-Bash streams scored (default: all 7)")
    ap.add_argument("--limit", type=int, default=3, help="trajectories per stream (default: 3)")
    ap.add_argument("--shards", type=int, default=2, help="ceb score processes at once (default: 2)")
    ap.add_argument("--max-concurrency", type=int, default=8, help="each process's requests in flight (default: 8)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per arm, arms alternated ABBA (default: 2)")
    ap.add_argument("--kv-cache-gib", type=int, default=1, help="--real: each replica's KV cache (GiB)")
    args = ap.parse_args(argv)
    if args.replica is not None and (len(args.replica) < 2 or not args.model):
        ap.error("give two --replica roots or more, and --model")
    require_checkout("ceb bench router starts vllm-router", "run it from a checkout of ceb")
    shared = {"shared": "the machine was shared with other jobs during the run"}
    return run_and_save("router", _bench, args, machine=machine_info() | shared)
