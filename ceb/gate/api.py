"""The live gate, :class:`Gate` and :class:`SyncGate`: Algorithm 1 one call at a time.

:meth:`Gate.score` (lines 4-7) gives ``z^_t`` with a decision (thresholds of :class:`~ceb.config.GateConfig`);
:meth:`Gate.finish` (lines 11-12) votes in hindsight and updates the bank. Both run
:func:`ceb.stages.step.score_step` and :func:`ceb.stages.step.label_trajectory`, as the batch lanes do, so replaying
a stream through the gate gives ``ceb score``'s scores and bank byte for byte (with a deterministic backend).

Each stream has its own bank. A score sees every update applied before its call (:attr:`Confidence.bank_version`);
accepted trajectories update the bank one at a time in ``seq`` order; hindsight runs outside the bank's lock.
With ``state_dir``, :meth:`Gate.accept` ``fsync``s the trajectory to the stream's inbox (:mod:`ceb.gate.inbox`)
before acknowledging, and the bank journal records each update with its ``seq``, so a restart (after ``kill -9``
too) loses no acknowledged trajectory and applies none twice; one gate per directory
(:meth:`StateDir.lock <ceb.gate.state.StateDir.lock>`). A retry of the same id with the same content
(:func:`~ceb.gate.inbox.fingerprint`) gets the first ``seq`` back and banks nothing; other content is a
:class:`~ceb.errors.DuplicateTrajectoryError`. Input is checked by the stream reader's rules
(:func:`~ceb.gate.types.check_finished`, :func:`~ceb.gate.types.check_context`). A failing critic is no exception:
the step gets ``gate.on_failure``; after ``gate.degraded_after`` failures in a row (:attr:`Gate.critic_health`) the
endpoint is only probed every ``gate.probe_every_s`` until it answers. Limits: ``gate.max_pending``
(:class:`~ceb.errors.OverloadedError`) and ``gate.max_streams`` (:class:`~ceb.errors.StreamLimitError`).

Example::

    async with Gate(load_config()) as gate:
        c = await gate.score("agent-1", StepContext("run-42", "list the files", "shell", Step("", "ls -la", "")))
        if c.decision == "allow":
            ...  # run the action
        await gate.finish("agent-1", finished_trajectory)
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup

from ceb.bank import Bank
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.errors import (
    BackendError,
    ConfigError,
    DuplicateTrajectoryError,
    FatalBackendError,
    OverloadedError,
    RunError,
    StreamLimitError,
    leaf_error,
)
from ceb.gate.health import CriticHealth
from ceb.gate.inbox import Accepted, fingerprint
from ceb.gate.state import StateDir
from ceb.gate.stream import GateStream, open_stream, work
from ceb.gate.types import (
    Banked,
    Confidence,
    Decision,
    Receipt,
    StepContext,
    check_context,
    check_finished,
    check_stream_name,
)
from ceb.logs import get_logger
from ceb.stages.assembly import Stages, build_critic, build_stages
from ceb.stages.base import Critic, CriticInput, CriticResult, HindsightResult, HistoryItem
from ceb.stages.methods import MethodSpec, resolve_method
from ceb.stages.step import precedents, score_step

__all__ = ["Gate", "SyncGate"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class _LiveCritic:
    """The gate's critic: an endpoint that refuses the request fails the step, as any other critic failure does."""

    inner: Critic

    async def score(self, inp: CriticInput) -> CriticResult:
        try:
            return await self.inner.score(inp)
        except FatalBackendError as exc:
            return CriticResult(score=None, raw="", error=f"endpoint refused the request: {exc}")


@dataclass(frozen=True, slots=True)
class _NotAsked:
    """The critic while the gate is degraded: not asked, so that the agent gets ``gate.on_failure`` at once."""

    reason: str

    async def score(self, inp: CriticInput) -> CriticResult:
        return CriticResult(score=None, raw="", error=f"critic not asked while degraded: {self.reason}")


class Gate:
    """Per-stream banks for live agents: :meth:`score` before an action, :meth:`finish` after a trajectory.

    An async context manager (closing the endpoint and files on exit); :class:`SyncGate` for synchronous code.

    Args:
        config: ``gate`` (method, thresholds), ``backend``, ``ceb``, ``bank``, ``prompts``; default
            :class:`~ceb.config.RunConfig` (offline).
        stages: Critic and hindsight; built from ``config`` (and closed on exit) when ``None``.
        state_dir: Each stream's inbox and bank journal (durable, resumed, locked while open); ``None``: in memory.

    Raises:
        ConfigError: The method is unknown or needs held-out labels, or the backend cannot be built.
        RunError: On entering: ``state_dir`` is held by another process, or cannot be created, written or read.
    """

    def __init__(
        self, config: RunConfig | None = None, *, stages: Stages | None = None, state_dir: str | Path | None = None
    ) -> None:
        self.config = config if config is not None else RunConfig()
        self.method: MethodSpec = resolve_method(self.config.gate.method)
        if self.method.oracle_labels:
            raise ConfigError(f"method {self.method.name} needs held-out labels; a live gate has none")
        self.state_dir = Path(state_dir) if state_dir is not None else None
        self._state = StateDir(self.state_dir, self.config.gate.fsync) if self.state_dir is not None else None
        self._given_stages = stages
        self._stages: Stages | None = stages
        self._streams: dict[str, GateStream] = {}
        self._opening = anyio.Lock()
        self._tg: TaskGroup | None = None
        self._probing: anyio.CancelScope | None = None
        self._exit: AsyncExitStack | None = None
        self.started = time.time()
        self.critic_health = CriticHealth(None, self.config.gate.degraded_after)
        """Whether the critic answers: consecutive failed steps, the start-up check (:mod:`ceb.gate.health`)."""

    # -- lifecycle ---------------------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Take the state directory (lock, write check), build the stages and restore every stream on disk.

        Raises:
            RunError: Another gate holds the state directory (the message names it and that process's id), or the
                directory or a stream's files in it cannot be created, written or read.
            ConfigError: The backend cannot be built.
        """
        async with AsyncExitStack() as stack:
            if self._state is not None:
                stack.enter_context(self._state.lock())
                self._state.check_usable()
            if self._stages is None:
                self._stages = build_stages(self.config)
                await stack.enter_async_context(self._stages)
            self.critic: Critic = _LiveCritic(build_critic(self.method, self.config, self._stages))
            self.critic_health.endpoint = self._stages.chat.endpoint if self._stages.chat is not None else None
            stack.push_async_callback(self._close_files)
            self._tg = await stack.enter_async_context(anyio.create_task_group())
            stack.push_async_callback(self._stop_workers)
            if self._stages.chat is not None:
                self._probing = anyio.CancelScope()
                self._tg.start_soon(self._probe, self._probing)
            self._exit = stack.pop_all()
        try:
            await self._restore()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _restore(self) -> None:
        if self._state is None:
            return
        for name in self._state.streams():
            # Recover: replay what was acknowledged and never applied. Every stream on disk comes back,
            # even beyond gate.max_streams (they hold acknowledged trajectories); new ones are refused.
            try:
                await self._stream(name, restoring=True)
            except OSError as exc:
                where = f"{exc.filename}: " if exc.filename else ""
                raise RunError(
                    f"cannot use {self._state.path} as a gate state directory: stream {name}: {where}"
                    f"{exc.strerror or exc}"
                ) from None
        if len(self._streams) > self.config.gate.max_streams:
            log.warning(
                "more streams in the state directory than gate.max_streams; no new stream will be opened",
                streams=len(self._streams),
                max_streams=self.config.gate.max_streams,
            )

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the workers, close the files and the endpoint, release the state directory.

        An error raised in the block, or by a worker, leaves as itself: not wrapped in the task group's
        ``ExceptionGroup`` (a group stays a group only when it holds several errors).
        """
        assert self._exit is not None
        try:
            await self._exit.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            problem = leaf_error(group)
            if problem is group:
                raise
        else:
            return
        raise problem  # outside the except block: no "during handling" chain onto the group it came in

    async def _probe(self, scope: anyio.CancelScope) -> None:
        """While degraded, check the critic endpoint every ``gate.probe_every_s``; the first pass ends it."""
        with scope:
            while True:
                await anyio.sleep(self.config.gate.probe_every_s)
                if self.critic_health.degraded and await self.check_critic() is None:
                    log.info("the critic answers again", endpoint=self.critic_health.endpoint)
                    self.critic_health.scored()

    async def _stop_workers(self) -> None:
        if self._probing is not None:
            self._probing.cancel()
        if self.state_dir is None:
            # In memory only: what was accepted must reach its bank before the gate goes away.
            for st in self._streams.values():
                await st.send.aclose()
        else:
            # Durable: the workers stop now; what they had not applied is in the inbox and resumes next time.
            for st in self._streams.values():
                st.send.close()
            assert self._tg is not None
            self._tg.cancel_scope.cancel()

    async def _close_files(self) -> None:
        for st in self._streams.values():
            if st.journal is not None:
                st.journal.close()
            if st.inbox is not None:
                st.inbox.close()

    # -- streams -----------------------------------------------------------------------------------------------

    @property
    def streams(self) -> list[str]:
        """The streams the gate holds, in the order they were first seen."""
        return list(self._streams)

    def bank(self, stream: str) -> Bank:
        """The bank of ``stream`` (read it; update it only through :meth:`finish`).

        Raises:
            KeyError: The gate has not seen the stream.
        """
        return self._streams[stream].bank

    async def _stream(self, name: str, *, restoring: bool = False) -> GateStream:
        st = self._streams.get(name)
        if st is not None:
            return st
        check_stream_name(name)
        async with self._opening:
            st = self._streams.get(name)
            if st is None:
                limit = self.config.gate.max_streams
                if not restoring and len(self._streams) >= limit:
                    raise StreamLimitError(name, len(self._streams), limit)
                st = await anyio.to_thread.run_sync(open_stream, name, self.method, self.config, self._state)
                self._streams[name] = st
                assert self._tg is not None and self._stages is not None
                hindsight = self._stages.hindsight
                self._tg.start_soon(work, st, self.method, self.config, hindsight, name=f"gate worker {name}")
                for entry in st.pending.values():
                    st.done[entry.seq] = anyio.Event()
                    st.send.send_nowait(entry)
                if st.pending:
                    log.info("replaying accepted trajectories", stream=name, count=len(st.pending))
        return st

    # -- scoring -----------------------------------------------------------------------------------------------

    async def score(self, stream: str, context: StepContext) -> Confidence:
        """Score a proposed action before it runs (Algorithm 1, lines 4-7; Eq. 2 and 6).

        The history carries the scores this gate gave those steps (by ``trajectory_id`` and position); scoring a step
        again replaces its remembered score.

        Returns:
            The confidence and decision. A critic failure (endpoint down, or refusing the request) is ``score=None``,
            ``gate.on_failure``, counted in :attr:`critic_health`; while degraded the endpoint is not asked.

        Raises:
            DataError: ``stream`` is not a valid name (:data:`STREAM_NAME`), or ``context`` breaks
                :func:`~ceb.gate.types.check_context` (names the field).
            StreamLimitError: ``stream`` is new and the gate holds ``gate.max_streams`` streams.
        """
        began = time.perf_counter()
        check_stream_name(stream)
        check_context(context)
        st = await self._stream(stream)
        t = len(context.history)
        remembered = st.open.get(context.trajectory_id, {})
        history = [
            HistoryItem(action=s.action, observation=s.observation, score=remembered.get(i))
            for i, s in enumerate(context.history)
        ]
        health = self.critic_health
        asked = self._probing is None or not health.degraded  # else the probe, not the agent, waits for it
        done = await score_step(
            step=replace(context.proposal, label=None, reward=None),
            t=t,
            task=context.task,
            domain=context.domain,
            history=history,
            bank=st.bank,
            method=self.method,
            config=self.config,
            critic=self.critic if asked else _NotAsked(f"{health.reason()}; last error: {health.last_error}"),
            actor_prompt=context.actor_prompt,
            bank_lock=st.bank_lock,
            bank_version=lambda: st.applied,
        )
        res = done.result
        if asked and res.status == "failed":
            log.warning("critic step failed", stream=stream, trajectory=context.trajectory_id, step=t, error=res.error)
            was = health.degraded
            health.failed(res.error)
            if not was and health.degraded:
                log.error("the critic keeps failing; /health says degraded", reason=health.reason())
        elif asked and res.status == "scored":
            if health.degraded:
                log.info("the critic answers again", endpoint=health.endpoint)
            health.scored()
        st.remember(context.trajectory_id, t, res.score, self.config.gate.max_open_trajectories)
        st.scored += 1
        return Confidence(
            stream=stream,
            trajectory_id=context.trajectory_id,
            step=t,
            score=res.score,
            decision=self.decide(res.score),
            status=res.status,
            error=res.error,
            precedents=tuple(precedents(done.retrieval)),
            repetition_flag=done.repetition_flag,
            bank_version=done.bank_version,
            bank_size=done.bank_size,
            latency_s=time.perf_counter() - began,
            critic_s=done.critic_s,
            retrieval_s=done.retrieval_s,
        )

    def decide(self, score: float | None) -> Decision:
        """The decision for ``score`` at the thresholds of ``config.gate``."""
        g = self.config.gate
        if score is None:
            return g.on_failure
        return "allow" if score >= g.allow else "block" if score < g.block else "review"

    # -- finishing ---------------------------------------------------------------------------------------------

    async def accept(self, stream: str, trajectory: Trajectory) -> Receipt:
        """Accept a finished trajectory for hindsight and a bank update; return once it is durable.

        With ``state_dir`` the blinded trajectory and its scores are fsynced to the inbox first, else queued in memory;
        hindsight follows in the background in ``seq`` order (:meth:`wait`). The same id with the same content (after
        blinding) returns the first receipt again (``replayed``), even after a restart or with the stream full.

        Returns:
            ``seq`` (from 1) and whether this was a replay.

        Raises:
            DataError: ``stream`` is not a valid name, or the trajectory breaks :func:`~ceb.gate.types.check_finished`.
            StreamLimitError: ``stream`` is new and the gate holds ``gate.max_streams`` streams.
            DuplicateTrajectoryError: The id was accepted before with other content (HTTP 409).
            OverloadedError: ``gate.max_pending`` trajectories of the stream are waiting (retry later).
            OSError: The inbox cannot be written (``ENOSPC``: HTTP 507); nothing of it stays in the inbox.
        """
        blind = replace(trajectory.blinded(), source="")
        check_stream_name(stream)
        check_finished(blind)
        st = await self._stream(stream)
        fp = fingerprint(blind)
        async with st.accept_lock:  # seq order == inbox order == queue order; one id, one seq
            first = st.known.get(blind.id)
            if first is not None:
                if first[1] != fp:
                    raise DuplicateTrajectoryError(stream, blind.id, first[0])
                st.replayed += 1
                log.info("trajectory sent again; acknowledged once", stream=stream, trajectory=blind.id, seq=first[0])
                return Receipt(first[0], replayed=True)
            if len(st.pending) >= self.config.gate.max_pending:
                raise OverloadedError(stream, len(st.pending))
            remembered = st.open.get(blind.id, {})
            scores = tuple(remembered.get(t) for t in range(len(blind.steps)))
            entry = Accepted(seq=st.next_seq, trajectory=blind, scores=scores, fingerprint=fp)
            if st.inbox is not None:
                await anyio.to_thread.run_sync(st.inbox.append, entry)
            st.open.pop(blind.id, None)
            st.known[blind.id] = (entry.seq, fp)
            st.next_seq += 1
            st.pending[entry.seq] = entry
            st.done[entry.seq] = anyio.Event()
            st.send.send_nowait(entry)
        return Receipt(entry.seq, replayed=False)

    async def wait(self, stream: str, seq: int) -> Banked:
        """Wait until accepted trajectory ``seq`` of ``stream`` is in the bank, and return what it did there.

        Raises:
            KeyError: ``seq`` is not pending and its result is not kept (the last 256 applied, and any awaited).
        """
        st = self._streams[stream]
        event = st.done.get(seq)
        if event is None and seq not in st.results:
            raise KeyError(f"stream {stream}: accepted trajectory {seq} is neither pending nor among the results kept")
        st.waiting[seq] = st.waiting.get(seq, 0) + 1
        try:
            if event is not None:
                await event.wait()
            return st.results[seq]
        finally:
            st.waiting[seq] -= 1
            if not st.waiting[seq]:
                del st.waiting[seq]

    async def finish(self, stream: str, trajectory: Trajectory) -> Banked:
        """:meth:`accept` then :meth:`wait`: hindsight votes and the bank update (Eq. 3).

        A replay returns a :class:`Banked` with ``replayed`` set (the first result if kept, else no votes).

        Raises:
            DataError, StreamLimitError, DuplicateTrajectoryError, OverloadedError, OSError: As :meth:`accept`.
        """
        receipt = await self.accept(stream, trajectory)
        st = self._streams[stream]
        if not receipt.replayed:
            return await self.wait(stream, receipt.seq)
        if receipt.seq in st.done or receipt.seq in st.results:
            return replace(await self.wait(stream, receipt.seq), replayed=True)
        # Banked before this gate started, or its result is no longer kept: nothing to wait for, nothing to add.
        return Banked.from_result(
            HindsightResult(votes=(), soft_votes=(), pseudo_labels=()),
            stream=stream,
            trajectory_id=trajectory.id,
            seq=receipt.seq,
            records_added=0,
            bank_version=st.applied,
            bank_size=len(st.bank),
            hindsight_s=0.0,
            replayed=True,
        )

    async def flush(self, stream: str | None = None) -> None:
        """Wait until every trajectory accepted so far (on ``stream``, or on every stream) is in its bank."""
        for st in [self._streams[stream]] if stream is not None else list(self._streams.values()):
            for seq in list(st.pending):
                event = st.done.get(seq)
                if event is not None:
                    await event.wait()

    async def check_critic(self) -> str | None:
        """Preflight the critic's endpoint once (``gate.check_timeout_s``); a failure degrades :attr:`critic_health`.

        Returns:
            Why the endpoint cannot serve (naming it), else ``None`` (also on a backend without a model).
        """
        assert self._stages is not None
        if self._stages.chat is None:
            return None
        timeout = self.config.gate.check_timeout_s
        problem: str | None = None
        try:
            with anyio.fail_after(timeout):
                for chat in self._stages.endpoints:
                    await chat.preflight()
        except TimeoutError:
            problem = f"{self.critic_health.endpoint} did not answer within {timeout:g} s (gate.check_timeout_s)"
        except BackendError as exc:
            problem = str(exc)
        if problem is not None:
            self.critic_health.probe_failed(problem)
        return problem

    async def state_problem(self) -> str | None:
        """Why the gate cannot write its state directory now (probe file), else ``None`` (always in memory)."""
        if self._state is None:
            return None
        return await anyio.to_thread.run_sync(self._state.problem)

    # -- statistics --------------------------------------------------------------------------------------------

    def stats(self, stream: str | None = None) -> dict[str, Any]:
        """Per stream: records (``B+`` / ``B-``), version, pending updates, replays, scored steps.

        Raises:
            KeyError: The gate has not seen ``stream``.
        """
        chosen = [self._streams[stream]] if stream is not None else list(self._streams.values())
        return {"method": self.method.name, "streams": {st.name: st.stats() for st in chosen}}


class SyncGate:
    """:class:`Gate` for synchronous code (a context manager, same arguments), over a loop in a worker thread."""

    def __init__(
        self, config: RunConfig | None = None, *, stages: Stages | None = None, state_dir: str | Path | None = None
    ) -> None:
        self.gate = Gate(config, stages=stages, state_dir=state_dir)
        self._stack: Any = None

    def __enter__(self) -> Self:
        stack = ExitStack()
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
        stack.enter_context(portal.wrap_async_context_manager(self.gate))
        self._portal = portal
        self._stack = stack
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.__exit__(exc_type, exc, tb)

    def score(self, stream: str, context: StepContext) -> Confidence:
        """:meth:`Gate.score`, blocking."""
        return self._portal.call(self.gate.score, stream, context)

    def accept(self, stream: str, trajectory: Trajectory) -> Receipt:
        """:meth:`Gate.accept`, blocking."""
        return self._portal.call(self.gate.accept, stream, trajectory)

    def finish(self, stream: str, trajectory: Trajectory) -> Banked:
        """:meth:`Gate.finish`, blocking."""
        return self._portal.call(self.gate.finish, stream, trajectory)

    def flush(self, stream: str | None = None) -> None:
        """:meth:`Gate.flush`, blocking."""
        self._portal.call(self.gate.flush, stream)

    def stats(self, stream: str | None = None) -> dict[str, Any]:
        """:meth:`Gate.stats`."""
        return self._portal.call(_sync, self.gate.stats, stream)

    def bank(self, stream: str) -> Bank:
        """:meth:`Gate.bank`."""
        return self.gate.bank(stream)


async def _sync(fn: Any, *args: Any) -> Any:
    return fn(*args)
