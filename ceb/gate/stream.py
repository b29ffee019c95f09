"""One stream of the live gate: its bank, its queue of accepted trajectories, and the worker that banks them.

Accepted trajectories update the bank one at a time, in the order they were accepted (their ``seq``); the
hindsight runs outside the bank's lock, so scoring never waits for an LLM's votes. A hindsight that raises is
retried (the order is kept: an accepted trajectory is never skipped).
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ceb.bank import RETRIEVERS, Bank, BankJournal
from ceb.config import RunConfig
from ceb.gate.inbox import Accepted, Inbox, Known
from ceb.gate.state import StateDir
from ceb.gate.types import Banked
from ceb.logs import get_logger
from ceb.stages.base import Hindsight
from ceb.stages.methods import MethodSpec
from ceb.stages.step import label_trajectory, new_bank

__all__ = ["GateStream", "compact_inbox", "open_stream", "work"]

log = get_logger(__name__)

_RETRY_S = (0.5, 30.0)
"""First and longest wait, in seconds, before a stream retries a bank update whose hindsight raised."""

_KEPT_RESULTS = 256
"""Results of applied updates kept for a late :meth:`~ceb.gate.Gate.wait` (those awaited are always kept)."""

_COMPACT_LINES = 1024
"""Inbox lines from which applied ones are dropped (when they are more than half of the file)."""


@dataclass(eq=False)
class GateStream:
    """One stream's bank, its files (with a state directory), and its queue of accepted trajectories.

    Attributes:
        applied: ``seq`` of the last update applied (the bank's version); ``next_seq`` the next one given.
        results: ``seq`` -> :class:`~ceb.gate.types.Banked`, for the last few and those awaited.
        known: Trajectory id -> (``seq``, fingerprint) of every accepted trajectory.
        open: Trajectory id -> step -> the gate's score, for unfinished trajectories (oldest first).
        accept_lock: Held while accepting, so inbox and queue share one ``seq`` order.
        last_error: The last hindsight failure still being retried.
    """

    name: str
    bank: Bank
    journal: BankJournal | None
    inbox: Inbox | None
    send: MemoryObjectSendStream[Accepted]
    receive: MemoryObjectReceiveStream[Accepted]
    applied: int = 0
    next_seq: int = 1
    pending: OrderedDict[int, Accepted] = field(default_factory=OrderedDict)
    done: dict[int, anyio.Event] = field(default_factory=dict)
    results: dict[int, Banked] = field(default_factory=dict)
    waiting: dict[int, int] = field(default_factory=dict)
    known: Known = field(default_factory=dict)
    replayed: int = 0
    open: OrderedDict[str, dict[int, float | None]] = field(default_factory=OrderedDict)
    bank_lock: anyio.Lock = field(default_factory=anyio.Lock)
    accept_lock: anyio.Lock = field(default_factory=anyio.Lock)
    reasons_seen: set[str] = field(default_factory=set)
    scored: int = 0
    last_error: str | None = None

    def remember(self, trajectory_id: str, t: int, score: float | None, max_open: int) -> None:
        """Keep the score given to step ``t`` of an unfinished trajectory; forget the oldest past ``max_open``."""
        scores = self.open.get(trajectory_id)
        if scores is None:
            scores = self.open[trajectory_id] = {}
            while len(self.open) > max_open:
                gone, _ = self.open.popitem(last=False)
                log.warning("forgetting the scores of an unfinished trajectory", stream=self.name, trajectory=gone)
        else:
            self.open.move_to_end(trajectory_id)
        scores[t] = score

    def stats(self) -> dict[str, Any]:
        """The stream's entry of :meth:`~ceb.gate.Gate.stats`."""
        n, pos = len(self.bank), self.bank.n_positive
        return {
            "records": n,
            "positive": pos,
            "negative": n - pos,
            "bank_version": self.applied,
            "accepted": self.next_seq - 1,
            "pending": len(self.pending),
            "replayed": self.replayed,
            "open_trajectories": len(self.open),
            "scored_steps": self.scored,
            "last_error": self.last_error,
            "durable": self.inbox is not None,
        }


def open_stream(name: str, method: MethodSpec, config: RunConfig, state: StateDir | None) -> GateStream:
    """A stream with an empty bank (in memory), or as its state directory left it, its unapplied entries pending.

    Raises:
        OSError: A file of the stream cannot be created or read.
        RunError: Its inbox is damaged before its last line (names file and line).
    """
    if state is None:
        send, receive = anyio.create_memory_object_stream[Accepted](max_buffer_size=math.inf)
        return GateStream(name, new_bank(method, config), None, None, send, receive)
    resolved = method.resolve(config.ceb)
    files = state.open(
        name,
        RETRIEVERS.get(resolved.retriever)(),
        config.bank.for_k(resolved.k),
        snapshot_every=config.gate.snapshot_every,
    )
    send, receive = anyio.create_memory_object_stream[Accepted](max_buffer_size=math.inf)  # once nothing can fail
    journal = files.journal
    applied = journal.mark if isinstance(journal.mark, int) else 0
    st = GateStream(name, journal.bank, journal, files.inbox, send, receive, applied=applied, known=files.known)
    st.next_seq = max([applied, *(e.seq for e in files.entries)]) + 1
    for e in files.entries:
        if e.seq > applied:
            st.pending[e.seq] = e
    return st


async def work(st: GateStream, method: MethodSpec, config: RunConfig, hindsight: Hindsight) -> None:
    """Bank every trajectory ``st`` receives, in order, until its queue closes; compact its inbox as it goes."""
    async with st.receive:
        async for entry in st.receive:
            await _apply(st, entry, method, config, hindsight)
            try:
                await compact_inbox(st)
            except OSError as exc:  # the inbox stays valid, only longer: say so and go on
                log.error("inbox compaction failed", stream=st.name, error=str(exc))


async def _apply(st: GateStream, entry: Accepted, method: MethodSpec, config: RunConfig, hindsight: Hindsight) -> None:
    began = time.perf_counter()
    wait = _RETRY_S[0]
    while True:
        try:
            banked = await label_trajectory(
                entry.trajectory,
                entry.scores,
                method=method,
                config=config,
                hindsight=hindsight,
                reasons_seen=st.reasons_seen,
                stream=st.name,
            )
            break
        except Exception as exc:  # an accepted trajectory must not be skipped: retry it, keeping the order
            st.last_error = f"{type(exc).__name__}: {exc}"
            log.error(
                "hindsight failed; retrying",
                stream=st.name,
                trajectory=entry.trajectory.id,
                seq=entry.seq,
                error=st.last_error,
                wait_s=wait,
            )
            await anyio.sleep(wait)
            wait = min(2 * wait, _RETRY_S[1])
    st.last_error = None
    hindsight_s = time.perf_counter() - began
    # The update, its journal line and the version move together even if the gate is being cancelled. A
    # failure to write the journal is not retried (the bank in memory already holds the update): it stops
    # the gate, since it could no longer keep its promise of durability.
    with anyio.CancelScope(shield=True):
        async with st.bank_lock:
            if st.journal is not None:
                journal = st.journal
                await anyio.to_thread.run_sync(lambda: journal.add_trajectory(banked.records, mark=entry.seq))
            else:
                await anyio.to_thread.run_sync(st.bank.add_trajectory, banked.records)
            st.applied = entry.seq
    st.results[entry.seq] = Banked.from_result(
        banked.hindsight,
        stream=st.name,
        trajectory_id=entry.trajectory.id,
        seq=entry.seq,
        records_added=len(banked.records),
        bank_version=entry.seq,
        bank_size=len(st.bank),
        hindsight_s=hindsight_s,
    )
    del st.pending[entry.seq]
    st.done.pop(entry.seq).set()
    # Nobody waits for most results (the service acknowledges on accept): keep the last few and those awaited.
    for seq in [q for q in st.results if q not in st.waiting][:-_KEPT_RESULTS]:
        del st.results[seq]


async def compact_inbox(st: GateStream) -> None:
    """Drop the applied lines of the stream's inbox once they are most of it."""
    inbox = st.inbox
    if inbox is None or inbox.lines < _COMPACT_LINES or inbox.lines <= 2 * len(st.pending):
        return
    async with st.accept_lock:
        pending = list(st.pending.values())
        await anyio.to_thread.run_sync(inbox.compact, pending)
