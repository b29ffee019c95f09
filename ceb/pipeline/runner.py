"""Run the lanes of the bank methods and the step pools of the others concurrently, with results streamed to disk.

Each piece of work is a chain that must stay in order: a bank lane (stream x order x method, strictly sequential,
:mod:`ceb.pipeline.lane`), a trajectory of ``static``, or one step of the baselines (:mod:`ceb.pipeline.pool`).
Structured concurrency only: one anyio task group holds a writer task and the chains; they hand rows to the
writer through a bounded memory object stream, at most ``max_active_lanes`` chains run at once, started longest
first. Endpoint concurrency is bounded separately, per endpoint, inside the backend, where the longest remaining
chain is served first. Which lanes and pools there are is :mod:`ceb.pipeline.planning`; where their files go is
:mod:`ceb.pipeline.rundir`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ceb.backends.scheduling import EndpointLimits
from ceb.bank import RETRIEVERS
from ceb.config import RunConfig
from ceb.data.streams import check_streams
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError, RunError, reported_error
from ceb.gc_tuning import quiet_gc
from ceb.logs import get_logger
from ceb.pipeline.label import label_sources
from ceb.pipeline.lane import Lane
from ceb.pipeline.planning import LanePlan, build_lanes, fingerprints, plan_lanes
from ceb.pipeline.pool import StepPool
from ceb.pipeline.provenance import identify, provenance
from ceb.pipeline.results import ResultWriter, StepRow
from ceb.pipeline.resume import check_resumable, check_shard
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.shard import Shard
from ceb.pipeline.summary import BankSize, FailureBudget, Row, RunSummary, cache_counts, labellers, summary_doc
from ceb.progress import Progress
from ceb.stages.assembly import Stages, build_critic, build_stages, lacks_endpoint, prompt_set
from ceb.stages.methods import MethodSpec, resolve_method
from ceb.stages.prompt_check import check_prompts
from ceb.stages.tokens import PromptTokenCounter

__all__ = ["check_prompts", "progress_callbacks", "run_scoring"]

log = get_logger(__name__)


def progress_callbacks(progress: Progress) -> tuple[Callable[[Row], None], Callable[[int], None]]:
    """``on_row`` and ``on_start`` for :func:`run_scoring`: a step row (a copy too) is one unit of ``progress``."""

    def on_row(row: Row) -> None:
        if isinstance(row, StepRow):
            progress.advance(failed=row.status == "failed" and row.reused_from is None, requests=row.requests)
        else:
            progress.add_requests(row.requests)

    return on_row, progress.set_total


async def run_scoring(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    run_dir: str | Path,
    *,
    stages: Stages | Mapping[str, Stages] | None = None,
    on_row: Callable[[Row], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    overwrite: bool = False,
    resume: bool = False,
    shard: Shard | None = None,
) -> RunSummary:
    """Score every stream, in each of ``config.orders`` orders, with every method of ``config.methods``.

    Args:
        streams: Stream name -> trajectories in stream order (labels included: lanes blind them).
        config: The effective configuration; recorded in ``run_dir/config.json`` with its fingerprints.
        run_dir: New or empty directory for the results (or the run to resume).
        stages: Critic and hindsight, or one set per critic label of ``config.critics``; built from ``config``
            when ``None``.
        on_row: Called with each row after it is on disk.
        on_start: Called once before the first lane, with the number of step rows this call will write.
        overwrite: Delete an earlier run's results in ``run_dir`` first.
        resume: Continue the run in ``run_dir`` (:mod:`ceb.pipeline.resume`).
        shard: Score only this shard's lanes (:mod:`ceb.pipeline.shard`); a resume must name the recorded one.

    Returns:
        Counts of what was scored and what failed (resumed rows included, and counted apart).

    Raises:
        RunError: ``run_dir`` is locked by another process, holds scored steps (without ``overwrite`` or
            ``resume``), or a resume finds no run or changed input or settings (names each change).
        ConfigError: Unknown method or backend, a broken prompt template, or an invalid stream name
            (:func:`~ceb.data.streams.check_streams`).
        DataError: A trajectory id twice in a stream.
    """
    check_streams(streams)
    run = RunDir(run_dir)
    if resume:
        run.require_run()  # before the lock, which would create a missing directory
    with run.lock(), quiet_gc():
        return await _run_scoring(
            streams,
            config,
            run,
            stages=stages,
            on_row=on_row,
            on_start=on_start,
            overwrite=overwrite,
            resume=resume,
            shard=shard,
        )


async def _run_scoring(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    run: RunDir,
    *,
    stages: Stages | Mapping[str, Stages] | None,
    on_row: Callable[[Row], None] | None,
    on_start: Callable[[int], None] | None,
    overwrite: bool,
    resume: bool,
    shard: Shard | None,
) -> RunSummary:
    overwrite = _may_write(run, overwrite=overwrite, resume=resume)
    methods = _check_methods(config, streams)
    sources = label_sources(streams)  # refuses a stream that mixes label sources, before anything is asked
    prints = fingerprints(config, streams)
    if resume:
        check_resumable(run, prints | {"limit": config.max_trajectories}, streams)
        check_shard(run, shard.to_record() if shard is not None else None)
    plan = plan_lanes(streams, config, methods, shard)
    summary = RunSummary(run_dir=run.path, hindsight_labellers=labellers(config))
    if resume:
        plan.restore(run, config, summary)
    critic_configs = config.critic_configs()
    by_critic = _stages_by_critic(stages, critic_configs)
    if not config.allow_unavailable:
        _refuse_unavailable(methods, by_critic, critic_configs)
    critic_stages = {
        (label, m.critic): build_critic(m, critic_configs[label], by_critic[label])
        for label in critic_configs
        for m in methods
    }
    tokens = PromptTokenCounter(prompt_set(config)) if config.critic.count_tokens else None
    lanes: list[Lane] = []
    pools: list[StepPool] = []
    started, started_at = time.perf_counter(), datetime.now(UTC)
    outcome, error, began = "interrupted", "", False
    identities: dict[int, dict[str, Any]] = {}
    try:
        try:
            if stages is None and config.backend.preflight:
                await _preflight(by_critic.values())
            identities = await identify(by_critic.values())
            if overwrite:
                run.remove_results()
            run.path.mkdir(parents=True, exist_ok=True)
            if resume:
                run.record_limit(config.max_trajectories)
            else:
                run.write_config(config, streams, prints, shard.to_record() if shard is not None else None)
            began = True
            rows, received = anyio.create_memory_object_stream[Row](max_buffer_size=1024)
            with run.writer() as writer, rows, received:
                lanes, pools = build_lanes(plan, config, by_critic, critic_stages, tokens, rows.send)
                await _execute(lanes, pools, plan, config, writer, summary, on_row, on_start, (rows, received))
            outcome = "finished"
        except BaseExceptionGroup as group:
            # A lane or the writer failed and the task group wrapped it: surface our own error (or the system's,
            # a full disk say) as itself.
            first = reported_error(group)
            if first is None:
                raise
            raise first from None
    except Exception as exc:
        outcome, error = "failed", str(exc)
        raise
    finally:
        try:
            _save_banks(run, lanes, pools, summary)
            for lane in lanes:
                summary.count_ahead(lane.steps_kept_ahead, lane.steps_discarded, lane.discarded)
            summary.cache = cache_counts(by_critic.values())
            summary.provenance = provenance(config, by_critic, identities, prints["config_sha256"], sources)
            summary.wall_s = time.perf_counter() - started
            if began:
                run.write_summary(summary_doc(summary, outcome, error, started_at))
        except OSError as exc:
            if outcome == "finished":
                raise
            # The run is already stopping, most likely for the same reason (a full disk): that first error is
            # the one to report. A resume needs neither file: it rebuilds the banks from hindsight.jsonl.
            log.info("banks or summary not saved", run_dir=str(run), error=str(exc))
        finally:
            if stages is None:
                with anyio.CancelScope(shield=True):
                    for own in by_critic.values():
                        await own.__aexit__(None, None, None)
    return summary


def _may_write(run: RunDir, *, overwrite: bool, resume: bool) -> bool:
    """Whether the run replaces earlier results (``overwrite``, or an earlier run that scored no step)."""
    if overwrite and resume:
        raise RunError("choose one of overwrite and resume")
    if not run.has_scores or overwrite or resume:
        return overwrite
    if not run.scored_anything():
        # An earlier run that stopped before scoring a step (a wrong endpoint, say) must not block the
        # corrected command: its failure rows are replaced, as with overwrite.
        log.warning("replacing an earlier run that scored no step", run_dir=str(run))
        return True
    raise RunError(
        f"{run} already holds results ({run.SCORES}); choose a new output directory, pass --overwrite, "
        f"or continue it with --resume {run}"
    )


def _check_methods(config: RunConfig, streams: Mapping[str, Sequence[Trajectory]]) -> list[MethodSpec]:
    """The run's methods, after checking what would otherwise fail mid-run: retrievers and prompt templates."""
    methods = [resolve_method(m) for m in config.methods]
    for retriever in {m.resolve(config.ceb).retriever for m in methods}:
        RETRIEVERS.get(retriever)
    check_prompts(config, [t.domain for trajs in streams.values() for t in trajs])
    return methods


async def _execute(
    lanes: Sequence[Lane],
    pools: Sequence[StepPool],
    plan: LanePlan,
    config: RunConfig,
    writer: ResultWriter,
    summary: RunSummary,
    on_row: Callable[[Row], None] | None,
    on_start: Callable[[int], None] | None,
    stream: tuple[MemoryObjectSendStream[Row], MemoryObjectReceiveStream[Row]],
) -> None:
    if on_start is not None:
        on_start(len(plan.recopied) + sum(lane.steps_left for lane in lanes) + sum(p.steps_left for p in pools))
    # Copies of the source rows a resume kept first: they need no request (ceb.pipeline.pool).
    for row in plan.recopied:
        writer.write(row)
        summary.count(row)
        if on_row is not None:
            on_row(row)
    await _run_chains(lanes, pools, config, writer, summary, on_row, stream)


def _save_banks(run: RunDir, lanes: Sequence[Lane], pools: Sequence[StepPool], summary: RunSummary) -> None:
    """Save each lane's bank and list every lane's bank size in ``summary`` (a pooled method: 0, per order)."""
    for lane in lanes:
        saved = run.bank_file((lane.stream, lane.order, lane.method.name, lane.critic))
        lane.bank.save(run.path / saved)
        summary.banks.append(
            BankSize(lane.stream, lane.order, lane.method.name, lane.critic, records=len(lane.bank), path=saved)
        )
    for pool in pools:
        for m in pool.methods:
            for order in pool.shared.orders:
                summary.banks.append(BankSize(pool.stream, order, m.method.name, pool.critic, records=0, path=None))


def _stages_by_critic(
    stages: Stages | Mapping[str, Stages] | None, critic_configs: Mapping[str, RunConfig]
) -> dict[str, Stages]:
    if stages is None:
        limits = EndpointLimits()  # one set of slots per endpoint, shared by every critic that uses it
        return {label: build_stages(cfg, limits) for label, cfg in critic_configs.items()}
    if isinstance(stages, Stages):
        if set(critic_configs) != {""}:
            raise ConfigError("config.critics names several critics: pass one Stages per critic label")
        return {"": stages}
    missing = set(critic_configs) - set(stages)
    if missing:
        raise ConfigError(f"no stages given for critic(s) {sorted(missing)}")
    return dict(stages)


def _refuse_unavailable(
    methods: Sequence[MethodSpec], by_critic: Mapping[str, Stages], critic_configs: Mapping[str, RunConfig]
) -> None:
    """Refuse a run in which a method needs an LLM endpoint its critic's backend does not have."""
    for label, s in by_critic.items():
        lacking = [m.name for m in methods if lacks_endpoint(m, s)]
        if lacking:
            backend = critic_configs[label].backend.name
            raise ConfigError(
                f"{', '.join(lacking)} need{'s' if len(lacking) == 1 else ''} an LLM endpoint, and backend "
                f"{backend!r} has none: every step would be 'not available'. Choose backend 'openai', drop "
                f"{'it' if len(lacking) == 1 else 'them'} from methods, or set allow_unavailable = true to keep "
                f"the rows"
            )


async def _preflight(stages: Iterable[Stages]) -> None:
    """Preflight each distinct endpoint of ``stages``, the critic's and the labeller's, once (``preflight``)."""
    seen: set[int] = set()
    for s in stages:
        for chat in s.endpoints:
            if id(chat) not in seen:
                seen.add(id(chat))
                await chat.preflight()


async def _run_chains(
    lanes: Sequence[Lane],
    pools: Sequence[StepPool],
    config: RunConfig,
    writer: ResultWriter,
    summary: RunSummary,
    on_row: Callable[[Row], None] | None,
    stream: tuple[MemoryObjectSendStream[Row], MemoryObjectReceiveStream[Row]],
) -> None:
    """Write every row the chains send on ``stream`` (the lanes were built with its sender)."""
    send, receive = stream
    chain_slots = anyio.CapacityLimiter(config.max_active_lanes)
    budget = FailureBudget(config.fail_on_error)

    def take(row: Row) -> None:
        writer.write(row)
        summary.count(row)
        if on_row is not None:
            on_row(row)
        budget.check(summary, row)

    async def write_all() -> None:
        try:
            # Shielded: when the run is cancelled (Ctrl-C, a timeout) the chains stop, close their senders, and
            # this loop ends at EndOfStream after writing every row they handed over.
            with anyio.CancelScope(shield=True):
                async with receive:
                    async for row in receive:
                        take(row)
        finally:
            # Cancelled or failed: rows already handed over are finished work; write them too.
            while True:
                try:
                    row = receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                writer.write(row)
                summary.count(row)

    async def run_chain(run: Callable[[], Awaitable[None]]) -> None:
        async with chain_slots:
            await run()

    chains: list[tuple[int, Callable[[], Awaitable[None]]]] = [
        (lane.remaining, lane.run) for lane in lanes if lane.remaining > 0
    ]
    chains += [(unit.remaining, partial(unit.run, send.send)) for pool in pools for unit in pool.units()]
    # Longest remaining chain first, so the chains that bound the makespan hold chain slots from the start.
    chains.sort(key=lambda chain: -chain[0])
    async with anyio.create_task_group() as tg:
        tg.start_soon(write_all)
        # The sender closes when every chain has ended, and then the writer's loop ends.
        async with send, anyio.create_task_group() as chain_group:
            for _, run in chains:
                chain_group.start_soon(run_chain, run)
