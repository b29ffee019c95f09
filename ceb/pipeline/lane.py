"""One lane = one method over one stream, in stream order (Algorithm 1).

Step ``t``'s prompt holds the critic's own score of step ``t-1``, and trajectory ``j+1`` is scored against the bank
holding trajectory ``j``'s votes. With ``speculation = D`` trajectories ``j+1..j+D`` are scored ahead, their votes
asked at once (votes read no score). A trajectory ahead retrieves from the bank the strict order will give it: a
copy of the lane's bank grown with its predecessors' records as their votes made them (:meth:`Lane._future`); a
precedent from a trajectory not scored yet waits for that step's score, the one thing of it a request shows. So a
step ahead waits only for what its request reads (its own trajectory's earlier scores, and the scores of the
precedents it retrieves), not for the whole of the trajectories before it. A step scored ahead is still kept only
when its request equals the strict order's, and from the first that differs the trajectory is asked again; only
kept and strict rows are emitted, so results read as the strict order's, and the rest is counted in
:attr:`Lane.discarded`. No speculation for a critic that sends no request, nor for a bank that retrieval changes
(``bank.policy = "usefulness"``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import NamedTuple

import anyio

from ceb.backends.scheduling import lane as request_lane
from ceb.backends.scheduling import step as request_step
from ceb.bank import Bank, Hit, Retrieval
from ceb.bank.record import BankRecord, agreement_flag
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.logs import get_logger
from ceb.pipeline.results import AltLabel, HindsightRow, StepRow
from ceb.pipeline.shard import lane_id
from ceb.stages.assembly import Stages
from ceb.stages.base import CallStats, Critic, CriticInput, HindsightResult, HistoryItem
from ceb.stages.critic import reply_tails
from ceb.stages.methods import MethodSpec
from ceb.stages.step import (
    PreparedStep,
    ScoredStep,
    ask_critic,
    bank_records,
    hindsight_votes,
    label_trajectory,
    new_bank,
    prepare_step,
)
from ceb.stages.tokens import PromptTokenCounter

__all__ = ["Emit", "Lane"]

Emit = Callable[[StepRow | HindsightRow], Awaitable[None]]

log = get_logger(__name__)


def alt_labels(trajectory: Trajectory) -> dict[str, list[int | None]]:
    """``meta["alt_labels"]`` of ``trajectory`` (name -> one 0 / 1 / null per step); a malformed column is skipped."""
    raw = trajectory.meta.get("alt_labels")
    if not isinstance(raw, dict):
        return {}
    out: dict[str, list[int | None]] = {}
    for name, ys in raw.items():
        if isinstance(ys, list) and len(ys) == len(trajectory.steps) and all(y in (0, 1, None) for y in ys):
            out[str(name)] = [None if y is None else int(y) for y in ys]
        else:
            log.warning("ignoring a malformed alt_labels column", trajectory=trajectory.id, column=name)
    return out


class _Ahead:
    """A trajectory scored ahead of its bank: each step's request as sent and the answer, in step order."""

    def __init__(self) -> None:
        self.sent: list[PreparedStep] = []
        self.answered: list[ScoredStep] = []
        self.kept = 0
        self.finished = False
        self.dropped = False
        self._change = anyio.Event()

    def changed(self) -> None:
        """Wake whoever waits on this trajectory."""
        self._change.set()
        self._change = anyio.Event()

    async def request(self, t: int) -> PreparedStep | None:
        """Step ``t``'s request once it is sent; ``None`` when the trajectory stopped before it."""
        while len(self.sent) <= t and not self.finished:
            await self._change.wait()
        return self.sent[t] if len(self.sent) > t else None

    async def answer(self, t: int) -> ScoredStep | None:
        """Step ``t``'s answer once it is in; ``None`` when it failed or never came."""
        while len(self.answered) <= t and not self.finished:
            await self._change.wait()
        done = self.answered[t] if len(self.answered) > t else None
        return done if done is not None and done.result.status != "failed" else None


class _Votes:
    """A trajectory's hindsight votes, asked before its steps are scored."""

    def __init__(self) -> None:
        self.result: HindsightResult | None = None
        self.done = anyio.Event()


class _Scores:
    """A trajectory's scores as the strict order settles them, in step order."""

    def __init__(self) -> None:
        self.values: list[float | None] = []
        self._change = anyio.Event()

    def add(self, score: float | None) -> None:
        """Settle the next step's score."""
        self.values.append(score)
        self._change.set()
        self._change = anyio.Event()

    async def get(self, t: int) -> float | None:
        """Step ``t``'s score once settled."""
        while len(self.values) <= t:
            await self._change.wait()
        return self.values[t]


class _Future(NamedTuple):
    """A bank ahead: as of ``version`` (a count of the lane's updates); ``pending``: positions lacking scores."""

    bank: Bank
    version: int
    pending: frozenset[int] = frozenset()


class Lane:
    """Scores one stream with one method and keeps that lane's bank (Algorithm 1).

    Args:
        trajectories: The stream, in order, as read (blinded here before any stage sees them).
        emit: Receives each result row as soon as it exists.
        bank: The lane's bank; a new empty one when ``None``.
        order: The stream order (0: the files'), copied into the rows, as is ``critic``.
        start: Position of the first trajectory to score (a resume: the bank holds the earlier ones).
        prefix: Scores of trajectory ``start``'s first steps, scored before a resume.
        critic_stage: The stage that scores (a baseline's); ``stages.critic`` when ``None``.
        tokens: Counts the LLM critic's prompt tokens into the rows; ``None`` (or a baseline) leaves them out.

    Attributes:
        remaining: Sequential requests left (steps, plus one hindsight round per trajectory with a bank): the
            priority of the lane's requests (:mod:`ceb.backends.scheduling`).
        key: The lane id its requests carry (:func:`ceb.backends.scheduling.lane`): home replica, session, shard.
        depth: Trajectories scored ahead of the bank (``speculation``, or 0; module docstring).
        discarded: Cost of the calls scored ahead and discarded (in-flight ones finish; interrupted ones are not
            counted).
    """

    def __init__(
        self,
        stream: str,
        method: MethodSpec,
        trajectories: Sequence[Trajectory],
        stages: Stages,
        config: RunConfig,
        emit: Emit,
        bank: Bank | None = None,
        *,
        order: int = 0,
        critic: str = "",
        start: int = 0,
        prefix: Sequence[float | None] = (),
        critic_stage: Critic | None = None,
        tokens: PromptTokenCounter | None = None,
    ) -> None:
        self.stream = stream
        self.method = method
        self.trajectories = trajectories
        self.stages = stages
        self.config = config
        self.emit = emit
        self.bank = bank if bank is not None else new_bank(method, config)
        self.critic_stage = critic_stage or stages.critic
        self.tokens = tokens if method.uses_llm_critic else None
        self._unavailable_seen: set[str] = set()
        self._abstentions_seen: set[str] = set()
        self.order = order
        self.critic = critic
        self.position = start
        self.key = lane_id((stream, order, method.name, critic))
        self.prefix = tuple(prefix)
        self.remaining = sum(len(t.steps) + method.use_bank for t in trajectories[start:]) - len(self.prefix)
        self.steps_left = sum(len(t.steps) for t in trajectories[start:]) - len(self.prefix)
        if method.oracle_labels and not method.use_bank:
            raise ValueError(f"method {method.name}: oracle labels need a bank")
        # Only requests are worth asking ahead, and only a bank that a retrieval leaves unchanged can be read ahead.
        self._messages: Callable[[CriticInput], object] | None = getattr(self.critic_stage, "messages", None)
        read_only = self.bank.settings.policy != "usefulness"
        # A bank ahead finds a precedent's trajectory by its id, so a stream that repeats one is scored strictly.
        unique = len({t.id for t in trajectories}) == len(trajectories)
        self.depth = config.speculation if method.use_bank and self._messages and read_only and unique else 0
        self.discarded, self.steps_discarded, self.steps_kept_ahead = CallStats(), 0, 0
        self._ahead: dict[int, _Ahead] = {}
        self._votes: dict[int, _Votes] = {}
        self._scores: dict[int, _Scores] = {}
        # Position -> its bank ahead when grown from the lane's by one trajectory; _grow_bank adopts (pops) it.
        self._next_banks: dict[int, Bank] = {}
        self._index = {t.id: i for i, t in enumerate(trajectories)}  # trajectory id -> position
        self._start = start
        self._bank_lock = anyio.Lock() if self.depth else None
        self._version = 0  # bank updates so far: a request sent at the current one is the strict order's
        self._tail = [0] * (len(trajectories) + 1)  # sequential requests from each trajectory on (priorities)
        for i in range(len(trajectories) - 1, -1, -1):
            self._tail[i] = self._tail[i + 1] + len(trajectories[i].steps) + method.use_bank

    async def run(self) -> None:
        """Score every trajectory of the stream in order, from position ``start`` on.

        Critic replies finishing in the background (``critic.early_score``) run in this lane's task group.
        """
        async with anyio.create_task_group() as tails:
            with reply_tails(tails):
                try:
                    while self.position < len(self.trajectories):
                        for i in range(self.position, min(self.position + 1 + self.depth, len(self.trajectories))):
                            if self.depth and i not in self._votes:  # they read no score: asked at once
                                self._votes[i] = _Votes()
                                tails.start_soon(self._vote, i, self._votes[i])
                            if i > self.position and i not in self._ahead:
                                self._ahead[i] = _Ahead()
                                tails.start_soon(self._score_ahead, i, self._ahead[i])
                        prefix, self.prefix = self.prefix, ()
                        await self.score_trajectory(self.trajectories[self.position], prefix)
                        self.position += 1
                        self._forget()
                finally:
                    for i in list(self._ahead):
                        self._drop(i)

    def _forget(self) -> None:
        """Drop the votes and settled scores no bank ahead reads (it holds at most ``depth`` trajectories more)."""
        for p in [p for p in self._votes if p < self.position]:
            del self._votes[p]
        for p in [p for p in self._scores if p < self.position - self.depth - 1]:
            del self._scores[p]

    async def score_trajectory(self, trajectory: Trajectory, prefix: Sequence[float | None] = ()) -> None:
        """Score each step before it "runs", then (bank methods) vote in hindsight and grow the bank.

        Uses :func:`~ceb.stages.step.prepare_step`, :func:`~ceb.stages.step.ask_critic` and
        :func:`~ceb.stages.step.label_trajectory`, as the live gate does; steps in ``prefix`` (a resume's) are skipped.
        """
        labels = trajectory.labels  # evaluation only: copied into the result rows, never into a stage
        alt = alt_labels(trajectory)
        blind = trajectory.blinded()
        actor_prompt = _actor_prompt(trajectory)
        history: list[HistoryItem] = []
        scores: list[float | None] = []
        settled = self._scores.setdefault(self.position, _Scores()) if self.depth else None
        for t, step in enumerate(blind.steps):
            if t < len(prefix):
                scores.append(prefix[t])
                if settled is not None:
                    settled.add(prefix[t])
                history.append(HistoryItem(action=step.action, observation=step.observation, score=prefix[t]))
                continue
            done = await self._kept_ahead(blind, t, history, actor_prompt)
            if done is None:
                prepared = await self._prepare(blind, t, history, actor_prompt)
                with request_lane(self.key), request_step(blind.id, t):
                    done = await ask_critic(
                        prepared, self.critic_stage, tokens=self.tokens, request_priority=self.remaining
                    )
            res = done.result
            self.remaining -= 1
            if res.status == "not_available" and res.error is not None:
                # Not a failure, and the same for most steps of a lane: said once per lane and reason.
                if res.error not in self._unavailable_seen:
                    self._unavailable_seen.add(res.error)
                    log.info("method not available here", stream=self.stream, method=self.method.name, reason=res.error)
            elif res.status == "failed":
                log.warning(
                    "critic step failed",
                    stream=self.stream,
                    method=self.method.name,
                    trajectory=blind.id,
                    step=t,
                    error=res.error,
                )
            scores.append(res.score)
            if settled is not None:
                settled.add(res.score)
            history.append(HistoryItem(action=step.action, observation=step.observation, score=res.score))
            await self.emit(
                StepRow.from_step(
                    done,
                    stream=self.stream,
                    method=self.method.name,
                    trajectory=blind.id,
                    label=labels[t],
                    order=self.order,
                    position=self.position,
                    critic=self.critic,
                    alt_labels=[AltLabel(name=name, label=ys[t]) for name, ys in sorted(alt.items())],
                )
            )
        self._drop(self.position)
        if self.method.use_bank:
            await self._grow_bank(blind, scores, labels)

    async def _prepare(
        self,
        blind: Trajectory,
        t: int,
        history: Sequence[HistoryItem],
        actor_prompt: str | None,
        future: _Future | None = None,
    ) -> PreparedStep:
        """Step ``t``'s request on the lane's bank, or on ``future`` with its pending precedents' scores filled in."""
        prepared = await prepare_step(
            step=blind.steps[t],
            t=t,
            task=blind.task,
            domain=blind.domain,
            history=history,
            bank=self.bank if future is None else future.bank,
            method=self.method,
            config=self.config,
            actor_prompt=actor_prompt,
            bank_lock=self._bank_lock,
            bank_version=lambda: self._version if future is None else future.version,
        )
        if future is None or not future.pending:
            return prepared

        async def settled(hit: Hit) -> Hit:
            position = self._index.get(hit.record.trajectory_id)
            if position not in future.pending:
                return hit
            score = await self._scores.setdefault(position, _Scores()).get(hit.record.step)
            agreement = agreement_flag(score, hit.record.pseudo_label)
            return replace(hit, record=replace(hit.record, score=score, agreement=agreement))

        r = prepared.retrieval
        retrieval = Retrieval(
            positives=tuple([await settled(h) for h in r.positives]),
            negatives=tuple([await settled(h) for h in r.negatives]),
        )
        return replace(prepared, retrieval=retrieval, input=replace(prepared.input, retrieval=retrieval))

    async def _future(self, position: int) -> _Future:
        """The bank the strict order scores trajectory ``position`` on (its predecessors' records), built ahead.

        The lane's own bank once it holds them all; else a copy of it grown with the records of the trajectories
        between, as their votes made them, their scores pending (filled in by :meth:`_prepare` as the strict order
        settles them).
        """
        for q in range(self._start + self._version, position):
            if (votes := self._votes.get(q)) is not None:  # None: banked meanwhile
                await votes.done.wait()
        assert self._bank_lock is not None  # depth > 0
        async with self._bank_lock:
            banked = self._start + self._version
            if banked >= position:
                return _Future(self.bank, self._version)
            grown = [self._voted_records(q) for q in range(banked, position)]
            bank = await anyio.to_thread.run_sync(self._grown, self.bank, grown)
            if banked == position - 1:  # the lane's next bank, but for the scores: adopted by _grow_bank
                self._next_banks[position] = bank
        # The version the lane's bank will have when it holds them: a request sent on it is the strict order's.
        return _Future(bank, position - self._start, frozenset(range(banked, position)))

    def _voted_records(self, position: int) -> tuple[BankRecord, ...]:
        """Trajectory ``position``'s bank records as its votes made them, without scores."""
        trajectory = self.trajectories[position].blinded()
        voted = self._votes[position].result
        assert voted is not None  # set before done
        none = [None] * len(trajectory.steps)
        return bank_records(trajectory, none, voted, method=self.method, config=self.config) or ()

    @staticmethod
    def _grown(bank: Bank, trajectories: Sequence[Sequence[BankRecord]]) -> Bank:
        """A copy of ``bank`` with each trajectory's records added, in order."""
        grown = bank.copy()
        for records in trajectories:
            grown.add_trajectory(records)
        return grown

    async def _score_ahead(self, position: int, ahead: _Ahead) -> None:
        """Score trajectory ``position`` on the bank the strict order will give it, each step after the one before."""
        blind = self.trajectories[position].blinded()
        actor_prompt = _actor_prompt(self.trajectories[position])
        history: list[HistoryItem] = []
        try:
            future = await self._future(position)
            for t, step in enumerate(blind.steps):
                prepared = await self._prepare(blind, t, history, actor_prompt, future)
                if ahead.dropped:
                    return
                ahead.sent.append(prepared)
                ahead.changed()
                with request_lane(self.key), request_step(blind.id, t):
                    done = await ask_critic(
                        prepared, self.critic_stage, tokens=self.tokens, request_priority=self._tail[position] - t
                    )
                if ahead.dropped:  # discarded while in flight: left to finish, so that its cost is known
                    self._discard(done)
                    return
                ahead.answered.append(done)
                ahead.changed()
                history.append(HistoryItem(action=step.action, observation=step.observation, score=done.result.score))
        finally:
            ahead.finished = True
            ahead.changed()

    async def _vote(self, position: int, votes: _Votes) -> None:
        trajectory = self.trajectories[position]
        with request_lane(self.key):
            votes.result = await hindsight_votes(
                trajectory.blinded(),
                method=self.method,
                config=self.config,
                hindsight=self.stages.hindsight,
                labels=trajectory.labels if self.method.oracle_labels else None,
                request_priority=self._tail[position + 1] + 1,
            )
        votes.done.set()

    async def _kept_ahead(
        self, blind: Trajectory, t: int, history: Sequence[HistoryItem], actor_prompt: str | None
    ) -> ScoredStep | None:
        """Step ``t`` as scored ahead, when its request is the strict order's; ``None`` (and the rest dropped) else."""
        ahead = self._ahead.get(self.position)
        if ahead is None:
            return None
        sent = await ahead.request(t)
        if sent is not None:
            strict = (
                sent if sent.bank_version == self._version else await self._prepare(blind, t, history, actor_prompt)
            )
            if strict is sent or self._same(strict, sent):
                done = await ahead.answer(t)
                if done is not None:
                    ahead.kept += 1
                    self.steps_kept_ahead += 1
                    return strict.scored(done.result, done.tokens, done.critic_s)
        self._drop(self.position)
        return None

    def _same(self, a: PreparedStep, b: PreparedStep) -> bool:
        return self._messages is not None and self._messages(a.input) == self._messages(b.input)

    def _drop(self, position: int) -> None:
        """Stop scoring trajectory ``position`` ahead and count what it asked beyond its kept steps as discarded."""
        ahead = self._ahead.pop(position, None)
        if ahead is not None:
            ahead.dropped = True
            for done in ahead.answered[ahead.kept :]:
                self._discard(done)

    def _discard(self, done: ScoredStep) -> None:
        self.discarded += done.result.stats
        self.steps_discarded += 1

    async def _grow_bank(self, blind: Trajectory, scores: Sequence[float | None], labels: Sequence[int | None]) -> None:
        votes = self._votes.get(self.position)  # kept for the banks ahead until the position moves on
        if votes is not None:
            await votes.done.wait()
        with request_lane(self.key):
            banked = await label_trajectory(
                blind,
                scores,
                method=self.method,
                config=self.config,
                hindsight=self.stages.hindsight,
                labels=labels if self.method.oracle_labels else None,
                request_priority=self.remaining,
                reasons_seen=self._abstentions_seen,
                stream=self.stream,
                voted=votes.result if votes is not None else None,
            )
        self.remaining -= 1
        records = banked.records
        row = HindsightRow.from_result(
            banked.hindsight,
            records,
            stream=self.stream,
            method=self.method.name,
            trajectory=blind.id,
            order=self.order,
            position=self.position,
            critic=self.critic,
        )
        # The bank update and its row go together even under cancellation, so the saved bank and
        # hindsight.jsonl always agree.
        with anyio.CancelScope(shield=True):
            async with self._bank_lock or contextlib.nullcontext():
                grown = self._next_banks.pop(self.position + 1, None)
                if grown is not None:  # the records are in: they only lack their scores
                    grown.settle_scores(records)
                    self.bank = grown
                else:
                    await anyio.to_thread.run_sync(self.bank.add_trajectory, records)
                self._version += 1
            await self.emit(row)


def _actor_prompt(trajectory: Trajectory) -> str | None:
    """The actor's own system prompt: its input, known before execution (SCHEMA: ``meta.actor_prompt``)."""
    prompt = trajectory.meta.get("actor_prompt")
    return prompt if isinstance(prompt, str) else None
