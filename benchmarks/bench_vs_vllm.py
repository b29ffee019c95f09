"""``ceb``'s client against ``vllm bench serve`` (issue 13 item 6): same prompts, server, concurrency and tokens.

    # the local CPU build of vLLM with the tiny random-weight model of the tests (needs .venv-vllm):
    .venv/bin/python benchmarks/bench_vs_vllm.py --tiny --out benchmarks/results/

Dumps the critic prompts of a ``static`` run over the first ``--streams`` InterCode-Bash streams as vLLM's custom
dataset, then runs ``vllm bench serve`` and ``ceb``'s streamed client (:class:`~ceb.backends.openai.OpenAIBackend`)
on them, alternately over ``--rounds``, at the same ``--concurrency`` with ``ignore_eos`` and ``--output-len``
tokens per request. Prints vLLM's metrics for both and the ratio of request throughput (goal >= 0.95). Writes
``vs-vllm-<UTC>.json``. See ``ceb/bench/serve_compare.py`` for what each side sends.
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
import numpy as np

from ceb.bench import machine_info
from ceb.bench.pipeline import load_intercode_streams
from ceb.bench.results import save_results
from ceb.bench.serve_compare import dump_critic_prompts, metrics, run_ceb_client, run_vllm_bench
from ceb.logs import configure_logging

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INTERCODE = Path(os.environ.get("CEB_SHARED", REPO.parent / "shared")) / "data" / "intercode"
VLLM_PYTHON = Path(os.environ.get("CEB_VLLM_VENV", REPO / ".venv-vllm")) / "bin" / "python"
BENCH_DEPS = REPO / ".cache" / "vllm-bench-deps"
"""pandas for vLLM's custom dataset, if the server's venv lacks it:
``.venv-vllm/bin/python -m pip install --target .cache/vllm-bench-deps --no-deps pandas==2.3.3 pytz==2025.2
tzdata==2025.2``."""
KEYS = ["request_throughput", "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el") for s in ("mean", "median", "p99")
]
TARGET = "ceb request_throughput >= 0.95 x vllm bench serve's"


@contextlib.contextmanager
def _tiny_server(work: Path) -> Iterator[tuple[str, str, str]]:
    """The tests' real vLLM server (CPU build, tiny random-weight model): ``(base_url, model, tokenizer dir)``."""
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_model import tiny_model_dir  # noqa: PLC0415 (test support, only for --tiny)
    from tests.support.vllm_server import serve_vllm  # noqa: PLC0415

    model_dir = tiny_model_dir()
    with serve_vllm(model_dir, work / "vllm.log") as server:
        yield server.base_url, server.model, str(model_dir)


async def _main(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    every = load_intercode_streams(args.intercode, work / "streams", datasets=("bash",))
    names = sorted(every)[: args.streams]
    streams = {name: every[name][: args.trajectories] for name in names}
    dataset = work / "critic-prompts.jsonl"
    prompts = await dump_critic_prompts(streams, dataset, args.output_len, work)
    prompts = prompts[: args.num_prompts] if args.num_prompts else prompts
    n = len(prompts)
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.tiny:
            base_url, model, tokenizer = stack.enter_context(_tiny_server(work))
        else:
            base_url, model, tokenizer = args.base_url, args.model, args.tokenizer or args.model
        for rnd in range(args.rounds):
            for side in ("ceb", "vllm") if rnd % 2 == 0 else ("vllm", "ceb"):
                if side == "ceb":
                    outcomes, duration = await run_ceb_client(
                        prompts, base_url, model, max_concurrency=args.concurrency, output_len=args.output_len
                    )
                    fig = metrics(outcomes, duration)
                else:
                    raw = await anyio.to_thread.run_sync(
                        lambda: run_vllm_bench(
                            VLLM_PYTHON, dataset, base_url, model, tokenizer, num_prompts=n,
                            max_concurrency=args.concurrency, output_len=args.output_len, result_dir=work,
                            extra_path=BENCH_DEPS if BENCH_DEPS.is_dir() else None,
                        )
                    )  # fmt: skip
                    fig = {k: raw[k] for k in ("duration", "completed", "failed", "total_input_tokens",
                                                "total_output_tokens", *KEYS) if k in raw}  # fmt: skip
                runs.append({"side": side, "round": rnd, **fig})
                print(
                    f"round {rnd} {side:4}: {fig['completed']} ok {fig.get('failed', 0)} failed, "
                    f"{fig['request_throughput']:.2f} req/s, {fig['output_throughput']:.0f} out tok/s, "
                    f"TTFT median {fig['median_ttft_ms']:.0f} ms, E2EL median {fig['median_e2el_ms']:.0f} ms"
                )
    med = {
        side: {k: float(np.median([r[k] for r in runs if r["side"] == side and k in r])) for k in KEYS}
        for side in ("ceb", "vllm")
    }
    per_round = [
        next(r for r in runs if r["round"] == i and r["side"] == "ceb")["request_throughput"]
        / next(r for r in runs if r["round"] == i and r["side"] == "vllm")["request_throughput"]
        for i in range(args.rounds)
    ]
    ratio = med["ceb"]["request_throughput"] / med["vllm"]["request_throughput"]
    print(
        f"\n{n} critic prompts, concurrency {args.concurrency}, {args.output_len} tokens each (ignore_eos); "
        "shared machine"
    )
    print(f"{'metric':26} {'ceb':>10} {'vllm bench':>10} {'ratio':>7}")
    for k in KEYS:
        a, b = med["ceb"][k], med["vllm"][k]
        print(f"{k:26} {a:>10.2f} {b:>10.2f} {a / b if b else float('nan'):>7.3f}")
    print(
        f"request_throughput ratio (of the medians over rounds): {ratio:.3f}; "
        f"per round {[round(x, 3) for x in per_round]}"
    )
    return {
        "benchmark": "vs-vllm",
        "target": TARGET,
        "server": "tiny" if args.tiny else base_url,
        "prompts": n,
        "concurrency": args.concurrency,
        "output_len": args.output_len,
        "prompt_form": "critic system + blank line + user, sent as one user message by both clients",
        "shared_machine": True,
        "runs": runs,
        "median": med,
        "request_throughput_ratio": ratio,
        "request_throughput_ratio_per_round": per_round,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--tiny", action="store_true", help="start the tests' CPU vLLM server (needs .venv-vllm)")
    where.add_argument("--base-url", help="a running vLLM server's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", help="served model name (with --base-url)")
    ap.add_argument("--tokenizer", help="tokenizer for vllm bench (with --base-url; default: the model name)")
    ap.add_argument("--intercode", type=Path, default=DEFAULT_INTERCODE, help="InterCode data root")
    ap.add_argument("--streams", type=int, default=2, help="bash streams whose critic prompts are dumped")
    ap.add_argument("--trajectories", type=int, default=10, help="trajectories kept per stream")
    ap.add_argument("--num-prompts", type=int, default=0, help="prompts sent (0: every dumped prompt)")
    ap.add_argument("--concurrency", type=int, default=16, help="max concurrency of both clients")
    ap.add_argument("--output-len", type=int, default=32, help="tokens generated per request (ignore_eos)")
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of both clients")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = ap.parse_args(argv)
    if args.base_url and not args.model:
        ap.error("--base-url needs --model")
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        doc = anyio.run(_main, args, Path(tmp))
    doc["machine"] = machine_info()
    path = save_results(args.out, "vs-vllm", doc)
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
