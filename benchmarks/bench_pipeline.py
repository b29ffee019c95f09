"""Pipeline and client-overhead benchmarks on the real InterCode streams against the SIMULATED server.

    .venv/bin/python benchmarks/bench_pipeline.py pipeline --trajectories 30 --out benchmarks/results/
    .venv/bin/python benchmarks/bench_pipeline.py client --requests 3000 --out benchmarks/results/
    .venv/bin/python benchmarks/bench_pipeline.py faults --streams 6 --trajectories 10 --out benchmarks/results/
    .venv/bin/python benchmarks/bench_pipeline.py reuse --trajectories 4 --out benchmarks/results/

(also ``python run.py bench pipeline|client``). Each prints its figures and writes ``pipeline-<UTC>.json`` /
``client-<UTC>.json`` with the settings and the machine. The simulator is not a model: it stands for a vLLM
server's queueing and service times (see ``ceb/bench/pipeline.py`` and ``ceb/sim/server.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from ceb.bench import machine_info
from ceb.bench.faults import run_fault_bench
from ceb.bench.pipeline import PipelineSettings, load_intercode_streams, run_client_bench, run_pipeline_bench
from ceb.bench.results import save_results
from ceb.bench.reuse import run_reuse_bench
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"
PIPELINE_TARGET = "schedule efficiency >= 0.9 with >= 16 streams of real InterCode data mixed with static baselines"
CLIENT_TARGET = ">= 1,000 requests/s in one process and <= 1 ms client CPU per scored step"
PAPER_GRID = REPO / "configs" / "grid-intercode-bash.toml"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["pipeline", "client", "faults", "reuse"])
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--trajectories", type=int, default=30, help="pipeline: trajectories kept per stream")
    ap.add_argument("--max-num-seqs", type=int, default=48, help="pipeline: the simulator's capacity")
    ap.add_argument("--time-scale", type=float, default=0.25, help="pipeline: the simulator's time scale")
    ap.add_argument("--orders", type=int, default=2, help="pipeline: orders per stream (each a stream of its own)")
    ap.add_argument("--requests", type=int, default=3000, help="client: requests sent at once")
    ap.add_argument("--streams", type=int, default=6, help="faults: streams used (first N)")
    ap.add_argument("--port", type=int, default=0, help="the simulator's port on 127.0.0.1 (0: a free one)")
    ap.add_argument("--grid", type=Path, default=PAPER_GRID, help="reuse: the grid file run")
    ap.add_argument(
        "--skip",
        default="ceb-dense-retrieval",
        help="reuse: methods of the grid left out, comma-separated (dense retrieval needs its embedding model)",
    )
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        if args.kind == "reuse":
            skip = [m.strip() for m in args.skip.split(",") if m.strip()]
            result = run_reuse_bench(
                args.intercode, work, grid=args.grid, trajectories=args.trajectories, skip=skip, port=args.port or None
            )
            doc = {"benchmark": "reuse", "shared_machine": True, **result, "machine": machine_info()}
            for name in ("every_order_asked", "bank_free_reused"):
                r = result[name]
                print(
                    f"{name}: {r['requests']} requests ({r['attempts']} attempts), {r['steps_scored']} steps asked, "
                    f"{r['steps_reused']} copied, {r['steps_unavailable']} not available, {r['wall_s']:.1f} s"
                )
            bf = result["bank_free_requests"]
            print(
                f"{len(result['methods'])} methods x {result['orders']} orders on {result['workload']}; bank-free "
                f"methods {bf['every_order_asked']} -> {bf['bank_free_reused']} requests; all methods "
                f"ratio {result['ratio_requests_off_over_on']:.3f}x; identical scores {result['identical_scores']}, "
                f"identical metrics {result['identical_metrics']}"
            )
            print(f"saved {save_results(args.out, args.kind, doc)}")
            return 0
        streams = load_intercode_streams(args.intercode, work / "streams")
        if args.kind == "pipeline":
            base = PipelineSettings(trajectories=args.trajectories, orders=args.orders, port=args.port or None)
            settings = replace(base, sim=replace(base.sim, max_num_seqs=args.max_num_seqs, time_scale=args.time_scale))
            result = run_pipeline_bench(streams, settings, work)
            doc = {"benchmark": "pipeline", "target": PIPELINE_TARGET, **result, "machine": machine_info()}
            c, lb, naive = result["concurrent"], result["lower_bound"], result["naive"]
            print(f"workload: {result['workload']}")
            print(
                f"concurrent: makespan {c['makespan_s']:.1f} s, {c['steps_per_s']:.1f} steps/s, "
                f"{c['request_throughput']:.1f} req/s, median e2el {c['median_e2el_ms']:.1f} ms, "
                f"p99 e2el {c['p99_e2el_ms']:.1f} ms, mean client queue {c['mean_client_queue_ms']:.1f} ms, "
                f"failed {c['failed']}"
            )
            print(
                f"lower bound {lb['lower_bound_s']:.1f} s = max(service {lb['total_service_s']:.1f} s / "
                f"capacity {settings.sim.max_num_seqs} = {lb['throughput_bound_s']:.1f} s, critical path "
                f"{lb['critical_path_s']:.1f} s); efficiency {result['efficiency']:.3f}"
            )
            print(
                f"naive: {naive['measured_requests']} requests in {naive['measured_wall_s']:.1f} s measured, "
                f"{naive['estimated_makespan_s']:.0f} s estimated for the whole workload; "
                f"ratio {result['ratio_naive_over_concurrent']:.1f}x"
            )
        elif args.kind == "faults":
            cut = {n: t[: args.trajectories] for n, t in list(streams.items())[: args.streams]}
            result = run_fault_bench(cut, work, port=args.port or None)
            doc = {"benchmark": "faults", **result, "machine": machine_info()}
            for name in ("fault_free", "faulty"):
                r = result[name]
                print(
                    f"{name}: {r['wall_s']:.1f} s, {r['attempts']} attempts, {r['failed_attempts']} failed "
                    f"{r['failed_attempts_by_error']}, server faults {r['server_faults']}, "
                    f"{r['steps']} steps, {r['steps_unscored']} unscored"
                )
            print(
                f"extra wall time {result['extra_wall_s']:.1f} s; identical scores {result['identical_scores']}; "
                f"identical metrics {result['identical_metrics']}"
            )
        else:
            result = run_client_bench(streams, work, requests=args.requests, port=args.port or None)
            doc = {"benchmark": "client", "target": CLIENT_TARGET, **result, "machine": machine_info()}
            ours, sdk, step = result["ceb_client"], result["sdk_client"], result["per_step"]
            print(
                f"ceb client: {ours['requests_per_s']:.0f} req/s, {ours['cpu_ms_per_request']:.3f} CPU ms/request; "
                f"openai SDK: {sdk['requests_per_s']:.0f} req/s, {sdk['cpu_ms_per_request']:.3f} CPU ms/request; "
                f"ratio {result['ratio_requests_per_s']:.1f}x"
            )
            print(
                f"static run: {step['steps']} steps, {step['steps_per_s']:.0f} steps/s, "
                f"{step['cpu_ms_per_step']:.3f} client CPU ms/step"
            )
    print(f"saved {save_results(args.out, args.kind, doc)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
