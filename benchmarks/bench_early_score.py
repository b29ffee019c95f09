"""Early critic scores (issue 13 item 3) on a REAL vLLM server: critic latency and chain-bound makespan.

    # the local CPU build of vLLM with the tiny random-weight model of the tests (needs .venv-vllm):
    .venv/bin/python benchmarks/bench_early_score.py --tiny --out benchmarks/results/
    # any vLLM server you run:
    .venv/bin/python benchmarks/bench_early_score.py --base-url http://127.0.0.1:8000/v1 --model M

Scores the first ``--streams`` InterCode-Bash streams (``--trajectories`` each) with the bank-free ``static``
critic, once per arm (whole reply, cut at the score, finished in the background), interleaved over ``--rounds``,
and prints the makespan, critic latency p50/p99 and whether every score equals the whole-reply run's. Writes
``early-score-<UTC>.json`` with the settings and the machine. See ``ceb/bench/early_score.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio

from ceb.bench import machine_info
from ceb.bench.early_score import ARMS, EarlyScoreSettings, run_early_score_bench
from ceb.bench.pipeline import load_intercode_streams
from ceb.bench.results import save_results
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"


@contextlib.contextmanager
def _tiny_server(work: Path) -> Iterator[tuple[str, str]]:
    """The tests' real vLLM server (CPU build, tiny random-weight model): ``(base_url, model)``."""
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_model import tiny_model_dir  # noqa: PLC0415 (test support, only for --tiny)
    from tests.support.vllm_server import serve_vllm  # noqa: PLC0415

    with serve_vllm(tiny_model_dir(), work / "vllm.log") as server:
        yield server.base_url, server.model


async def _main(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    names = sorted(every)[: args.streams]
    streams = {name: every[name][: args.trajectories] for name in names}
    settings = EarlyScoreSettings(
        arms=tuple(args.arms), rounds=args.rounds, max_concurrency=args.concurrency, max_tokens=args.max_tokens
    )
    with contextlib.ExitStack() as stack:
        if args.tiny:
            base_url, model = stack.enter_context(_tiny_server(work))
        else:
            base_url, model = args.base_url, args.model
        doc = await run_early_score_bench(streams, base_url, model, settings, work / "runs")
    steps = sum(len(t.steps) for ts in streams.values() for t in ts)
    print(f"\n{len(streams)} streams, {steps} steps, static critic, {settings.rounds} round(s); shared machine")
    print(f"{'arm':11} {'round':>5} {'makespan s':>10} {'p50 ms':>8} {'p99 ms':>8} {'requests':>8} {'same scores':>11}")
    for r in doc["runs"]:
        same = r.get("scores_equal_whole", "-")
        print(
            f"{r['arm']:11} {r['round']:>5} {r['makespan_s']:>10.1f} {r['critic_p50_ms']:>8.0f} "
            f"{r['critic_p99_ms']:>8.0f} {r['requests']:>8} {same!s:>11}"
        )
    for arm, fig in doc["arms"].items():
        if "makespan_ratio_to_whole" in fig:
            print(
                f"{arm}: makespan x{fig['makespan_ratio_to_whole']:.3f}, "
                f"critic p50 x{fig['critic_p50_ratio_to_whole']:.3f}, "
                f"p99 x{fig['critic_p99_ratio_to_whole']:.3f} of whole"
            )
    return {
        "benchmark": "early-score",
        "server": "tiny" if args.tiny else base_url,
        "streams": {name: len(ts) for name, ts in streams.items()},
        "steps": steps,
        "shared_machine": True,
        **doc,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM server (needs .venv-vllm)")
    where.add_argument("--base-url", help="a running vLLM server's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="served model name (with --base-url)")
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--streams", type=int, default=2, help="bash streams scored (first N by name)")
    ap.add_argument("--trajectories", type=int, default=4, help="trajectories kept per stream")
    ap.add_argument("--rounds", type=int, default=1, help="times the arms are run, interleaved")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight at most")
    ap.add_argument("--max-tokens", type=int, default=160, help="the critic's output budget")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.base_url and not args.model:
        ap.error("--base-url needs --model")
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(_main, args, Path(tmp))
    doc["machine"] = machine_info()
    path = save_results(args.out, "early-score", doc)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
