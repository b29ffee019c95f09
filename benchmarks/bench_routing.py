"""Server-side priority and replica affinity on REAL vLLM servers (see ``ceb/bench/routing.py``).

    # the local CPU build of vLLM with the tests' tiny random-weight model (needs .venv-vllm); it starts one
    # server for the priority measurement, then two replicas for the affinity one:
    .venv/bin/python benchmarks/bench_routing.py --tiny --out benchmarks/results/
    # servers you run: --priority-root (started with --scheduling-policy priority and a small --max-num-seqs)
    # and two or more --replica roots (started with VLLM_SERVER_DEV_MODE=1 so their caches can be emptied):
    .venv/bin/python benchmarks/bench_routing.py --priority-root http://127.0.0.1:8000 \\
        --replica http://127.0.0.1:8001 --replica http://127.0.0.1:8002 --model M

Prints the makespan with the priority forwarded and not, and the makespan and prefix-cache hit rates with
affinity routing and least-outstanding; writes ``routing-<UTC>.json`` with the settings and the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

from ceb.bench import machine_info
from ceb.bench.pipeline import load_intercode_streams
from ceb.bench.results import save_results
from ceb.bench.routing import (
    RoutingBenchSettings,
    affinity_workload,
    mixed_workload,
    run_affinity_bench,
    run_priority_bench,
)
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"


@contextlib.contextmanager
def _tiny_servers(work: Path, args: Sequence[str], count: int) -> Iterator[tuple[list[str], str]]:
    """``count`` of the tests' real vLLM servers (CPU build, tiny model, 1 GiB KV each): ``(roots, model)``."""
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_model import tiny_model_dir  # noqa: PLC0415 (test support, only for --tiny)
    from tests.support.vllm_server import serve_vllm  # noqa: PLC0415

    with contextlib.ExitStack() as stack:
        servers = [
            stack.enter_context(serve_vllm(tiny_model_dir(), work / f"vllm-{i}.log", extra_args=args, dev_mode=True))
            for i in range(count)
        ]
        yield [s.base_url.removesuffix("/v1") for s in servers], servers[0].model


def _print_priority(doc: dict[str, Any]) -> None:
    print(f"\npriority (server {doc['server_args']}): streams {doc['streams']}")
    for r in doc["runs"]:
        print(f"  {r['arm']:>3} #{r['repeat']}: makespan {r['makespan_s']:6.1f} s, {r['steps_scored']} steps")
    m = doc["mean_makespan_s"]
    print(f"  mean off {m['off']:.1f} s, on {m['on']:.1f} s; off/on = {doc['ratio_off_over_on']:.3f}")


def _print_affinity(doc: dict[str, Any]) -> None:
    print(f"\naffinity ({len(doc['runs'][0]['replicas'])} replicas): streams {doc['streams']}")
    for r in doc["runs"]:
        per = ", ".join(f"{x['hit_rate']:.1%}" if x["hit_rate"] is not None else "-" for x in r["replicas"])
        print(
            f"  {r['arm']:>17} #{r['repeat']}: makespan {r['makespan_s']:6.1f} s, hit rate {r['hit_rate']:.1%} "
            f"(per replica {per}; {r['queries']:,.0f} tokens looked up)"
        )
    for arm, a in doc["arms"].items():
        print(f"  {arm:>17}: mean makespan {a['mean_makespan_s']:.1f} s, hit rate {a['hit_rate']:.1%}")
    print(
        f"  least_outstanding/affinity makespan = {doc['makespan_ratio_lo_over_affinity']:.3f}; better: {doc['better']}"
    )


async def _main(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    settings = RoutingBenchSettings(
        repeats=args.repeats,
        long_steps=args.long_steps,
        short_lanes=args.short_lanes,
        priority_concurrency=args.priority_concurrency,
        affinity_concurrency=args.affinity_concurrency,
    )
    doc: dict[str, Any] = {"benchmark": "routing", "server": "tiny" if args.tiny else "given"}
    if "priority" in args.parts:
        server_args = ["--scheduling-policy", "priority", "--max-num-seqs", str(args.max_num_seqs)]
        streams = mixed_workload(every, settings.long_steps, settings.short_lanes)
        with contextlib.ExitStack() as stack:
            if args.tiny:
                roots, model = stack.enter_context(_tiny_servers(work, server_args, 1))
                root = roots[0]
            else:
                root, model = args.priority_root, args.model
            part = await run_priority_bench(streams, root, model, settings, work / "priority")
        doc["priority"] = part | {"server_args": server_args if args.tiny else "as given"}
        _print_priority(doc["priority"])
    if "affinity" in args.parts:
        streams = affinity_workload(every, args.streams, args.trajectories)
        with contextlib.ExitStack() as stack:
            if args.tiny:
                roots, model = stack.enter_context(_tiny_servers(work, ["--enable-prompt-tokens-details"], 2))
            else:
                roots, model = args.replica, args.model
            doc["affinity"] = await run_affinity_bench(streams, roots, model, settings, work / "affinity")
        _print_affinity(doc["affinity"])
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM servers (needs .venv-vllm)")
    ap.add_argument("--priority-root", help="a running server with --scheduling-policy priority (without --tiny)")
    ap.add_argument("--replica", action="append", default=[], help="a running replica's root URL (repeat it)")
    ap.add_argument("--model", help="served model name (without --tiny)")
    ap.add_argument("--parts", nargs="+", default=["priority", "affinity"], choices=["priority", "affinity"])
    ap.add_argument("--max-num-seqs", type=int, default=2, help="--tiny: the priority server's --max-num-seqs")
    ap.add_argument("--priority-concurrency", type=int, default=64, help="ceb's max_concurrency for priority")
    ap.add_argument("--affinity-concurrency", type=int, default=8, help="ceb's max_concurrency per replica")
    ap.add_argument("--long-steps", type=int, default=48, help="steps of the long stream (priority)")
    ap.add_argument("--short-lanes", type=int, default=8, help="one-trajectory streams beside it (priority)")
    ap.add_argument("--streams", type=int, default=4, help="bash streams scored (affinity)")
    ap.add_argument("--trajectories", type=int, default=4, help="trajectories kept per stream (affinity)")
    ap.add_argument("--repeats", type=int, default=2, help="runs per arm, arms alternated")
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if not args.tiny:
        if not args.model:
            ap.error("without --tiny, give --model")
        if "priority" in args.parts and not args.priority_root:
            ap.error("without --tiny, the priority part needs --priority-root")
        if "affinity" in args.parts and len(args.replica) < 2:
            ap.error("without --tiny, the affinity part needs two --replica roots or more")
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(_main, args, Path(tmp))
    doc["machine"] = machine_info() | {"shared": "the machine was shared with other jobs during the run"}
    path = save_results(args.out, "routing", doc)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
