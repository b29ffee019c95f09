"""Run many lanes (stream x method) concurrently, each strictly ordered, with results streamed to disk.

Structured concurrency only: one anyio task group holds a writer task and the lanes; lanes hand rows to
the writer through a bounded memory object stream, and at most ``max_active_lanes`` lanes run at once.
Endpoint concurrency is bounded separately, per endpoint, inside the backend.
"""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson
import structlog
from anyio.abc import ObjectSendStream

from ceb.backends.scheduling import EndpointLimits
from ceb.bank import RETRIEVERS, BankRecord, Hit, Retrieval
from ceb.config import RunConfig
from ceb.data.trajectory import Step, Trajectory
from ceb.errors import CEBError, ConfigError, RunError
from ceb.pipeline.lane import Lane, new_bank
from ceb.pipeline.lock import run_lock
from ceb.pipeline.results import HindsightRow, ResultWriter, StepRow, read_step_rows
from ceb.pipeline.resume import (
    LIMIT_SETTING,
    LaneKey,
    LaneProgress,
    check_resumable,
    config_fingerprint,
    restore_progress,
    stream_fingerprint,
    write_atomic,
)
from ceb.pipeline.reuse import SharedLane, SharedStream, copies, share_orders, shares_orders
from ceb.progress import Progress
from ceb.stages.assembly import Stages, build_critic, build_stages, lacks_endpoint, prompt_set
from ceb.stages.base import CriticInput, HistoryItem
from ceb.stages.critic import critic_context
from ceb.stages.hindsight import hindsight_context
from ceb.stages.methods import MethodSpec, resolve_method
from ceb.stages.tokens import PromptTokenCounter
from ceb.version import __version__

__all__ = [
    "BankSize",
    "FailureBudget",
    "RunSummary",
    "check_prompts",
    "fingerprints",
    "lane_name",
    "progress_callbacks",
    "run_scoring",
    "stream_order",
]

log = structlog.get_logger(__name__)

Row = StepRow | HindsightRow


@dataclass(frozen=True, slots=True)
class BankSize:
    """The bank of one lane at the end of a run (an entry of ``summary.json``'s ``banks``).

    Attributes:
        stream: Stream name.
        order: Stream order (0: the input order, ``r >= 1``: seeded permutation ``r``).
        method: Method name.
        critic: Critic label (``""`` for one).
        records: Records in the bank.
        path: The saved bank, relative to the run directory (``banks/<lane name>.json``), or ``None`` for a
            method without a bank.
    """

    stream: str
    order: int
    method: str
    critic: str
    records: int
    path: str | None


@dataclass
class RunSummary:
    """What a run did, counted as rows were written.

    Attributes:
        run_dir: Where the results are.
        steps_scored: Step rows with a score.
        steps_failed: Step rows without one (critic failure; reasons in ``scores.jsonl``).
        steps_unavailable: Step rows of a method that cannot score there (``not available: ...``): neither
            scored nor failed, and never counted against ``fail_on_error``.
        steps_clipped: Scores clipped into [0, 1] (Eq. 6).
        trajectories_voted: Hindsight rows written.
        votes_failed: Hindsight votes without a readable answer.
        trajectories_not_banked: Trajectories that added no record to their bank: no valid vote, or the labeler
            abstained on every step.
        wall_s: Seconds from start to the last row.
        requests: Requests sent, retries and re-asks included.
        banks: Each lane's bank at the end, the lane's stream, order, method and critic apart.
        steps_resumed: Step rows kept from before a resume (included in ``steps_scored``).
        trajectories_resumed: Hindsight rows kept from before a resume (included in ``trajectories_voted``).
        prompt_tokens: Input tokens the server reported for this call's rows (resumed rows not included).
        completion_tokens: Output tokens likewise.
        steps_abstained: Steps the hindsight labeler gave no label (no evidence to judge by), so not banked.
        steps_reused: Step rows copied from another stream order (``reuse_bank_free``,
            :mod:`ceb.pipeline.reuse`), whatever their source's outcome; not in ``steps_scored``,
            ``steps_failed`` or ``steps_unavailable``, and no request of theirs in ``requests``. A resume writes
            every copy again, so they are never among the resumed rows.
    """

    run_dir: Path
    steps_scored: int = 0
    steps_failed: int = 0
    steps_clipped: int = 0
    trajectories_voted: int = 0
    votes_failed: int = 0
    trajectories_not_banked: int = 0
    wall_s: float = 0.0
    requests: int = 0
    banks: list[BankSize] = field(default_factory=list)
    steps_resumed: int = 0
    trajectories_resumed: int = 0
    steps_unavailable: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps_abstained: int = 0
    steps_reused: int = 0

    def count_resumed(self, row: Row) -> None:
        """Count a row kept from before a resume (its requests were spent by the earlier run)."""
        if isinstance(row, StepRow):
            self.steps_resumed += 1
        else:
            self.trajectories_resumed += 1
        self._count_outcome(row)

    def count(self, row: Row) -> None:
        """Add ``row`` to the counters."""
        self.requests += row.requests
        self.prompt_tokens += row.prompt_tokens or 0
        self.completion_tokens += row.completion_tokens or 0
        self._count_outcome(row)

    def _count_outcome(self, row: Row) -> None:
        if isinstance(row, StepRow):
            if row.reused_from is not None:
                self.steps_reused += 1
            elif row.status == "not_available":
                self.steps_unavailable += 1
            elif row.status == "failed":
                self.steps_failed += 1
            else:
                self.steps_scored += 1
            self.steps_clipped += row.clipped and row.reused_from is None
        else:
            self.trajectories_voted += 1
            self.votes_failed += row.failed_votes
            self.trajectories_not_banked += row.records_added == 0
            self.steps_abstained += len(row.abstained)


def check_prompts(config: RunConfig, domains: Sequence[str]) -> None:
    """Render every template each domain will use on a small input, so a broken template fails now.

    Raises:
        ConfigError: A template is missing or uses a variable the stages do not provide.
    """
    prompts = prompt_set(config)
    record = BankRecord("t", "s", "a", "o", 1, 1.0, 0.9, True, "probe", 0)
    full = Retrieval(
        positives=(Hit(record, 0.5),), negatives=(Hit(replace(record, pseudo_label=0, agreement=False), 0.4),)
    )
    step = Step(state="s", action="a", observation="o", reasoning="r", op="CLICK", element="e", value="v")
    for d in sorted(set(domains)):
        probe = Trajectory(id="probe", task="t", domain=d, steps=(step, step))
        for use_bank, retrieval, rho in ((True, full, True), (True, Retrieval(), False), (False, Retrieval(), False)):
            inp = CriticInput(
                domain=d,
                task="t",
                step=1,
                state="s",
                action="a",
                reasoning="r",
                op="CLICK",
                element="e",
                value="v",
                history=(HistoryItem("a", "o", 0.5), HistoryItem("b", "", None)),
                retrieval=retrieval,
                use_bank=use_bank,
                repetition_flag=rho,
            )
            prompts.messages(d, "critic", critic_context(inp))
        prompts.messages(d, "hindsight", hindsight_context(probe))


RESULT_FILES = ("config.json", "scores.jsonl", "hindsight.jsonl", "metrics.json", "summary.json")


SUMMARY_SCHEMA = 2
"""Layout version of ``summary.json``. 2: ``banks`` is a list of :class:`BankSize` objects (stream, order,
method and critic each a field of its own), no longer an object keyed by lane file names."""


def write_summary(run_dir: Path, summary: RunSummary, outcome: str, error: str, started_at: datetime) -> None:
    """Write ``run_dir/summary.json`` (atomically): how this call of :func:`run_scoring` ended and what it did.

    Written when a call that got past its start checks (preflight, settings, resume) ends, however it ends:
    ``status`` is ``finished``, ``failed`` (with ``error``) or ``interrupted`` (Ctrl-C, cancellation). A call
    refused at start writes no file at all, so nothing of it blocks the corrected command. A resume writes it
    anew; its counts include the resumed rows, whose requests and tokens were spent by the earlier call and are
    not counted again.
    """
    doc = {
        "schema": SUMMARY_SCHEMA,
        "status": outcome,
        "error": error or None,
        "started_at": started_at.isoformat(timespec="seconds"),
        "ended_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ceb_version": __version__,
        **{k: v for k, v in asdict(summary).items() if k != "run_dir"},
    }
    write_atomic(run_dir / "summary.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def _finished_anything(run_dir: Path) -> bool:
    """Whether ``run_dir/scores.jsonl`` holds a step with a score (not only failures and "not available").

    A file that cannot be read counts as holding results: it is never replaced without ``overwrite``.
    """
    try:
        return any(row.score is not None for row in read_step_rows(run_dir / "scores.jsonl"))
    except RunError:
        return True


def _remove_results(run_dir: Path) -> None:
    for name in RESULT_FILES:
        (run_dir / name).unlink(missing_ok=True)
    banks = run_dir / "banks"
    if banks.is_dir():
        for f in banks.glob("*.json"):
            f.unlink()
        if not any(banks.iterdir()):
            banks.rmdir()


def progress_callbacks(progress: Progress) -> tuple[Callable[[Row], None], Callable[[int], None]]:
    """``on_row`` and ``on_start`` for :func:`run_scoring` that keep ``progress`` counting step rows.

    A step row is one unit, a copy from another order too (failed when its own critic call failed); hindsight
    rows add their requests.
    """

    def on_row(row: Row) -> None:
        if isinstance(row, StepRow):
            progress.advance(failed=row.status == "failed" and row.reused_from is None, requests=row.requests)
        else:
            progress.add_requests(row.requests)

    return on_row, progress.set_total


def stream_order(trajectories: Sequence[Trajectory], order: int, seed: int) -> list[Trajectory]:
    """Order ``order`` of a stream: the input order for 0, else a permutation seeded with ``seed + order``.

    Uses :meth:`random.Random.shuffle` (Fisher-Yates), stable across Python versions for a given seed.
    """
    out = list(trajectories)
    if order:
        random.Random(seed + order).shuffle(out)
    return out


def lane_name(key: LaneKey) -> str:
    """File-name form of a lane: ``stream__method``, with ``__o<order>`` and ``__<critic>`` when set."""
    stream, order, method, critic = key
    return f"{stream}__{method}" + (f"__o{order}" if order else "") + (f"__{critic}" if critic else "")


def fingerprints(config: RunConfig, streams: Mapping[str, Sequence[Trajectory]]) -> dict[str, Any]:
    """What a resume must find unchanged: result-affecting settings and each stream's content hash."""
    digest, flat = config_fingerprint(config)
    return {
        "config_sha256": digest,
        "config": flat,
        "streams": {name: stream_fingerprint(trajs) for name, trajs in streams.items()},
    }


def _write_config(
    run_dir: Path, config: RunConfig, streams: Mapping[str, Sequence[Trajectory]], prints: Mapping[str, Any]
) -> None:
    sources = {name: sorted({t.source.rsplit(":", 1)[0] for t in trajs if t.source}) for name, trajs in streams.items()}
    doc = {
        "ceb_version": __version__,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "streams": {n: {"files": sources[n], "trajectories": len(t)} for n, t in streams.items()},
        "fingerprints": prints,
        "config": config.model_dump(mode="json"),
    }
    write_atomic(run_dir / "config.json", orjson.dumps(doc, option=orjson.OPT_INDENT_2))


def _record_limit(run_dir: Path, limit: int | None) -> None:
    """Record a resume's new trajectory limit in ``config.json``, so that the next resume starts from it."""
    path = run_dir / "config.json"
    doc = orjson.loads(path.read_bytes())
    if doc["config"].get(LIMIT_SETTING) != limit:
        doc["config"][LIMIT_SETTING] = limit
        write_atomic(path, orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        log.warning("trajectory limit raised on resume", run_dir=str(run_dir), max_trajectories=limit)


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
) -> RunSummary:
    """Score every stream, in each of ``config.orders`` orders, with every method of ``config.methods``.

    Args:
        streams: Stream name -> trajectories in stream order (as read, labels included: lanes blind them).
        config: The effective configuration; written to ``run_dir/config.json`` with its fingerprints.
        run_dir: New or empty directory for the results (or the run to resume).
        stages: Critic and hindsight to use, or one set per critic label of ``config.critics``; built from
            the configuration when ``None``.
        on_row: Called with each row after it is on disk (progress bars).
        on_start: Called once before the first lane starts, with the number of step rows this call will write
            (all planned steps less those a resume keeps).
        overwrite: Delete the results of an earlier run in ``run_dir`` (and nothing else) first.
        resume: Continue the run in ``run_dir`` where it stopped (:mod:`ceb.pipeline.resume`); a directory
            without a started run is started afresh.

    Returns:
        Counts of what was scored and what failed (resumed rows included, and counted apart).

    Raises:
        RunError: Another process is using ``run_dir`` (its lock, :mod:`ceb.pipeline.lock`); ``run_dir`` already
            holds scored steps (and neither ``overwrite`` nor ``resume``), or a resume
            finds changed input or settings (names each change).
        ConfigError: Unknown method or backend, or a broken prompt template.
    """
    run_dir = Path(run_dir)
    with run_lock(run_dir):
        return await _run_scoring(
            streams,
            config,
            run_dir,
            stages=stages,
            on_row=on_row,
            on_start=on_start,
            overwrite=overwrite,
            resume=resume,
        )


async def _run_scoring(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    run_dir: Path,
    *,
    stages: Stages | Mapping[str, Stages] | None,
    on_row: Callable[[Row], None] | None,
    on_start: Callable[[int], None] | None,
    overwrite: bool,
    resume: bool,
) -> RunSummary:
    if overwrite and resume:
        raise RunError("choose one of overwrite and resume")
    started_run = (run_dir / "config.json").exists()
    if (run_dir / "scores.jsonl").exists() and not (overwrite or resume) and not _finished_anything(run_dir):
        # An earlier run that stopped before scoring a step (a wrong endpoint, say) must not block the
        # corrected command: its failure rows are replaced, as with overwrite.
        log.warning("replacing an earlier run that scored no step", run_dir=str(run_dir))
        overwrite = True
    if (run_dir / "scores.jsonl").exists() and not (overwrite or resume):
        raise RunError(
            f"{run_dir} already holds results (scores.jsonl); choose a new output directory, pass --overwrite, "
            f"or continue it with --resume {run_dir}"
        )
    methods: list[MethodSpec] = [resolve_method(m) for m in config.methods]
    for retriever in {m.resolve(config.ceb).retriever for m in methods}:
        RETRIEVERS.get(retriever)  # an unknown or uninstalled retriever fails here, not mid-run
    check_prompts(config, [t.domain for trajs in streams.values() for t in trajs])
    prints = fingerprints(config, streams)
    resuming = resume and started_run
    if resuming:
        check_resumable(run_dir, prints | {"limit": config.max_trajectories})
    critic_configs = config.critic_configs()
    share = shares_orders(config)
    specs: dict[LaneKey, tuple[Sequence[Trajectory], MethodSpec]] = {}
    shared: dict[LaneKey, SharedStream] = {}
    for name, trajs in streams.items():
        orders = [stream_order(trajs, r, config.order_seed)[: config.max_trajectories] for r in range(config.orders)]
        union = share_orders(orders) if share else None
        for order, ordered in enumerate(orders):
            for critic in critic_configs:
                for method in methods:
                    if union is not None and method.order_free:
                        if order == 0:  # one lane for every order (ceb.pipeline.reuse)
                            specs[(name, 0, method.name, critic)] = (union.trajectories, method)
                            shared[(name, 0, method.name, critic)] = union
                    else:
                        specs[(name, order, method.name, critic)] = (ordered, method)
    summary = RunSummary(run_dir=run_dir)
    progress: dict[LaneKey, LaneProgress] = {}
    recopied: list[Row] = []
    if resuming:
        progress = restore_progress(
            run_dir,
            {k: (t, partial(new_bank, m, config) if m.use_bank else None) for k, (t, m) in specs.items()},
            shared=shared,
        )
        for key, prog in progress.items():
            kept: list[Row] = [*prog.kept_steps, *prog.kept_hindsight]
            for row in kept:
                summary.count_resumed(row)
            if key in shared:
                recopied += [c for row in prog.kept_steps for c in copies(row, shared[key])]
    own_stages = stages is None
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
    started = time.perf_counter()
    started_at = datetime.now(UTC)
    outcome, error, began = "interrupted", "", False
    try:
        try:
            if own_stages and config.backend.preflight:
                await _preflight(by_critic.values())
            if overwrite:
                _remove_results(run_dir)
            run_dir.mkdir(parents=True, exist_ok=True)
            if resuming:
                _record_limit(run_dir, config.max_trajectories)
            else:
                _write_config(run_dir, config, streams, prints)
            began = True
            with ResultWriter(run_dir) as writer:
                for key, (trajs, method) in specs.items():
                    prog = progress.get(key, LaneProgress())
                    args = (key[0], method, trajs, by_critic[key[3]], config, _unset_emit)
                    kwargs: dict[str, Any] = {
                        "bank": prog.bank,
                        "order": key[1],
                        "critic": key[3],
                        "start": prog.position,
                        "prefix": prog.prefix,
                        "critic_stage": critic_stages[(key[3], method.critic)],
                        "tokens": tokens,
                    }
                    if key in shared:
                        sources = {row.trajectory: row.order for row in prog.kept_steps}
                        lanes.append(SharedLane(*args, shared=shared[key], sources=sources, **kwargs))
                    else:
                        lanes.append(Lane(*args, **kwargs))
                if on_start is not None:
                    on_start(len(recopied) + sum(lane.steps_left for lane in lanes))
                # Copies of the source rows a resume kept first: they need no request (ceb.pipeline.reuse).
                for row in recopied:
                    writer.write(row)
                    summary.count(row)
                    if on_row is not None:
                        on_row(row)
                await _run_lanes(lanes, config, writer, summary, on_row)
            outcome = "finished"
        except BaseExceptionGroup as group:
            # A lane or the writer failed and the task group wrapped it: surface our own error as itself.
            first = _first_ceb_error(group)
            if first is None:
                raise
            raise first from None
    except Exception as exc:
        outcome, error = "failed", str(exc)
        raise
    finally:
        # Banks first, without awaiting: under cancellation an await here would be cancelled too. A bank only
        # changes between trajectories, so what is saved is its state after the last completed trajectory.
        for lane in lanes:
            key = (lane.stream, lane.order, lane.method.name, lane.critic)
            saved = f"banks/{lane_name(key)}.json" if lane.method.use_bank else None
            if saved is not None:
                lane.bank.save(run_dir / saved)
            for order in lane.shared.orders if isinstance(lane, SharedLane) else [lane.order]:
                summary.banks.append(
                    BankSize(lane.stream, order, lane.method.name, lane.critic, records=len(lane.bank), path=saved)
                )
        summary.wall_s = time.perf_counter() - started
        if began:
            write_summary(run_dir, summary, outcome, error, started_at)
        if own_stages:
            with anyio.CancelScope(shield=True):
                for own in by_critic.values():
                    await own.__aexit__(None, None, None)
    return summary


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
    """Refuse a run in which a method needs an LLM endpoint its critic's backend does not have.

    Raises:
        ConfigError: Names the methods and the backend, and the two ways out.
    """
    for label, s in by_critic.items():
        lacking = [m.name for m in methods if lacks_endpoint(m, s)]
        if lacking:
            backend = critic_configs[label].backend.name
            raise ConfigError(
                f"{', '.join(lacking)} need{'s' if len(lacking) == 1 else ''} an LLM endpoint, and backend "
                f"{backend!r} has none: every step would be 'not available'. Use --backend openai, drop "
                f"{'it' if len(lacking) == 1 else 'them'} from methods, or set allow_unavailable = true to keep "
                f"the rows"
            )


async def _preflight(stages: Iterable[Stages]) -> None:
    """Preflight each distinct endpoint backend of ``stages`` once (:meth:`ChatBackend.preflight`)."""
    seen: set[int] = set()
    for s in stages:
        if s.chat is not None and id(s.chat) not in seen:
            seen.add(id(s.chat))
            await s.chat.preflight()


async def _unset_emit(row: Row) -> None:
    raise RuntimeError("lane started without an emit target")


def _first_ceb_error(group: BaseExceptionGroup[BaseException]) -> CEBError | None:
    for exc in group.exceptions:
        if isinstance(exc, CEBError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            inner = _first_ceb_error(exc)
            if inner is not None:
                return inner
    return None


async def _run_lanes(
    lanes: Sequence[Lane],
    config: RunConfig,
    writer: ResultWriter,
    summary: RunSummary,
    on_row: Callable[[Row], None] | None,
) -> None:
    send, receive = anyio.create_memory_object_stream[Row](max_buffer_size=1024)
    lane_slots = anyio.CapacityLimiter(config.max_active_lanes)
    budget = FailureBudget(config.fail_on_error)

    def take(row: Row) -> None:
        writer.write(row)
        summary.count(row)
        if on_row is not None:
            on_row(row)
        budget.check(summary, row)

    async def write_all() -> None:
        try:
            # Shielded: when the run is cancelled (Ctrl-C, a timeout) the lanes stop, close their senders, and
            # this loop ends at EndOfStream after writing every row they handed over.
            with anyio.CancelScope(shield=True):
                async with receive:
                    async for row in receive:
                        take(row)
        finally:
            # Cancelled or failed: rows already handed over by the lanes are finished work; write them too.
            while True:
                try:
                    row = receive.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                writer.write(row)
                summary.count(row)

    async def run_lane(lane: Lane, sender: ObjectSendStream[Row]) -> None:
        async with sender, lane_slots:
            await lane.run()

    # Longest remaining chain first, so the lanes that bound the makespan hold lane slots from the start.
    ordered = sorted(lanes, key=lambda lane: -lane.remaining)
    async with anyio.create_task_group() as tg:
        tg.start_soon(write_all)
        async with send:
            for lane in ordered:
                if lane.remaining <= 0:
                    continue
                sender = send.clone()
                lane.emit = sender.send
                tg.start_soon(run_lane, lane, sender)


class FailureBudget:
    """Stops a run whose failed steps pass ``fail_on_error``: a count (>= 1) or a fraction (< 1).

    A fraction is judged once at least :attr:`MIN_STEPS` steps are in, so one early failure cannot stop a run.
    """

    MIN_STEPS = 20

    def __init__(self, fail_on_error: float) -> None:
        self.fail_on_error = fail_on_error

    def check(self, summary: RunSummary, row: Row) -> None:
        """Raise :class:`RunError` when the budget is spent (naming the count and the last reason)."""
        failed, done = summary.steps_failed, summary.steps_failed + summary.steps_scored
        limit = self.fail_on_error
        over = failed > limit if limit >= 1 else done >= self.MIN_STEPS and failed > limit * done
        if over and isinstance(row, StepRow) and row.error is not None:
            raise RunError(
                f"stopping: {failed} of {done} steps failed (fail_on_error = {limit:g}); last failure in stream "
                f"{row.stream}, trajectory {row.trajectory}, step {row.step}: {row.error}. Finished rows are in "
                f"{summary.run_dir / 'scores.jsonl'}"
            )
