"""Run an installed ``ceb bench`` tool against the tests' CPU vLLM servers, started here (the checkout's ``--tiny``).

The installed tools take the user's endpoint (``--base-url``/``--root``/``--replica`` and ``--model``); starting
vLLM's CPU build with the tests' tiny random-weight model (``tests/support``: replies are noise, request timing and
caching are real) is the checkout's business, so it lives here. This starts ``--servers`` of them (in dev mode, so
their prefix caches can be emptied), optionally one ``vllm-router`` per policy in front of them (``--routers``),
and the two replicas of the tests' real model instead with ``--real``; then runs ``ceb bench NAME ARGS`` in this
process (so the servers count among its child processes' CPU) with these placeholders filled in ARGS:

``{url0}``, ``{url1}``, ...: the servers' API roots (``.../v1``); ``{root0}``, ``{root1}``, ...: their roots;
``{model}``: the served model name; ``{model_path}``: its directory; ``{tiny_engine}``: the tests' engine flags as
``backend.engine`` JSON (for ``engine``); ``{router_round_robin}``, ``{router_consistent_hash}``: the routers' API
roots.

    python benchmarks/tiny_vllm.py --server-arg=--enable-prompt-tokens-details -- \\
        prefix-cache --root {root0} --model {model}
    .venv-vllm/bin/python benchmarks/tiny_vllm.py -- engine --base-url {url0} --model {model} \\
        --model-path {model_path} --engine {tiny_engine}

Needs ``.venv-vllm`` (``.ci/install-vllm``). The figures in docs/vllm.md and docs/serving.md that say ``--tiny``
were measured with the same servers, started by the tools themselves before this wrapper existed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb and tests.support

from ceb.cli import app
from tests.support import real_model, tiny_model, vllm_router, vllm_server

TINY_ENGINE: dict[str, Any] = {
    "load_format": "dummy",
    "dtype": vllm_server.DTYPE,
    "max_model_len": 8192,
    "max_logprobs": 20,
    "enable_prefix_caching": True,
    "seed": 0,
    "args": {"structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}},
}
"""The engine flags of the tests' vLLM server (``tests/support/vllm_server.py``), as ``backend.engine``."""

POLICIES = ("round_robin", "consistent_hash")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python benchmarks/tiny_vllm.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--servers", type=int, default=1, help="vLLM servers started, one after the other")
    ap.add_argument("--server-arg", action="append", default=[], help="one more `vllm serve` flag for each server")
    ap.add_argument("--real", action="store_true", help="the tests' real model (SmolLM2-135M) instead of the tiny one")
    ap.add_argument("--kv-cache-gib", type=int, default=1, help="each server's KV cache (GiB)")
    ap.add_argument("--routers", action="store_true", help="also one vllm-router per policy in front of the servers")
    ap.add_argument("--logs", type=Path, default=Path("benchmarks/results/vllm-logs"), help="the servers' logs")
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- NAME ARGS: the `ceb bench` tool and its arguments")
    args = ap.parse_args(argv)
    bench = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not bench:
        ap.error("give the tool to run after --, e.g. -- prefix-cache --root {root0} --model {model}")
    for key, value in vllm_server.cpu_env(args.kv_cache_gib).items():  # read by vLLM when imported in-process
        os.environ.setdefault(key, value)
    args.logs.mkdir(parents=True, exist_ok=True)
    model_dir = real_model.real_model_dir() if args.real else tiny_model.tiny_model_dir()
    with contextlib.ExitStack() as stack:
        place: dict[str, str] = {"model_path": str(model_dir), "tiny_engine": orjson.dumps(TINY_ENGINE).decode()}
        roots = []
        for i in range(args.servers):
            real = {"load_format": "auto", "model_name": vllm_server.REAL_MODEL_NAME, "ready_timeout_s": 900}
            server = stack.enter_context(
                vllm_server.serve_vllm(
                    model_dir,
                    args.logs / f"vllm-{i}.log",
                    extra_args=[*args.server_arg, *(["--enforce-eager"] if args.real else [])],
                    dev_mode=True,
                    kv_cache_gib=args.kv_cache_gib,
                    # One core each: vLLM's CPU build otherwise binds every engine to the same first core.
                    env={"VLLM_CPU_OMP_THREADS_BIND": str(i % (os.cpu_count() or 1))},
                    **(real if args.real else {}),
                )
            )
            print(f"vLLM server {server.base_url} ready after {server.start_s:.0f} s", flush=True)
            roots.append(server.base_url.removesuffix("/v1"))
            place |= {f"url{i}": server.base_url, f"root{i}": roots[-1], "model": server.model}
        for policy in POLICIES if args.routers else ():
            log = args.logs / f"router-{policy}.log"
            router = stack.enter_context(vllm_router.serve_router(roots, log, policy=policy))
            place[f"router_{policy}"] = router.base_url
        try:
            app(["bench", bench[0], *(a.format(**place) for a in bench[1:])], prog_name="ceb")
        except SystemExit as exc:  # click ends every run with one
            return int(exc.code or 0)
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
