"""Server-side priority and replica affinity, measured on real vLLM servers.

Two measurements, each with both arms in one run (alternated, so the shared machine's noise hits both):

* **priority**: one server started with ``--scheduling-policy priority`` and a small ``--max-num-seqs``, while
  ``ceb`` keeps many more requests in flight (``backend.max_concurrency``), so the queue that decides the order
  is the server's. A chain-bound mixed workload (:func:`mixed_workload`: one long stream and several short ones)
  is scored with ``backend.server_priority`` ``on`` (each request carries its lane's remaining critical path as
  vLLM's ``priority``) and ``off`` (the server serves its queue FIFO). Figure: makespan.
* **affinity**: two replicas, their base URLs given to ``ceb`` as its endpoints, ``backend.routing`` ``affinity``
  against ``least_outstanding``. Figures: makespan, and the prefix-cache hit rate per replica and overall from
  the ``/metrics`` counters' deltas (:mod:`ceb.backends.metrics`), each replica's cache emptied before each arm.

The servers are any vLLM servers at the given roots; ``benchmarks/bench_routing.py --tiny`` starts the tests' CPU
build with a tiny random-weight model, whose replies are noise but whose request timing and caching are real.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ceb.backends.metrics import ServerMetrics, parse_metrics
from ceb.config import RunConfig, load_config
from ceb.data.trajectory import Trajectory
from ceb.pipeline import run_scoring

__all__ = [
    "RoutingBenchSettings",
    "affinity_workload",
    "mixed_workload",
    "run_affinity_bench",
    "run_priority_bench",
]


@dataclass(frozen=True, slots=True)
class RoutingBenchSettings:
    """The knobs of both measurements.

    Attributes:
        repeats: Runs per arm (arms alternate: off, on, off, on, ...).
        priority_methods: Methods of the priority measurement (``static``: one critic request per step, so a
            lane is exactly a chain of requests).
        priority_concurrency: ``backend.max_concurrency`` there; keep it well above the server's ``max_num_seqs``.
        long_steps: Steps of the long stream (its trajectories taken in order until this many).
        short_lanes: Short streams (one trajectory each) beside it.
        affinity_methods: Methods of the affinity measurement.
        affinity_concurrency: ``backend.max_concurrency`` per replica there.
        votes: ``V`` for bank methods.
        structured_output: The backend's structured-output mode.
    """

    repeats: int = 2
    priority_methods: tuple[str, ...] = ("static",)
    priority_concurrency: int = 64
    long_steps: int = 48
    short_lanes: int = 8
    affinity_methods: tuple[str, ...] = ("ceb", "static")
    affinity_concurrency: int = 8
    votes: int = 3
    structured_output: str = "vllm"


def mixed_workload(
    streams: Mapping[str, Sequence[Trajectory]], long_steps: int, short_lanes: int
) -> dict[str, list[Trajectory]]:
    """One long stream and ``short_lanes`` one-trajectory streams: a chain-bound mix.

    The long stream is the one with the most steps, cut after the trajectory that reaches ``long_steps``; the
    short ones are single trajectories of the other streams (round-robin over them), named ``<stream>#<i>``.

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
        out[f"{name}#{k}"] = [streams[name][k]]
    return out


def affinity_workload(
    streams: Mapping[str, Sequence[Trajectory]], n_streams: int, trajectories: int
) -> dict[str, list[Trajectory]]:
    """The first ``n_streams`` streams by name, each cut to its first ``trajectories`` trajectories."""
    return {name: list(streams[name][:trajectories]) for name in sorted(streams)[:n_streams]}


def _config(
    base_urls: Sequence[str], model: str, backend: Mapping[str, Any], methods: Sequence[str], votes: int
) -> RunConfig:
    return load_config(
        overrides={
            "methods": list(methods),
            "orders": 1,
            "ceb": {"votes": votes},
            "max_active_lanes": 256,
            "backend": {
                "name": "openai",
                "base_url": list(base_urls),
                "model": model,
                "timeout_s": 900,
                **backend,
            },
        }
    )


async def _metrics(session: aiohttp.ClientSession, root: str) -> ServerMetrics:
    async with session.get(f"{root}/metrics") as resp:
        resp.raise_for_status()
        return parse_metrics(await resp.text())


async def _reset(session: aiohttp.ClientSession, root: str) -> bool:
    """Empty the server's prefix cache (``VLLM_SERVER_DEV_MODE=1`` servers only); whether it did."""
    async with session.post(f"{root}/reset_prefix_cache") as resp:
        return resp.status == 200


async def _score(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path
) -> tuple[float, int, int]:
    started = time.perf_counter()
    summary = await run_scoring(streams, config, run_dir, overwrite=True)
    return time.perf_counter() - started, summary.steps_scored, summary.steps_failed


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole else None


async def run_priority_bench(
    streams: Mapping[str, Sequence[Trajectory]], root: str, model: str, settings: RoutingBenchSettings, work: Path
) -> dict[str, Any]:
    """Makespan of ``streams`` with ``backend.server_priority`` ``off`` and ``on``, alternated ``repeats`` times.

    Args:
        streams: The workload (e.g. :func:`mixed_workload`).
        root: The server's root URL (no ``/v1``); it should run ``--scheduling-policy priority``.
        model: The served model name.
        settings: Methods, concurrency, repeats.
        work: A fresh directory for the runs.

    Returns:
        Per run: arm, makespan (s), steps scored and failed; per arm the mean makespan; and ``ratio``
        (mean makespan off / on: above 1 means forwarding the priority shortened the run).
    """
    root = root.rstrip("/")
    runs: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            for arm in ("off", "on"):
                reset = await _reset(session, root)
                config = _config(
                    [f"{root}/v1"],
                    model,
                    {
                        "server_priority": arm,
                        "max_concurrency": settings.priority_concurrency,
                        "structured_output": settings.structured_output,
                    },
                    settings.priority_methods,
                    settings.votes,
                )
                wall, scored, failed = await _score(streams, config, work / f"priority-{arm}-{i}")
                runs.append(
                    {"arm": arm, "repeat": i, "makespan_s": wall, "steps_scored": scored, "steps_failed": failed}
                )
                runs[-1]["cache_reset"] = reset
    mean = {arm: sum(r["makespan_s"] for r in runs if r["arm"] == arm) / settings.repeats for arm in ("off", "on")}
    return {
        "settings": asdict(settings),
        "streams": {name: sum(len(t.steps) for t in ts) for name, ts in streams.items()},
        "runs": runs,
        "mean_makespan_s": mean,
        "ratio_off_over_on": mean["off"] / mean["on"],
    }


async def run_affinity_bench(
    streams: Mapping[str, Sequence[Trajectory]],
    roots: Sequence[str],
    model: str,
    settings: RoutingBenchSettings,
    work: Path,
) -> dict[str, Any]:
    """Makespan and prefix-cache hit rates with ``backend.routing`` ``least_outstanding`` and ``affinity``.

    Each run empties every replica's prefix cache first and reads each one's ``/metrics`` counters before and
    after it.

    Args:
        streams: The workload (e.g. :func:`affinity_workload`).
        roots: The replicas' root URLs (no ``/v1``), serving the same model.
        model: The served model name.
        settings: Methods, concurrency per replica, votes, repeats.
        work: A fresh directory for the runs.

    Returns:
        Per run: arm, makespan (s), steps, and per replica the tokens looked up and hit with the hit rate, plus
        the overall rate; per arm the mean makespan and the pooled hit rate; ``makespan_ratio`` (least
        outstanding / affinity) and ``better`` (the arm with the shorter mean makespan).

    Raises:
        RuntimeError: A replica's ``/metrics`` has no prefix-cache counters (prefix caching off, not vLLM).
    """
    roots = [r.rstrip("/") for r in roots]
    runs: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for i in range(settings.repeats):
            for arm in ("least_outstanding", "affinity"):
                reset = [await _reset(session, r) for r in roots]
                before = [await _metrics(session, r) for r in roots]
                config = _config(
                    [f"{r}/v1" for r in roots],
                    model,
                    {
                        "routing": arm,
                        "max_concurrency": settings.affinity_concurrency,
                        "structured_output": settings.structured_output,
                    },
                    settings.affinity_methods,
                    settings.votes,
                )
                wall, scored, failed = await _score(streams, config, work / f"affinity-{arm}-{i}")
                after = [await _metrics(session, r) for r in roots]
                replicas: list[dict[str, Any]] = []
                for root, b, a in zip(roots, before, after, strict=True):
                    if None in (b.prefix_cache_queries, b.prefix_cache_hits, a.prefix_cache_queries):
                        raise RuntimeError(f"{root}/metrics has no prefix-cache counters: is prefix caching on?")
                    queries = (a.prefix_cache_queries or 0.0) - (b.prefix_cache_queries or 0.0)
                    hits = (a.prefix_cache_hits or 0.0) - (b.prefix_cache_hits or 0.0)
                    replicas.append({"root": root, "queries": queries, "hits": hits, "hit_rate": _share(hits, queries)})
                q, h = sum(r["queries"] for r in replicas), sum(r["hits"] for r in replicas)
                runs.append(
                    {
                        "arm": arm,
                        "repeat": i,
                        "makespan_s": wall,
                        "steps_scored": scored,
                        "steps_failed": failed,
                        "cache_reset": all(reset),
                        "replicas": replicas,
                        "queries": q,
                        "hits": h,
                        "hit_rate": _share(h, q),
                    }
                )
    arms: dict[str, dict[str, Any]] = {}
    for arm in ("least_outstanding", "affinity"):
        mine = [r for r in runs if r["arm"] == arm]
        arms[arm] = {
            "mean_makespan_s": sum(r["makespan_s"] for r in mine) / len(mine),
            "hit_rate": _share(sum(r["hits"] for r in mine), sum(r["queries"] for r in mine)),
        }
    lo, af = arms["least_outstanding"]["mean_makespan_s"], arms["affinity"]["mean_makespan_s"]
    return {
        "settings": asdict(settings),
        "streams": {name: sum(len(t.steps) for t in ts) for name, ts in streams.items()},
        "runs": runs,
        "arms": arms,
        "makespan_ratio_lo_over_affinity": lo / af,
        "better": "affinity" if af <= lo else "least_outstanding",
    }
