"""Prefix caching on a real vLLM server: the hit rate vLLM reports against the bound our prompts allow.

A run scores real streams through a recording proxy between ``ceb`` and the server, which keeps each request's
prompt token ids (``return_token_ids``) in arrival order, its stage (from ``ceb``'s ``X-Request-Id``) and vLLM's
``usage.prompt_tokens_details.cached_tokens`` (with ``--enable-prompt-tokens-details``).

The bound (:func:`whole_block_bound`) is what an unlimited prefix cache could give these requests in this order: the
longest prefix, in whole blocks, shared with any earlier request, at most ``prompt_tokens - 1`` (vLLM recomputes the
last prompt token: ``max_cache_hit_length`` in ``vllm/v1/core/kv_cache_manager.py``). Requests asking for
``prompt_logprobs`` never read the cache (``skip_reading_prefix_cache``) nor count in vLLM's queries, so both figures
leave them out; their blocks still enter the cache. The measured rate is the ``/metrics`` delta of
``vllm:prefix_cache_hits`` over ``vllm:prefix_cache_queries``, the cache emptied first when the server allows.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

import aiohttp
import orjson
from aiohttp import web
from pydantic import Field

from ceb.backends.openai import REQUEST_ID_HEADER
from ceb.bench.options import BenchSettings, bench_config, load_intercode_streams, run_and_save
from ceb.bench.server_admin import reset_prefix_cache, server_metrics
from ceb.bench.stats import percent, share
from ceb.data.trajectory import Trajectory
from ceb.pipeline import run_scoring
from ceb.pipeline.runner import progress_callbacks
from ceb.progress import Progress

__all__ = [
    "CacheFigures",
    "HindsightRounds",
    "HitFigures",
    "PrefixCacheBench",
    "PrefixCacheResult",
    "PrefixCacheRun",
    "StageFigures",
    "WireRecord",
    "hindsight_rounds",
    "hit_figures",
    "main",
    "recording_proxy",
    "run_prefix_cache_bench",
    "token_bound",
    "whole_block_bound",
]


@dataclass(frozen=True, slots=True)
class WireRecord:
    """One chat completion request as the server received it (``index``: arrival order, from 0).

    ``stage`` is ``""`` when the request id does not say; ``reads_cache`` is ``False`` for ``prompt_logprobs``;
    ``cached_tokens`` is what the server said, for one of the ``n`` child requests only (used for ``n = 1`` alone).
    """

    index: int
    stage: str
    prompt_token_ids: tuple[int, ...]
    reads_cache: bool
    n: int
    cached_tokens: int | None

    @property
    def prompt_tokens(self) -> int:
        """Prompt length in tokens."""
        return len(self.prompt_token_ids)

    @property
    def queried_tokens(self) -> int:
        """What ``vllm:prefix_cache_queries`` adds for it: ``n`` lookups of the prompt, or 0."""
        return self.n * self.prompt_tokens if self.reads_cache else 0


def whole_block_bound(records: Sequence[WireRecord], block_size: int) -> list[int]:
    """Per request in arrival order, the prompt tokens an unlimited prefix cache could serve (0: it does not read).

    A block's key chains the previous block's key with its tokens, as vLLM's; a request's bound is its leading run of
    blocks already seen, at most ``prompt_tokens - 1`` rounded down to a block (``block_size``: vLLM's
    ``--block-size``). ``n`` choices are ``n`` lookups: the first as above, the others up to the cap.

    Raises:
        ValueError: ``block_size`` < 1.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    seen: set[int] = set()
    bounds: list[int] = []
    for r in records:
        ids = r.prompt_token_ids
        keys: list[int] = []
        key = 0
        for start in range(0, len(ids) - block_size + 1, block_size):
            key = hash((key, ids[start : start + block_size]))
            keys.append(key)
        hit = 0
        while hit < len(keys) and keys[hit] in seen:
            hit += 1
        cap = (len(ids) - 1) // block_size * block_size
        bounds.append(min(hit * block_size, cap) + (r.n - 1) * cap if r.reads_cache else 0)
        seen.update(keys)
    return bounds


def token_bound(records: Sequence[WireRecord]) -> list[int]:
    """:func:`whole_block_bound` with blocks of one token: the gap between the two is what block granularity costs."""
    trie: dict[int, Any] = {}
    bounds: list[int] = []
    for r in records:
        node, depth, matching = trie, 0, True
        for token in r.prompt_token_ids:
            child = node.get(token)
            if child is None:
                matching = False
                child = node[token] = {}
            elif matching:
                depth += 1
            node = child
        cap = max(r.prompt_tokens - 1, 0)
        bounds.append(min(depth, cap) + (r.n - 1) * cap if r.reads_cache else 0)
    return bounds


def hindsight_rounds(records: Iterable[WireRecord]) -> list[list[WireRecord]]:
    """The hindsight requests grouped by prompt, one group per trajectory's round of votes.

    The ``V`` votes of one trajectory (one request with ``n = V``, or ``V`` requests of one choice) share a prompt.
    """
    rounds: dict[tuple[int, ...], list[WireRecord]] = defaultdict(list)
    for r in records:
        if r.stage == "hindsight":
            rounds[r.prompt_token_ids].append(r)
    return list(rounds.values())


@dataclass
class _Proxy:
    upstream: str
    records: list[WireRecord] = field(default_factory=list)
    arrived: int = 0
    session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        url = self.upstream + request.path_qs
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        raw = await request.read()
        if request.method != "POST" or not request.path.endswith("/chat/completions"):
            async with self.session.request(request.method, url, data=raw or None, headers=headers) as resp:
                return web.Response(body=await resp.read(), status=resp.status, content_type=resp.content_type)
        index = self.arrived
        self.arrived += 1
        body = orjson.loads(raw)
        wanted_ids = bool(body.get("return_token_ids"))
        body["return_token_ids"] = True
        async with self.session.post(url, data=orjson.dumps(body), headers=headers) as resp:
            status, reply = resp.status, await resp.read()
        if status != 200:
            return web.Response(body=reply, status=status, content_type="application/json")
        doc = orjson.loads(reply)
        usage = doc.get("usage") or {}
        details = usage.get("prompt_tokens_details") or {}
        rid = request.headers.get(REQUEST_ID_HEADER, "")
        stage = rid.split("-")[1] if rid.startswith("ceb-") and rid.count("-") >= 2 else ""
        self.records.append(
            WireRecord(
                index=index,
                stage=stage,
                prompt_token_ids=tuple(doc.get("prompt_token_ids") or ()),
                reads_cache=body.get("prompt_logprobs") is None,
                n=int(body.get("n") or 1),
                cached_tokens=details.get("cached_tokens"),
            )
        )
        if not wanted_ids:  # hand back the reply the client asked for
            doc.pop("prompt_token_ids", None)
            for choice in doc.get("choices") or ():
                choice.pop("token_ids", None)
        return web.Response(body=orjson.dumps(doc), status=200, content_type="application/json")


@contextlib.asynccontextmanager
async def recording_proxy(upstream: str, port: int = 0) -> AsyncIterator[tuple[str, list[WireRecord]]]:
    """A recording proxy to ``upstream`` (no ``/v1``) on loopback ``port`` (0: free); yields its URL and records."""
    proxy = _Proxy(upstream.rstrip("/"))
    app = web.Application(client_max_size=64 * 2**20)
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    port = runner.addresses[0][1]
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as session:
        proxy.session = session
        try:
            yield f"http://127.0.0.1:{port}/v1", proxy.records
        finally:
            await runner.cleanup()


@dataclass(frozen=True, slots=True)
class HitFigures:
    """Requests, prompt tokens, those that read the cache, the tokens vLLM looked up, and the bounds on its hits.

    ``bound_tokens``/``bound_rate``: :func:`whole_block_bound`; ``token_bound_rate``: :func:`token_bound`.
    """

    requests: int
    prompt_tokens: int
    reading_requests: int
    queried_tokens: int
    bound_tokens: int
    bound_rate: float | None
    token_bound_rate: float | None


@dataclass(frozen=True, slots=True)
class StageFigures(HitFigures):
    """One stage's figures and its measured hits (``None``: not known), with where they came from."""

    hit_tokens: int | None
    hit_rate: float | None
    hit_source: str | None


@dataclass(frozen=True, slots=True)
class HindsightRounds:
    """Per hindsight round: requests, prompt tokens, tokens looked up and tokens computed (looked up minus hits)."""

    rounds: int
    requests_per_round: float | None
    prompt_tokens_per_round: float | None
    queried_tokens_per_round: float | None
    computed_prompt_tokens_per_round: float | None


@dataclass(frozen=True, slots=True)
class CacheFigures(HitFigures):
    """Over all requests, then per stage and per hindsight round."""

    by_stage: dict[str, StageFigures]
    hindsight_rounds: HindsightRounds


@dataclass(frozen=True, slots=True)
class PrefixCacheRun(CacheFigures):
    """One scoring run through the recording proxy: its sampling, ``/metrics`` deltas, the measured rate and ratio."""

    sampling: str
    streams: dict[str, int]
    cache_reset_before_run: bool
    block_size: int
    wall_s: float
    steps_scored: int
    steps_failed: int
    metrics_queries: float
    metrics_hits: float
    measured_rate: float | None
    ratio_to_bound: float | None


@dataclass(frozen=True, slots=True)
class PrefixCacheResult:
    """``ceb bench prefix-cache``'s record: one run per hindsight sampling, on the server at ``server``."""

    server: str
    settings: PrefixCacheBench
    runs: tuple[PrefixCacheRun, ...]
    target: str = "measured hit rate >= 0.9 of the whole-block bound"


def _figures(part: Sequence[tuple[WireRecord, int, int]]) -> HitFigures:
    queried = sum(r.queried_tokens for r, _, _ in part)
    bound = sum(b for _, b, _ in part)
    return HitFigures(
        requests=len(part),
        prompt_tokens=sum(r.prompt_tokens for r, _, _ in part),
        reading_requests=sum(1 for r, _, _ in part if r.reads_cache),
        queried_tokens=queried,
        bound_tokens=bound,
        bound_rate=share(bound, queried),
        token_bound_rate=share(sum(t for _, _, t in part), queried),
    )


def _exact(part: Sequence[tuple[WireRecord, int, int]]) -> int | None:
    reading = [r for r, _, _ in part if r.reads_cache]
    if any(r.n > 1 or r.cached_tokens is None for r in reading):
        return None
    return sum(r.cached_tokens or 0 for r in reading)


def hit_figures(records: Sequence[WireRecord], block_size: int, metrics_hits: float | None = None) -> CacheFigures:
    """Bound and measured hits (tokens), over all requests and per stage, plus the hindsight rounds.

    Per-request hits are vLLM's ``cached_tokens`` (``n = 1`` only); a stage with ``n > 1`` requests gets the hits
    ``/metrics`` counted (``metrics_hits``) minus every other stage's, when those are all ``n = 1``.
    """
    ordered = sorted(records, key=lambda r: r.index)
    triples = list(zip(ordered, whole_block_bound(ordered, block_size), token_bound(ordered), strict=True))
    by_stage: dict[str, list[tuple[WireRecord, int, int]]] = defaultdict(list)
    for t in triples:
        by_stage[t[0].stage or "?"].append(t)
    stages: dict[str, StageFigures] = {}
    for stage, pairs in sorted(by_stage.items()):
        hits, source = _exact(pairs), "usage.cached_tokens"
        if hits is None and metrics_hits is not None:
            others = [_exact(p) for st, p in by_stage.items() if st != stage]
            if all(o is not None for o in others):
                hits, source = round(metrics_hits - sum(o or 0 for o in others)), "/metrics minus other stages"
        f = _figures(pairs)
        rate = share(hits, f.queried_tokens) if hits is not None else None
        stages[stage] = StageFigures(
            **asdict(f), hit_tokens=hits, hit_rate=rate, hit_source=source if hits is not None else None
        )
    rounds = hindsight_rounds(ordered)
    hind = stages.get("hindsight")
    computed = hind.queried_tokens - hind.hit_tokens if hind is not None and hind.hit_tokens is not None else None
    per_round = HindsightRounds(
        len(rounds),
        share(sum(len(rnd) for rnd in rounds), len(rounds)),
        share(sum(rnd[0].prompt_tokens for rnd in rounds), len(rounds)),
        share(hind.queried_tokens if hind is not None else 0, len(rounds)),
        share(computed, len(rounds)) if computed is not None else None,
    )
    return CacheFigures(**asdict(_figures(triples)), by_stage=stages, hindsight_rounds=per_round)


async def run_prefix_cache_bench(
    streams: Mapping[str, Sequence[Trajectory]], settings: PrefixCacheBench, sampling: str, work: Path
) -> PrefixCacheRun:
    """Score ``streams`` on the server at ``settings.root`` through the recording proxy, hindsight ``sampling``.

    The measured prefix-cache hit rate (``/metrics``) is set against :func:`whole_block_bound`; ``work`` is a fresh
    directory for the run.

    Raises:
        RuntimeError: ``/metrics`` has no prefix-cache counters or no block size (prefix caching off, not vLLM).
        aiohttp.ClientError: The server cannot be reached.
    """
    root = settings.root.rstrip("/").removesuffix("/v1")
    async with aiohttp.ClientSession() as session:
        reset = await reset_prefix_cache(session, root)
        before = await server_metrics(session, root)
        if before.prefix_cache_queries is None or before.block_size is None:
            raise RuntimeError(f"{root}/metrics has no prefix-cache counters or block size: is prefix caching on?")
        started = time.perf_counter()
        async with recording_proxy(root, settings.proxy_port) as (proxy_url, records):
            with Progress(f"bench {work.name}", None) as progress:
                on_row, on_start = progress_callbacks(progress)
                config = bench_config(
                    proxy_url,
                    settings.model,
                    settings.methods,
                    votes=settings.votes,
                    concurrency=settings.concurrency,
                    timeout_s=900,
                    backend={"structured_output": settings.structured_output},
                    hindsight={"sampling": sampling},
                )
                summary = await run_scoring(streams, config, work, on_row=on_row, on_start=on_start)
        wall_s = time.perf_counter() - started
        after = await server_metrics(session, root)
    assert after.prefix_cache_queries is not None and after.prefix_cache_hits is not None
    queries = after.prefix_cache_queries - before.prefix_cache_queries
    hits = after.prefix_cache_hits - (before.prefix_cache_hits or 0.0)
    figures = hit_figures(records, before.block_size, hits)
    measured, bound = share(hits, queries), figures.bound_rate
    return PrefixCacheRun(
        **{f.name: getattr(figures, f.name) for f in fields(CacheFigures)},
        sampling=sampling,
        streams={name: len(ts) for name, ts in streams.items()},
        cache_reset_before_run=reset,
        block_size=before.block_size,
        wall_s=wall_s,
        steps_scored=summary.steps_scored,
        steps_failed=summary.steps_failed,
        metrics_queries=queries,
        metrics_hits=hits,
        measured_rate=measured,
        ratio_to_bound=measured / bound if measured is not None and bound else None,
    )


# --- command line: ceb bench prefix-cache -------------------------------------------------------------------


class PrefixCacheBench(BenchSettings):
    r"""Prefix-cache hit rate on a REAL vLLM server against the whole-block bound our prompts allow.

        # any vLLM server you run (start it with --enable-prompt-tokens-details; VLLM_SERVER_DEV_MODE=1 lets the
        # benchmark empty its cache before each run):
        ceb bench prefix-cache --root http://127.0.0.1:8000 --model M
        # from a checkout, the tests' CPU build with their tiny random-weight model (needs .venv-vllm):
        python benchmarks/tiny_vllm.py --server-arg=--enable-prompt-tokens-details -- \
            prefix-cache --root {root0} --model {model}

    Scores ``ceb`` and ``static`` on the first two InterCode-Bash streams (15 trajectories each), once with the
    hindsight votes as ``V`` requests and once as one request with ``n = V``, and prints per run: vLLM's own hit rate
    (``/metrics``), the bound, their ratio, the same per stage from vLLM's per-request cached-token counts, and the
    prompt tokens computed per hindsight round. Writes ``prefix-cache-<UTC>.json`` with the settings and the machine.
    See ``ceb/bench/prefix_cache.py`` for what the bound is.
    """

    root: str
    """A running vLLM server's root URL, e.g. http://127.0.0.1:8000."""
    model: str
    """The served model name."""
    streams: int = Field(2, ge=1)
    """Bash streams scored (first N by name)."""
    trajectories: int = Field(15, ge=1)
    """Trajectories kept per stream."""
    votes: int = Field(5, ge=1)
    """Hindsight votes V."""
    concurrency: int = Field(32, ge=1)
    """Requests in flight at most."""
    sampling: tuple[Literal["requests", "n"], ...] = ("requests", "n")
    """Hindsight sampling modes measured, one run each."""
    proxy_port: int = Field(0, ge=0, le=65535)
    """The recording proxy's port (0: a free one)."""
    methods: tuple[str, ...] = ("ceb", "static")
    """Methods scored."""
    structured_output: str = "vllm"
    """The backend's structured-output mode."""


def _run_lines(run: PrefixCacheRun) -> list[str]:
    rate, bound, ratio = run.measured_rate, run.bound_rate, run.ratio_to_bound
    lines = [
        f"\nsampling={run.sampling} streams={run.streams} "
        f"block={run.block_size} cache reset={run.cache_reset_before_run} wall {run.wall_s:.0f} s",
        f"  {run.requests} requests, {run.prompt_tokens:,} prompt tokens; vLLM looked up "
        f"{run.queried_tokens:,} tokens ({run.reading_requests} requests read the cache)",
        f"  vLLM /metrics: {run.metrics_hits:,.0f} of {run.metrics_queries:,.0f} tokens hit = {percent(rate)}; "
        f"bound {percent(bound)}; ratio {ratio if ratio is None else round(ratio, 3)}",
        "  stage        requests  looked up   bound     hit  per-token bound  (hits from)",
    ]
    every = (run.requests, run.queried_tokens, run.bound_rate, rate, run.token_bound_rate, "/metrics")
    rows = [("all", *every)] + [
        (stage, f.requests, f.queried_tokens, f.bound_rate, f.hit_rate, f.token_bound_rate, f.hit_source)
        for stage, f in run.by_stage.items()
    ]
    for stage, requests, queried, bound_rate, hit_rate, token_rate, source in rows:
        rates = f"{percent(bound_rate):>7} {percent(hit_rate):>7} {percent(token_rate):>16}"
        lines.append(f"  {stage:12} {requests:>8} {queried:>10,} {rates}  ({source or ''})")
    h = run.hindsight_rounds
    if h.rounds:
        lines.append(
            f"  hindsight: {h.rounds} rounds of {h.requests_per_round or 0:.1f} requests, "
            f"{h.prompt_tokens_per_round or 0:,.0f}-token prompt; per round {h.queried_tokens_per_round or 0:,.0f} "
            f"tokens looked up, {h.computed_prompt_tokens_per_round or 0:,.0f} computed"
            if h.computed_prompt_tokens_per_round is not None
            else "  hindsight: computed tokens unknown (no per-request cache counts)"
        )
    return lines


async def _bench(args: PrefixCacheBench, work: Path) -> PrefixCacheResult:
    streams = load_intercode_streams(
        args.intercode, work / "streams", ("bash",), first=args.streams, trajectories=args.trajectories
    )
    runs = [await run_prefix_cache_bench(streams, args, s, work / f"run-{s}") for s in args.sampling]
    return PrefixCacheResult(args.root.rstrip("/").removesuffix("/v1"), args, tuple(runs))


def _lines(result: PrefixCacheResult) -> list[str]:
    s = result.settings
    return [f"V={s.votes} methods={','.join(s.methods)}", *(line for run in result.runs for line in _run_lines(run))]


def main(args: PrefixCacheBench) -> int:
    """``ceb bench prefix-cache``: :func:`run_prefix_cache_bench` per sampling, printed and saved."""
    return run_and_save("prefix-cache", _bench, args, lines=_lines)
