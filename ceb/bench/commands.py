"""Every benchmark by name (``ceb bench NAME``): its command line's ``main(argv)`` and a line on what it measures.

Each benchmark's module owns its arguments (``ceb bench NAME --help``) and writes its results under
``./benchmarks/results`` unless given ``--out``; nothing needs a checkout except ``--tiny`` (the tests' vLLM
server). Adding a benchmark is its module's ``main`` plus one :func:`_benchmark` line here.
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


def _benchmark(name: str, target: str, summary: str) -> None:
    BENCHMARKS.register(name, target)
    SUMMARIES[name] = summary


_benchmark(
    "bank",
    "ceb.bench.bank:main",
    "The TF-IDF bank kernel against the scikit-learn refit: update and query times by bank size.",
)
_benchmark(
    "readout",
    "ceb.bench.readout:main",
    "Verbal scores under the text and expected readouts per method, and hindsight votes read as probabilities "
    "(reads run directories and asks an endpoint).",
)
_benchmark(
    "bank-policies",
    "ceb.bench.bank_policies:main",
    "Bounded banks: offline CEB's ECE/Brier/AUROC against the cap per policy (the offline stand-in, NOT an LLM), "
    "and query, update, memory and file size against records (10k-1M).",
)
_benchmark(
    "pipeline",
    "ceb.bench.pipeline:main",
    "Many ordered streams against the SIMULATED server: schedule efficiency against its lower bound, and the "
    "naive way.",
)
_benchmark(
    "client",
    "ceb.bench.pipeline:client_main",
    "Requests/s and CPU per request and per step of the client (and the openai SDK).",
)
_benchmark(
    "faults",
    "ceb.bench.faults:main",
    "The same run with and without injected server faults on the simulator: identical results expected.",
)
_benchmark(
    "reuse",
    "ceb.bench.reuse:main",
    "Requests of the paper's grid (3 orders, every method) on the SIMULATED server with bank-free methods asked "
    "in every order, then scored once and copied.",
)
_benchmark(
    "gate",
    "ceb.bench.gate:main",
    "The live gate's overhead over the critic call (1k/10k/100k records) and the calls/s of ceb serve.",
)
_benchmark(
    "long-trajectory",
    "ceb.bench.long_trajectory:main",
    "Seconds per step of one 100 to 20,000-step trajectory through ceb score (offline backend), and the ratio to "
    "100 steps; --before CHECKOUT times another checkout in the same run.",
)
_benchmark(
    "gate-restart",
    "ceb.bench.gate_restart:main",
    "Seconds for a durable gate to restart against 1k/10k/100k trajectories of history: from its bank snapshot, "
    "and by replaying every update (the previous way).",
)
_benchmark(
    "scale",
    "ceb.bench.scale:main",
    "How many SIMULATED replicas (about 30 calls/s each) one ceb process keeps saturated, and its CPU per call.",
)
_benchmark(
    "engine",
    "ceb.bench.engine:main",
    "The in-process vLLM engine against vLLM's HTTP server on the same workload: steps/s and client CPU per "
    "request (run it with .venv-vllm's ceb).",
)
_benchmark(
    "prefix-cache",
    "ceb.bench.prefix_cache:main",
    "Prefix-cache hit rate on a REAL vLLM server against the bound our prompts allow (--tiny: the tests' CPU build).",
)
_benchmark(
    "routing",
    "ceb.bench.routing:main",
    "On REAL vLLM servers (--tiny: the tests' CPU build): makespan with the critical-path priority forwarded "
    "to the server or not, and prefix-cache hit rate and makespan of replica affinity against "
    "least-outstanding.",
)
_benchmark(
    "router",
    "ceb.bench.router:main",
    "On REAL vLLM replicas behind vLLM's router (--real: two of the tests' real-model CPU servers): makespan and "
    "prefix-cache hit rate of consistent_hash on the session header against round_robin, two ceb shards at once.",
)
_benchmark(
    "early-score",
    "ceb.bench.early_score:main",
    "Early critic scores on a REAL vLLM server: critic latency p50/p99 and chain-bound makespan, with and without.",
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
