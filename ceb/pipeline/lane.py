"""One lane = one method over one stream, strictly in stream order (Algorithm 1).

Inside a lane nothing runs ahead: step ``t``'s prompt holds the critic's own score of step ``t-1``, and
trajectory ``i+1`` is scored only after trajectory ``i``'s hindsight votes are in the bank. Throughput comes
from running many lanes side by side (:mod:`ceb.pipeline.runner`), never from breaking this order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict

import anyio

from ceb.backends.scheduling import lane as request_lane
from ceb.backends.scheduling import step as request_step
from ceb.bank import Bank
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.logs import get_logger
from ceb.pipeline.results import AltLabel, HindsightRow, StepRow
from ceb.pipeline.shard import lane_id
from ceb.stages.assembly import Stages
from ceb.stages.base import Critic, HistoryItem
from ceb.stages.critic import reply_tails
from ceb.stages.methods import MethodSpec
from ceb.stages.step import label_trajectory, new_bank, score_step
from ceb.stages.tokens import PromptTokenCounter

__all__ = ["Emit", "Lane"]

Emit = Callable[[StepRow | HindsightRow], Awaitable[None]]

log = get_logger(__name__)


def alt_labels(trajectory: Trajectory) -> dict[str, list[int | None]]:
    """Other label columns of ``trajectory`` (evaluation only): ``meta["alt_labels"]``, name -> one label per step.

    A column that is not a list of 0 / 1 / null of the trajectory's length is ignored (with a warning), so a
    malformed extra column never stops a run.
    """
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


class Lane:
    """Scores one stream with one method and keeps that lane's bank.

    Args:
        stream: Stream name.
        method: The method's switches.
        trajectories: The stream, in order, as read (labels are stripped here before any stage sees them).
        stages: Critic and hindsight labeler.
        config: The run's configuration.
        emit: Receives each result row as soon as it exists.
        bank: The lane's bank; a new empty one when ``None``.
        order: Which order of the stream this is (0: the files' order), copied into the rows.
        critic: Label of the critic, copied into the rows.
        start: Position of the first trajectory to score (a resumed lane; the bank already holds the earlier ones).
        prefix: Scores of the first steps of trajectory ``start`` already scored before a resume.
        critic_stage: The stage that scores (a baseline's); ``stages.critic`` when ``None``.
        tokens: Counts the LLM critic's prompt tokens into the rows; ``None`` (or a baseline method) leaves
            them out.

    Attributes:
        remaining: Sequential requests left on this lane's path (steps to score, plus one hindsight round per
            trajectory for bank methods). It is the priority of the lane's requests, so the server's slots go
            first to the lane with the longest remaining chain (:mod:`ceb.backends.scheduling`).
        steps_left: Steps this lane will score from ``start`` on, counted once at construction.
        position: Position in the stream of the trajectory being scored (or next to be).
        key: The lane's identity (stream, order, method, critic) as its requests carry it
            (:func:`ceb.backends.scheduling.lane`): it picks the lane's home replica and is sent as its session, and
            its hash picks the lane's shard (:mod:`ceb.pipeline.shard`).
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

    async def run(self) -> None:
        """Score every trajectory of the stream in order, from position ``start`` on.

        Critic replies whose score was taken early and that finish in the background (``critic.early_score``
        with ``reason_tokens_after_score = None``) run in a task group this lane owns: the lane ends when they do.
        """
        async with anyio.create_task_group() as tails:
            with reply_tails(tails):
                while self.position < len(self.trajectories):
                    prefix, self.prefix = self.prefix, ()
                    await self.score_trajectory(self.trajectories[self.position], prefix)
                    self.position += 1

    async def score_trajectory(self, trajectory: Trajectory, prefix: Sequence[float | None] = ()) -> None:
        """Score each step before it "runs", then (bank methods) vote in hindsight and grow the bank.

        The step and the hindsight are :func:`~ceb.stages.step.score_step` and
        :func:`~ceb.stages.step.label_trajectory`, the functions the live gate calls too.

        Args:
            trajectory: The next trajectory of the stream.
            prefix: Scores of its first steps, already scored before a resume: they are not asked again.
        """
        labels = trajectory.labels  # evaluation only: copied into the result rows, never into a stage
        alt = alt_labels(trajectory)
        blind = trajectory.blinded()
        # The actor's own system prompt is its input, known before execution (SCHEMA: meta.actor_prompt).
        actor_prompt = trajectory.meta.get("actor_prompt")
        actor_prompt = actor_prompt if isinstance(actor_prompt, str) else None
        history: list[HistoryItem] = []
        scores: list[float | None] = []
        for t, step in enumerate(blind.steps):
            if t < len(prefix):
                scores.append(prefix[t])
                history.append(HistoryItem(action=step.action, observation=step.observation, score=prefix[t]))
                continue
            with request_lane(self.key), request_step(blind.id, t):
                done = await score_step(
                    step=step,
                    t=t,
                    task=blind.task,
                    domain=blind.domain,
                    history=history,
                    bank=self.bank,
                    method=self.method,
                    config=self.config,
                    critic=self.critic_stage,
                    actor_prompt=actor_prompt,
                    tokens=self.tokens,
                    request_priority=self.remaining,
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
            history.append(HistoryItem(action=step.action, observation=step.observation, score=res.score))
            await self.emit_step(
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
        if self.method.use_bank:
            await self._grow_bank(blind, scores, labels)

    async def emit_step(self, row: StepRow) -> None:
        """Hand over the row of a step just scored (a lane shared by several orders also hands over its copies)."""
        await self.emit(row)

    async def _grow_bank(self, blind: Trajectory, scores: Sequence[float | None], labels: Sequence[int | None]) -> None:
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
            )
        self.remaining -= 1
        hr, records = banked.hindsight, banked.records
        s = hr.stats
        row = HindsightRow(
            stream=self.stream,
            method=self.method.name,
            trajectory=blind.id,
            votes=[list(v) for v in hr.votes],
            soft_votes=list(hr.soft_votes),
            pseudo_labels=list(hr.pseudo_labels),
            failed_votes=hr.failed_votes,
            errors=list(hr.errors),
            records_added=len(records),
            latency_s=s.latency_s,
            requests=s.requests,
            prompt_tokens=s.prompt_tokens,
            completion_tokens=s.completion_tokens,
            order=self.order,
            position=self.position,
            critic=self.critic,
            records=[asdict(r) for r in records],
            abstained=list(hr.abstained),
            retries=s.retries,
            retry_reason=s.retry_reason,
        )
        # The bank update and its row go together even under cancellation, so the saved bank and
        # hindsight.jsonl always agree.
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.bank.add_trajectory, records)
            await self.emit(row)
