"""The step pool: methods without a bank, each step scheduled by what it really waits for.

A bank-free method (:attr:`MethodSpec.order_free`) carries nothing across trajectories, and no critic sees the
stream order, so one :class:`StepPool` per (stream, critic) scores it over the union of the orders, in units the
runner schedules beside the lanes under the same limits and priorities (:mod:`ceb.backends.scheduling`): a
trajectory per unit for a method that reads its own scores (``static``), else a step per unit shared by every such
method (:mod:`ceb.stages.statistics`). Rows equal the strict lane order's.

A step's source row goes to the first order holding its trajectory, followed by one copy per other order
(:func:`copy_row`: ``reused_from`` the source order, status ``reused`` unless failed / ``not_available``, no
requests); a sampling critic's orders share one sample. A resume keeps finished source rows, drops copies and
rewrites them without requests; the fingerprint records copying (:func:`shares_orders`, key ``reuse_bank_free``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import anyio
import structlog

from ceb.backends.scheduling import lane as request_lane
from ceb.backends.scheduling import step as request_step
from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.pipeline.lane import Emit, alt_labels
from ceb.pipeline.results import AltLabel, StepRow
from ceb.pipeline.rundir import LaneKey
from ceb.pipeline.shard import lane_id
from ceb.stages.base import Critic, HistoryItem
from ceb.stages.critic import reply_tails
from ceb.stages.methods import MethodSpec, resolve_method
from ceb.stages.statistics import step_statistics
from ceb.stages.step import new_bank, score_step
from ceb.stages.tokens import PromptTokenCounter

__all__ = ["PooledMethod", "SharedStream", "StepPool", "Unit", "copies", "copy_row", "share_orders", "shares_orders"]

log = structlog.get_logger(__name__)

Placement = tuple[int, int]
"""``(order, position)``: where a trajectory sits in one order of its stream."""


def shares_orders(config: RunConfig) -> bool:
    """Whether a run with ``config`` writes copies of rows between orders: ``orders > 1`` and a bank-free method.

    Raises:
        ConfigError: A method name is unknown.
    """
    return config.orders > 1 and any(resolve_method(name).order_free for name in config.methods)


@dataclass(frozen=True, slots=True)
class SharedStream:
    """One stream's orders as the pool walks them.

    Attributes:
        trajectories: Every trajectory of any order once, first met first (order 0's, then what later orders add).
        placements: Trajectory id -> each ``(order, position)`` holding it; new source rows go to the first.
    """

    trajectories: tuple[Trajectory, ...]
    placements: Mapping[str, tuple[Placement, ...]]

    @property
    def orders(self) -> list[int]:
        """The orders this stream has, ascending."""
        return sorted({order for places in self.placements.values() for order, _ in places})


def share_orders(orders: Sequence[Sequence[Trajectory]]) -> SharedStream:
    """The :class:`SharedStream` of a stream's orders (``orders[r]``: order ``r``'s trajectories, in order).

    Raises:
        ValueError: A trajectory id appears twice in one order (rows are keyed by trajectory id).
    """
    union: dict[str, Trajectory] = {}
    places: dict[str, list[Placement]] = {}
    for order, trajectories in enumerate(orders):
        seen: set[str] = set()
        for position, traj in enumerate(trajectories):
            if traj.id in seen:
                raise ValueError(f"trajectory id {traj.id!r} appears twice in order {order} of a stream")
            seen.add(traj.id)
            union.setdefault(traj.id, traj)
            places.setdefault(traj.id, []).append((order, position))
    return SharedStream(tuple(union.values()), {tid: tuple(p) for tid, p in places.items()})


def copy_row(row: StepRow, order: int, position: int) -> StepRow:
    """The copy of source row ``row`` for ``order`` at ``position``: what the critic saw and said, at no cost."""
    return replace(
        row,
        order=order,
        position=position,
        status="reused" if row.status == "scored" else row.status,
        reused_from=row.order,
        requests=0,
        retries=0,
        retry_reason=None,
        latency_s=0.0,
        queue_s=0.0,
        prompt_tokens=None if row.prompt_tokens is None else 0,
        completion_tokens=None if row.completion_tokens is None else 0,
    )


def copies(row: StepRow, shared: SharedStream) -> list[StepRow]:
    """The copies of source row ``row`` for every other order of ``shared`` that holds its trajectory."""
    return [copy_row(row, o, p) for o, p in shared.placements[row.trajectory] if o != row.order]


@dataclass(frozen=True, slots=True)
class PooledMethod:
    """One bank-free method of a pool.

    Attributes:
        key: Its lane key ``(stream, 0, method, critic)``: its requests' lane id and its shard.
        kept: ``(trajectory id, step)`` -> the score of each source row a resume kept (not asked again).
    """

    key: LaneKey
    method: MethodSpec
    critic: Critic
    kept: Mapping[tuple[str, int], float | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Unit:
    """One schedulable piece of a pool: a trajectory (``static``) or one step; ``remaining`` is its priority."""

    remaining: int
    run: Callable[[Emit], Awaitable[None]]


class StepPool:
    """The bank-free methods of one (stream, critic), over every order of the stream (module docstring).

    ``methods`` are in the run's order (a step's rows are written in it); ``steps_left`` counts the rows it will
    write, copies included.

    Raises:
        ValueError: A method has a bank.
    """

    def __init__(
        self,
        stream: str,
        critic: str,
        methods: Sequence[PooledMethod],
        shared: SharedStream,
        config: RunConfig,
        tokens: PromptTokenCounter | None = None,
    ) -> None:
        banked = [m.method.name for m in methods if m.method.use_bank]
        if banked:
            raise ValueError(f"methods {banked} have a bank: they run in lanes, not in the step pool")
        self.stream, self.critic, self.methods = stream, critic, tuple(methods)
        self.shared, self.config, self.tokens = shared, config, tokens
        self._bank = new_bank(methods[0].method, config) if methods else None  # read for |B_t| = 0 only
        self._said: set[tuple[str, str]] = set()
        self.steps_left = sum(
            len(shared.placements[traj.id])
            for m in self.methods
            for traj in shared.trajectories
            for t in range(len(traj.steps))
            if (traj.id, t) not in m.kept
        )

    def units(self) -> list[Unit]:
        """Every unit with something left to score, trajectory by trajectory."""
        chained = [m for m in self.methods if m.method.reads_own_scores]
        free = [m for m in self.methods if not m.method.reads_own_scores]
        out: list[Unit] = []
        for traj in self.shared.trajectories:
            n = len(traj.steps)
            for m in chained:
                start = next((t for t in range(n) if (traj.id, t) not in m.kept), n)
                if start < n:
                    out.append(Unit(n - start, partial(self._chain, m, traj, start)))
            for t in range(n):
                todo = tuple(m for m in free if (traj.id, t) not in m.kept)
                if todo:
                    out.append(Unit(1, partial(self._step, todo, traj, t)))
        return out

    async def _chain(self, m: PooledMethod, traj: Trajectory, start: int, emit: Emit) -> None:
        """One trajectory of a method whose prompt holds its own earlier scores, in step order from ``start``."""
        blind = traj.blinded()
        history = [
            HistoryItem(s.action, s.observation, m.kept[(traj.id, t)]) for t, s in enumerate(blind.steps[:start])
        ]
        # Critic replies taken early finish in this unit's own group (critic.early_score): the unit ends with them.
        async with anyio.create_task_group() as tails:
            with reply_tails(tails):
                for t in range(start, len(blind.steps)):
                    row = await self._score(m, traj, blind, t, history, remaining=len(blind.steps) - t)
                    step = blind.steps[t]
                    history.append(HistoryItem(step.action, step.observation, row.score))
                    await self._write(row, emit)

    async def _step(self, methods: Sequence[PooledMethod], traj: Trajectory, t: int, emit: Emit) -> None:
        """Step ``t`` of ``traj`` for every method of ``methods`` at once (none reads a score of another step)."""
        blind = traj.blinded()
        history = [HistoryItem(s.action, s.observation, None) for s in blind.steps[:t]]
        rows: list[StepRow | None] = [None] * len(methods)

        async def one(i: int) -> None:
            rows[i] = await self._score(methods[i], traj, blind, t, history, remaining=1)

        with step_statistics():  # what several of them read is fetched once (ceb.stages.statistics)
            async with anyio.create_task_group() as tg:
                for i in range(len(methods)):
                    tg.start_soon(one, i)
        for row in rows:
            if row is not None:
                await self._write(row, emit)

    async def _score(
        self,
        m: PooledMethod,
        traj: Trajectory,
        blind: Trajectory,
        t: int,
        history: Sequence[HistoryItem],
        *,
        remaining: int,
    ) -> StepRow:
        assert self._bank is not None
        actor_prompt = traj.meta.get("actor_prompt")  # the actor's own input (SCHEMA: meta.actor_prompt)
        with request_lane(lane_id(m.key)), request_step(blind.id, t):
            done = await score_step(
                step=blind.steps[t],
                t=t,
                task=blind.task,
                domain=blind.domain,
                history=history,
                bank=self._bank,
                method=m.method,
                config=self.config,
                critic=m.critic,
                actor_prompt=actor_prompt if isinstance(actor_prompt, str) else None,
                tokens=self.tokens if m.method.uses_llm_critic else None,
                request_priority=remaining,
            )
        res = done.result
        if res.status == "not_available" and res.error is not None:
            if (m.method.name, res.error) not in self._said:  # the same for most steps: said once per reason
                self._said.add((m.method.name, res.error))
                log.info("method not available here", stream=self.stream, method=m.method.name, reason=res.error)
        elif res.status == "failed":
            log.warning(
                "critic step failed",
                stream=self.stream,
                method=m.method.name,
                trajectory=blind.id,
                step=t,
                error=res.error,
            )
        order, position = self.shared.placements[traj.id][0]
        alt = alt_labels(traj)
        return StepRow.from_step(
            done,
            stream=self.stream,
            method=m.method.name,
            trajectory=blind.id,
            label=traj.steps[t].label,
            order=order,
            position=position,
            critic=self.critic,
            alt_labels=[AltLabel(name=name, label=ys[t]) for name, ys in sorted(alt.items())],
        )

    async def _write(self, row: StepRow, emit: Emit) -> None:
        await emit(row)
        for copy in copies(row, self.shared):
            await emit(copy)
