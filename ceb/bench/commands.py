"""Every installed benchmark by name (``ceb bench NAME``): its command line's ``main(argv)`` and what it measures.

These are tools a user runs against their own deployment or data; proofs of past fixes and one-off studies live in
the checkout's ``benchmarks/`` (``python benchmarks/NAME.py``). Each module owns its arguments (``ceb bench NAME
--help``) and writes its results under ``./benchmarks/results`` unless given ``--out``; none needs a checkout.
Adding a benchmark is its module's ``main`` plus one :func:`_benchmark` line here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from ceb.registry import Registry

__all__ = ["BENCHMARKS", "SUMMARIES", "run"]

BenchMain = Callable[[Sequence[str] | None], int]
"""A benchmark's command line: ``main(argv)`` -> exit status (argparse exits 0 on ``--help``, 2 on bad input)."""

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


def run(name: str, argv: Sequence[str] = ()) -> int:
    """Run benchmark ``name`` with its command-line arguments ``argv``; return its exit status.

    Args:
        name: A registered name (:data:`BENCHMARKS`).
        argv: Its arguments, e.g. ``["--help"]`` or ``["--sizes", "1000"]``.

    Returns:
        0 on success (and for ``--help``); argparse's 2 for bad arguments; 1 when the benchmark exits with a
        message, which goes to stderr.

    Raises:
        ConfigError: Unknown name, or its module cannot be imported.
    """
    main = BENCHMARKS.get(name)
    try:
        return main(list(argv))
    except SystemExit as exc:  # argparse's --help and usage errors, and a benchmark's own SystemExit("message")
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
