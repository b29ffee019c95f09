"""Early critic scores on a real server: critic latency and the makespan of a chain-bound run, with and without.

A chain-bound workload is a few long streams scored by the bank-free ``static`` critic: every lane is one chain
of critic calls (step ``t``'s prompt holds the score of step ``t-1``), few enough that the server is never full,
so the makespan is the longest chain's sum of critic latencies. Early scores shorten each link of the chain by
the time the server would spend writing the ``reason`` after the ``score``.

Arms, run back to back on the same streams against the same server (``critic.early_score`` /
``critic.reason_tokens_after_score``):

- ``whole``: the reply is read whole (unstreamed), as without this feature;
- ``cut``: streamed; the stream is closed as soon as the score is complete (vLLM aborts the request);
- ``background``: streamed; the score is returned at once and the reply finishes in the lane's task group.

Per arm: the makespan (wall seconds of the run), the critic latency per step (seconds from sending to the
score, slot wait included; p50/p99), requests, and whether every step's score equals the ``whole`` arm's.

Measured: ``benchmarks/results/early-score-20261123T152635Z.json`` at commit ``6c434d3`` (docs/vllm.md), on the
tests' CPU vLLM server: ``python benchmarks/early_score.py --tiny`` starts it from ``tests/support``. A study of
one feature (``critic.early_score``) answered once, so it lives in the checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb and tests.support

from benchmarks._cli import bench_parser
from ceb.backends.base import EndpointLimits
from ceb.bench.options import load_intercode_streams, run_and_save
from ceb.bench.stats import summarize
from ceb.config import RunConfig, load_config
from ceb.data.trajectory import Trajectory
from ceb.pipeline import run_scoring
from ceb.pipeline.results import read_rows
from ceb.pipeline.rundir import RunDir
from ceb.stages.assembly import build_stages
from tests.support import tiny_model, vllm_server

__all__ = ["ARMS", "EarlyScoreSettings", "main", "run_early_score_bench"]

ARMS: dict[str, dict[str, Any]] = {
    "whole": {"early_score": False},
    "cut": {"early_score": True, "reason_tokens_after_score": 0},
    "background": {"early_score": True, "reason_tokens_after_score": None},
}
"""The ``critic`` settings of each arm."""


@dataclass(frozen=True, slots=True)
class EarlyScoreSettings:
    """What the benchmark runs.

    Attributes:
        arms: Arms to run, in order (names of :data:`ARMS`).
        rounds: Times the arms are run, interleaved (``whole, cut, ..., whole, cut, ...``).
        max_concurrency: Requests in flight at most.
        max_tokens: The critic's output budget (the run's default is 160).
    """

    arms: tuple[str, ...] = ("whole", "cut", "background")
    rounds: int = 1
    max_concurrency: int = 32
    max_tokens: int = 160


def _config(base_url: str, model: str, s: EarlyScoreSettings, arm: str) -> RunConfig:
    return load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": base_url,
                "model": model,
                "max_concurrency": s.max_concurrency,
                "structured_output": "vllm",
                "timeout_s": 600,
            },
            "methods": ["static"],
            "orders": 1,
            "critic": {"max_tokens": s.max_tokens, **ARMS[arm]},
        }
    )


async def _arm(streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, run_dir: Path) -> dict[str, Any]:
    stages = build_stages(config, EndpointLimits())
    started = time.perf_counter()
    async with stages:
        await run_scoring(streams, config, run_dir, stages=stages, overwrite=True)
    makespan = time.perf_counter() - started
    rows = list(read_rows(RunDir(run_dir).scores))
    critic = summarize((r["latency_s"] + r["queue_s"] for r in rows if r["score"] is not None), scale=1e3)
    return {
        "makespan_s": makespan,
        "steps": len(rows),
        "failed": sum(r["score"] is None for r in rows),
        "requests": sum(r["requests"] for r in rows),
        "critic_p50_ms": critic.p50,
        "critic_p99_ms": critic.p99,
        "critic_mean_ms": critic.mean,
        "raw_chars_mean": summarize(len(r["raw"]) for r in rows).mean,
        "scores": {f"{r['stream']}/{r['trajectory']}/{r['step']}": r["score"] for r in rows},
    }


async def run_early_score_bench(
    streams: Mapping[str, Sequence[Trajectory]], base_url: str, model: str, settings: EarlyScoreSettings, work: Path
) -> dict[str, Any]:
    """Run every arm ``settings.rounds`` times, interleaved, and compare each with ``whole``.

    Args:
        streams: Stream name -> trajectories (a few long streams).
        base_url: The server's API root (``http://host:port/v1``).
        model: The served model name.
        settings: Arms, rounds, concurrency and the critic's output budget.
        work: Scratch directory for the runs.

    Returns:
        ``{"settings", "runs": [{"arm", "round", figures...}], "arms": {arm: medians over rounds and the ratios
        to whole}}``; each run's ``scores_equal_whole`` says whether every step's score equals that round's
        ``whole`` run (when ``whole`` ran).
    """
    runs: list[dict[str, Any]] = []
    for rnd in range(settings.rounds):
        base: dict[str, float | None] | None = None
        for arm in settings.arms:
            fig = await _arm(streams, _config(base_url, model, settings, arm), work / f"{arm}-{rnd}")
            scores = fig.pop("scores")
            if arm == "whole":
                base = scores
            elif base is not None:
                fig["scores_equal_whole"] = scores == base
                fig["score_mismatches"] = sum(scores.get(k) != v for k, v in base.items())
            runs.append({"arm": arm, "round": rnd, **fig})
    arms: dict[str, Any] = {}
    for arm in settings.arms:
        mine = [r for r in runs if r["arm"] == arm]
        arms[arm] = {
            key: summarize(r[key] for r in mine).p50  # median over rounds
            for key in ("makespan_s", "critic_p50_ms", "critic_p99_ms", "critic_mean_ms", "raw_chars_mean")
        }
    if "whole" in arms:
        for fig in arms.values():
            fig["makespan_ratio_to_whole"] = fig["makespan_s"] / arms["whole"]["makespan_s"]
            fig["critic_p50_ratio_to_whole"] = fig["critic_p50_ms"] / arms["whole"]["critic_p50_ms"]
            fig["critic_p99_ratio_to_whole"] = fig["critic_p99_ms"] / arms["whole"]["critic_p99_ms"]
    return {"settings": asdict(settings), "runs": runs, "arms": arms}


# --- command line: python benchmarks/early_score.py -------------------------------------------------------------------

_HELP = """Early critic scores on a REAL vLLM server: critic latency and chain-bound makespan.

    # the local CPU build of vLLM with the tiny random-weight model of the tests (needs .venv-vllm):
    python benchmarks/early_score.py --tiny
    # any vLLM server you run:
    python benchmarks/early_score.py --base-url http://127.0.0.1:8000/v1 --model M

Scores the first ``--streams`` InterCode-Bash streams (``--trajectories`` each) with the bank-free ``static``
critic, once per arm (whole reply, cut at the score, finished in the background), interleaved over ``--rounds``,
and prints the makespan, critic latency p50/p99 and whether every score equals the whole-reply run's. Writes
``early-score-<UTC>.json`` with the settings and the machine. See ``benchmarks/early_score.py``.
"""


async def _bench(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    names = sorted(every)[: args.streams]
    streams = {name: every[name][: args.trajectories] for name in names}
    settings = EarlyScoreSettings(
        arms=tuple(args.arms), rounds=args.rounds, max_concurrency=args.concurrency, max_tokens=args.max_tokens
    )
    with contextlib.ExitStack() as stack:
        if args.tiny:
            server = stack.enter_context(vllm_server.serve_vllm(tiny_model.tiny_model_dir(), work / "vllm.log"))
            base_url, model = server.base_url, server.model
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


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: :func:`run_early_score_bench` and save the figures (``--help`` lists options)."""
    ap = bench_parser("early-score", _HELP, prog="python benchmarks/early_score.py")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM server (needs .venv-vllm)")
    where.add_argument("--base-url", help="a running server's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="served model name (with --base-url)")
    ap.add_argument("--streams", type=int, default=2, help="bash streams scored (first N by name)")
    ap.add_argument("--trajectories", type=int, default=4, help="trajectories kept per stream")
    ap.add_argument("--rounds", type=int, default=1, help="times the arms are run, interleaved")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight at most")
    ap.add_argument("--max-tokens", type=int, default=160, help="the critic's output budget")
    args = ap.parse_args(argv)
    if args.base_url and not args.model:
        ap.error("--base-url needs --model")
    return run_and_save("early-score", _bench, args)


if __name__ == "__main__":
    raise SystemExit(main())
