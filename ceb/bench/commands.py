"""Every installed benchmark by name (``ceb bench NAME``): its ``main(settings)`` and what it measures.

A benchmark's settings are a :class:`~ceb.bench.options.BenchSettings` model; ``ceb bench NAME`` has one option per
field (:mod:`ceb.cli.bench`). Adding one is its module's settings and ``main`` plus one :func:`_benchmark` line here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ceb.registry import Registry

__all__ = ["BENCHMARKS", "SUMMARIES"]

BenchMain = Callable[[Any], int]
"""A benchmark: ``main(settings)`` -> exit status; ``settings`` annotated with its :class:`BenchSettings` model."""

BENCHMARKS: Registry[BenchMain] = Registry("benchmark")
"""Benchmark name -> its ``main``, imported when chosen."""

SUMMARIES: dict[str, str] = {}
"""Benchmark name -> what it measures, one line (``ceb bench --help``), readable without importing it."""


def _benchmark(name: str, target: str, summary: str, *, requires: tuple[str, ...] = ()) -> None:
    BENCHMARKS.register(name, target, extra="bench" if requires else None, requires=requires)
    SUMMARIES[name] = summary


_benchmark(
    "bank-policies",
    "ceb.bench.bank_policies:main",
    "Bounded banks: query, update, memory and file size against the records streamed in (10k-1M), per policy and cap.",
)
_benchmark(
    "client",
    "ceb.bench.scale:client_main",
    "Requests/s and CPU per request and per step of the client (and the openai SDK).",
    requires=("openai", "psutil"),
)
_benchmark(
    "gate",
    "ceb.bench.gate:main",
    "The live gate's overhead over the critic call (1k/10k/100k records) and the calls/s of ceb serve.",
)
_benchmark(
    "scale",
    "ceb.bench.scale:main",
    "How many SIMULATED replicas (about 30 calls/s each) one ceb process keeps saturated, and its CPU per call.",
    requires=("psutil",),
)
_benchmark(
    "engine",
    "ceb.bench.engine:main",
    "The in-process vLLM engine against your vLLM server on the same workload: steps/s and client CPU per "
    "request (run it with a ceb installed beside vllm).",
)
_benchmark(
    "prefix-cache",
    "ceb.bench.prefix_cache:main",
    "Prefix-cache hit rate on your REAL vLLM server against the bound our prompts allow.",
)
_benchmark(
    "routing",
    "ceb.bench.routing:main",
    "On your REAL vLLM servers: makespan with the critical-path priority forwarded to the server or not, and "
    "prefix-cache hit rate and makespan of replica affinity against least-outstanding, and of a router's "
    "consistent_hash on the session header against round_robin.",
)
_benchmark(
    "vs-vllm",
    "ceb.bench.serve_compare:main",
    "ceb's streamed client against `vllm bench serve` on the critic prompts of a static run: vLLM's metrics and "
    "the request-throughput ratio.",
)
