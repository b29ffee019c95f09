"""Scale plan: how many SIMULATED replicas one `ceb` process keeps saturated, and where its CPU runs out.

    .venv/bin/python benchmarks/bench_scale.py --replicas 1 2 4 8 16 32 --out benchmarks/results/

(also ``ceb bench scale``). One `ceb` process runs the real InterCode pipeline (CEB and static, many orders)
against R simulated replicas in a separate process, each with 15 slots and about 0.5 s per critic call (about
30 calls/s); per R it prints the calls/s achieved against the replicas' capacity, `ceb`'s CPU use and CPU ms per
call, and the event-loop lag, and writes ``scale-<UTC>.json`` with the settings and the machine. The simulator
is not a model: it stands for a vLLM replica's queueing and service times (see ``ceb/bench/scale.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from ceb.bench import machine_info
from ceb.bench.pipeline import load_intercode_streams
from ceb.bench.results import save_results
from ceb.bench.scale import ScaleSettings, run_scale_bench
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _print_point(p: dict[str, Any]) -> None:
    sim = p["sim_cpu_utilisation"]
    print(
        f"R={p['replicas']:>3} lanes={p['lanes']:>4} gc={p['gc']:<7}: {p['achieved_calls_per_s']:7.1f} calls/s of "
        f"{p['capacity_calls_per_s']:7.1f} capacity (saturation {p['saturation']:.3f}); ceb CPU "
        f"{p['ceb_cpu_utilisation']:.2f} cores (its core busy {_share(p['ceb_core_busy'])}), "
        f"{p['ceb_cpu_ms_per_call']:.2f} ms/call; sim CPU "
        f"{_share(sim)} cores; loop lag mean {p['loop_lag_ms']['mean']:.1f} ms, "
        f"p99 {p['loop_lag_ms']['p99']:.1f} ms; GC {p['gc_pauses']['total_s']:.2f} s, {p['gc_pauses']['full']} full, "
        f"max {p['gc_pauses']['max_ms']:.0f} ms; failed {p['failed_attempts']}"
        + (" (the run ENDED inside the window: raise --max-trajectories)" if p["ended_inside_window"] else ""),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    d = ScaleSettings()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--replicas", type=int, nargs="+", default=list(d.replicas), help="replica counts R")
    ap.add_argument("--max-num-seqs", type=int, default=d.sim.max_num_seqs, help="slots per replica")
    ap.add_argument("--time-scale", type=float, default=d.sim.time_scale, help="multiplies every service time")
    ap.add_argument("--per-replica-calls-s", type=float, default=30.0, help="rate the extrapolation divides by")
    ap.add_argument("--warmup-s", type=float, default=d.warmup_s, help="seconds before the window")
    ap.add_argument("--window-s", type=float, default=d.window_s, help="seconds measured per R")
    ap.add_argument("--max-trajectories", type=int, default=d.max_trajectories, help="per stream and order")
    ap.add_argument("--sim-processes", type=int, default=d.sim_processes, help="child processes for the replicas")
    ap.add_argument("--compare-gc", action="store_true", help="also run each R with CPython's default GC, back to back")
    ap.add_argument("--no-pin", action="store_true", help="do not pin ceb and the simulators to separate cores")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    configure_logging("error")
    settings = replace(
        d,
        replicas=tuple(args.replicas),
        sim=replace(d.sim, max_num_seqs=args.max_num_seqs, time_scale=args.time_scale),
        warmup_s=args.warmup_s,
        window_s=args.window_s,
        max_trajectories=args.max_trajectories,
        sim_processes=args.sim_processes,
        pin=not args.no_pin,
        gc_modes=("default", "quiet") if args.compare_gc else ("quiet",),
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        streams = load_intercode_streams(args.intercode, work / "streams")
        result = run_scale_bench(
            streams, settings, work, per_replica_calls_s=args.per_replica_calls_s, on_point=_print_point
        )
    knee, ext = result["knee"], result["extrapolation"]
    print(
        f"knee: saturated up to R={knee['largest_saturated_replicas']}, first below "
        f"{knee['saturation_threshold']} at R={knee['first_unsaturated_replicas']}; max "
        f"{knee['max_achieved_calls_per_s']:.0f} calls/s"
    )
    print(
        f"extrapolated to a core of ceb's own: {ext['ceb_cpu_ms_per_call']:.2f} CPU ms/call -> "
        f"{ext['calls_per_s_one_core']:.0f} calls/s -> {ext['replicas_one_core']:.1f} replicas at "
        f"{args.per_replica_calls_s:g} calls/s; at the busiest point "
        f"{ext['calls_per_s_per_core_at_max']:.0f} calls/s per core of ceb CPU"
    )
    doc = {"benchmark": "scale", "simulator": "ceb-simulator (not a model)", **result, "machine": machine_info()}
    path = save_results(args.out, "scale", doc)
    for c in result["gc_comparison"]:
        print(
            f"R={c['replicas']}: quiet GC / default GC: calls/s x{c['calls_per_s_quiet_over_default']:.3f}, "
            f"CPU ms/call x{c['cpu_ms_per_call_quiet_over_default']:.3f}"
        )
    print(f"saved {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
