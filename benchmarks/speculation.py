"""Speculation benchmark: one bank lane scored strictly and with ``speculation = D``, against the SIMULATED server.

One InterCode-Bash stream (its first ``--trajectories``), CEB alone, through the ``openai`` backend against the
simulator in a child process (a SIMULATOR, not a model: seeded replies, vLLM-like service times). The same work is
scored strictly (``speculation = 0``, the old way) and with each ``D`` of ``--depths``, in the same run, and each
run reports:

    makespan      wall seconds of the scoring call
    speedup       strict makespan / this makespan
    requests      every request sent (critic and hindsight), discarded speculation included
    extra         requests / strict requests - 1
    discarded     critic calls scored ahead and discarded (and their requests), kept: those taken from ahead
    identical     scores.jsonl and hindsight.jsonl equal the strict run's row for row, timing fields aside

The simulator answers a request the same way each time, so the rows must be identical; the target is met when a
depth is at least 1.4x faster than strict with at most 60% more requests (docs/performance.md chooses the default
``D`` from these figures). Run ``python benchmarks/speculation.py --help``.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_config, load_intercode_streams
from ceb.bench.processes import sim_process
from ceb.bench.result_files import save_results
from ceb.bench.scale import timed_scoring
from ceb.logs import configure_logging
from ceb.pipeline import read_rows
from ceb.pipeline.rundir import RunDir
from ceb.sim import SimConfig

__all__ = ["TARGET", "main"]

TARGET = "at the default D: >= 1.4x faster than strict, <= 60% more requests, rows identical"
SIM = SimConfig(max_num_seqs=48, prefill_tok_s=20_000.0, decode_s_per_token=0.02, time_scale=0.25)
_TIMING = ("latency_s", "queue_s")


def _rows(run_dir: Path) -> list[bytes]:
    """Both result files' rows in file order, timing fields left out."""
    run = RunDir(run_dir)
    out = []
    for path in (run.scores, run.hindsight):
        for row in read_rows(path):
            out.append(orjson.dumps({k: v for k, v in row.items() if k not in _TIMING}, option=orjson.OPT_SORT_KEYS))
    return out


def _critic_requests(run_dir: Path) -> int:
    return sum(row["requests"] for row in read_rows(RunDir(run_dir).scores))


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (``--help`` lists the options)."""
    ap = bench_parser("speculation", __doc__, sim_port=True, prog="python benchmarks/speculation.py")
    ap.add_argument("--stream", default="intercode-bash-gpt-4", help="the InterCode stream scored")
    ap.add_argument("--trajectories", type=int, default=30, help="trajectories kept from the start of the stream")
    ap.add_argument("--depths", default="1,2,4", help="speculation depths D compared with strict (comma-separated)")
    ap.add_argument("--time-scale", type=float, default=SIM.time_scale, help="the simulator's time scale")
    ap.add_argument("--votes", type=int, default=5, help="hindsight votes V")
    args = ap.parse_args(argv)
    configure_logging("error")
    depths = [int(d) for d in args.depths.split(",")]
    sim = SIM.model_copy(update={"time_scale": args.time_scale})
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        stream = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))[args.stream]
        streams = {args.stream: stream[: args.trajectories]}
        with sim_process(sim, port=args.port or None) as url:
            for depth in [0, *depths]:
                config = bench_config(
                    url,
                    sim.model,
                    ["ceb"],
                    concurrency=sim.max_num_seqs,
                    max_active_lanes=1,
                    votes=args.votes,
                    speculation=depth,
                )
                makespan, _, s = anyio.run(timed_scoring, streams, config, work / f"d{depth}")
                runs.append(
                    {
                        "speculation": depth,
                        "makespan_s": makespan,
                        "requests": s.requests,
                        "critic_requests": _critic_requests(work / f"d{depth}") + s.discarded_requests,
                        "steps": s.steps_scored + s.steps_failed,
                        "steps_kept_ahead": s.steps_kept_ahead,
                        "steps_discarded": s.steps_discarded,
                        "discarded_requests": s.discarded_requests,
                        "discarded_prompt_tokens": s.discarded_prompt_tokens,
                        "discarded_completion_tokens": s.discarded_completion_tokens,
                        "rows_identical": _rows(work / f"d{depth}") == _rows(work / "d0"),
                    }
                )
    strict = runs[0]
    for run in runs:
        run["speedup"] = strict["makespan_s"] / run["makespan_s"]
        run["extra_requests"] = run["requests"] / strict["requests"] - 1
        run["extra_critic_requests"] = run["critic_requests"] / strict["critic_requests"] - 1
        print(
            f"D={run['speculation']}: makespan {run['makespan_s']:.1f} s ({run['speedup']:.2f}x strict), "
            f"{run['requests']} requests ({run['extra_requests']:+.0%}; critic {run['extra_critic_requests']:+.0%}), "
            f"{run['steps_kept_ahead']} of {run['steps']} steps kept from ahead, {run['steps_discarded']} calls "
            f"discarded ({run['discarded_requests']} requests, {run['discarded_prompt_tokens']} prompt tokens), "
            f"rows identical: {run['rows_identical']}"
        )
    doc = {
        "target": TARGET,
        "settings": {
            "stream": args.stream,
            "trajectories": args.trajectories,
            "steps": strict["steps"],
            "votes": args.votes,
            "sim": sim.model_dump(),
        },
        "runs": runs,
        "machine": machine_info(),
    }
    print(f"saved {save_results(args.out, 'speculation', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
