"""Prefix-cache hit rate on a REAL vLLM server against the whole-block bound our prompts allow.

    # the local CPU build of vLLM with the tiny random-weight model of the tests (needs .venv-vllm):
    .venv/bin/python benchmarks/bench_prefix_cache.py --tiny --out benchmarks/results/
    # any vLLM server you run (start it with --enable-prompt-tokens-details; VLLM_SERVER_DEV_MODE=1 lets the
    # benchmark empty its cache before each run):
    .venv/bin/python benchmarks/bench_prefix_cache.py --root http://127.0.0.1:8000 --model M

Scores ``ceb`` and ``static`` on the first two InterCode-Bash streams (15 trajectories each), once with the
hindsight votes as ``V`` requests and once as one request with ``n = V``, and prints per run: vLLM's own hit rate
(``/metrics``), the bound, their ratio, the same per stage from vLLM's per-request cached-token counts, and the
prompt tokens computed per hindsight round. Writes ``prefix-cache-<UTC>.json`` with the settings and the machine.
See ``ceb/bench/prefix_cache.py`` for what the bound is.
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
from ceb.bench.pipeline import load_intercode_streams
from ceb.bench.prefix_cache import PrefixCacheSettings, run_prefix_cache_bench
from ceb.bench.results import save_results
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"
TARGET = "measured hit rate >= 0.9 of the whole-block bound"


@contextlib.contextmanager
def _tiny_server(work: Path, block_size: int | None, port: int | None) -> Iterator[tuple[str, str]]:
    """The tests' real vLLM server (CPU build, tiny random-weight model): ``(root, model)``."""
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_model import tiny_model_dir  # noqa: PLC0415 (test support, only for --tiny)
    from tests.support.vllm_server import serve_vllm  # noqa: PLC0415

    args = ["--enable-prompt-tokens-details", *(["--block-size", str(block_size)] if block_size else [])]
    with serve_vllm(tiny_model_dir(), work / "vllm.log", extra_args=args, dev_mode=True, port=port) as server:
        yield server.base_url.removesuffix("/v1"), server.model


def _print(run: dict[str, Any]) -> None:
    s = run["settings"]
    rate, bound, ratio = run["measured_rate"], run["bound_rate"], run["ratio_to_bound"]
    print(
        f"\nsampling={s['sampling']} V={s['votes']} methods={','.join(s['methods'])} streams={s['streams']} "
        f"block={run['block_size']} cache reset={run['cache_reset_before_run']} wall {run['wall_s']:.0f} s"
    )
    print(
        f"  {run['requests']} requests, {run['prompt_tokens']:,} prompt tokens; vLLM looked up "
        f"{run['queried_tokens']:,} tokens ({run['reading_requests']} requests read the cache)"
    )
    print(
        f"  vLLM /metrics: {run['metrics_hits']:,.0f} of {run['metrics_queries']:,.0f} tokens hit = {rate:.1%}; "
        f"bound {bound:.1%}; ratio {ratio:.3f}"
    )
    print("  stage        requests  looked up   bound     hit  per-token bound  (hits from)")
    every = run | {"hit_rate": rate, "hit_source": "/metrics"}
    for stage, f in [("all", every), *run["by_stage"].items()]:
        rates = (f["bound_rate"], f["hit_rate"], f["token_bound_rate"])
        b, h, t = (f"{x:.1%}" if x is not None else "-" for x in rates)
        source = f"({f['hit_source']})" if f["hit_source"] else ""
        print(f"  {stage:12} {f['requests']:>8} {f['queried_tokens']:>10,} {b:>7} {h:>7} {t:>16}  {source}")
    h = run["hindsight_rounds"]
    if h["rounds"]:
        computed = h["computed_prompt_tokens_per_round"]
        print(
            f"  hindsight: {h['rounds']} rounds of {h['requests_per_round']:.1f} requests, "
            f"{h['prompt_tokens_per_round']:,.0f}-token prompt; per round {h['queried_tokens_per_round']:,.0f} "
            f"tokens looked up, {computed:,.0f} computed"
            if computed is not None
            else "  hindsight: computed tokens unknown (no per-request cache counts)"
        )


async def _main(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    names = sorted(every)[: args.streams]
    streams = {name: every[name][: args.trajectories] for name in names}
    with contextlib.ExitStack() as stack:
        if args.tiny:
            root, model = stack.enter_context(_tiny_server(work, args.block_size, args.server_port or None))
        else:
            root, model = args.root, args.model
        runs = []
        for sampling in args.sampling:
            settings = PrefixCacheSettings(
                sampling=sampling, votes=args.votes, max_concurrency=args.concurrency, proxy_port=args.proxy_port
            )
            run = await run_prefix_cache_bench(streams, root, model, settings, work / f"run-{sampling}")
            _print(run)
            runs.append(run)
    return {"benchmark": "prefix-cache", "target": TARGET, "server": "tiny" if args.tiny else root, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM server (needs .venv-vllm)")
    where.add_argument("--root", help="a running vLLM server's root URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", help="served model name (with --root)")
    ap.add_argument("--block-size", type=int, help="--tiny: the server's KV block size (the CPU build's default: 128)")
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--streams", type=int, default=2, help="bash streams scored (first N by name)")
    ap.add_argument("--trajectories", type=int, default=15, help="trajectories kept per stream")
    ap.add_argument("--votes", type=int, default=5, help="V")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight at most")
    ap.add_argument("--sampling", nargs="+", default=["requests", "n"], choices=["requests", "n"])
    ap.add_argument("--server-port", type=int, default=0, help="--tiny: the vLLM server's port (0: a free one)")
    ap.add_argument("--proxy-port", type=int, default=0, help="the recording proxy's port (0: a free one)")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.root and not args.model:
        ap.error("--root needs --model")
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(_main, args, Path(tmp))
    doc["machine"] = machine_info()
    path = save_results(args.out, "prefix-cache", doc)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
