"""Lane planning: which lanes a run has, over which trajectories, and where each starts.

A run has one lane per (stream, order, method, critic), each over its stream in that order
(:func:`stream_order`, cut at ``max_trajectories``); a bank-free method whose orders are shared
(:mod:`ceb.pipeline.reuse`) has one lane per (stream, critic) over the union of the orders. A resume then gives
each lane its starting point and bank (:mod:`ceb.pipeline.resume`). :func:`build_lanes` turns the plan into the
:class:`~ceb.pipeline.lane.Lane` objects the runner executes (:mod:`ceb.pipeline.runner`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ceb.config import RunConfig
from ceb.data.trajectory import Trajectory
from ceb.pipeline.lane import Emit, Lane
from ceb.pipeline.resume import LaneProgress, config_fingerprint, restore_progress, stream_fingerprint
from ceb.pipeline.reuse import SharedLane, SharedStream, copies, share_orders, shares_orders
from ceb.pipeline.rundir import LaneKey, RunDir
from ceb.pipeline.shard import Shard
from ceb.pipeline.summary import Row, RunSummary
from ceb.stages.assembly import Stages
from ceb.stages.base import Critic
from ceb.stages.methods import CriticFactory, MethodSpec
from ceb.stages.step import new_bank
from ceb.stages.tokens import PromptTokenCounter

__all__ = ["LanePlan", "build_lanes", "fingerprints", "lane_keys", "plan_lanes", "stream_order"]


def stream_order(trajectories: Sequence[Trajectory], order: int, seed: int) -> list[Trajectory]:
    """Order ``order`` of a stream: the input order for 0, else a permutation seeded with ``seed + order``.

    Uses :meth:`random.Random.shuffle` (Fisher-Yates), stable across Python versions for a given seed.
    """
    out = list(trajectories)
    if order:
        random.Random(seed + order).shuffle(out)
    return out


def fingerprints(config: RunConfig, streams: Mapping[str, Sequence[Trajectory]]) -> dict[str, Any]:
    """What a resume must find unchanged: result-affecting settings and each stream's content hash."""
    digest, flat = config_fingerprint(config)
    return {
        "config_sha256": digest,
        "config": flat,
        "streams": {name: stream_fingerprint(trajs) for name, trajs in streams.items()},
    }


@dataclass
class LanePlan:
    """The lanes of one call of :func:`~ceb.pipeline.runner.run_scoring`.

    Attributes:
        specs: Lane -> (its trajectories in its order, its method), in the order lanes are built.
        shared: The lanes of ``specs`` that stand for every order of a bank-free method, with their union.
        progress: Lane -> where it resumes (empty for a fresh run; a lane missing here starts at 0).
        recopied: Copies of the source rows a resume kept (:mod:`ceb.pipeline.reuse`): written again first,
            without a request.
    """

    specs: dict[LaneKey, tuple[Sequence[Trajectory], MethodSpec]]
    shared: dict[LaneKey, SharedStream]
    progress: dict[LaneKey, LaneProgress] = field(default_factory=dict)
    recopied: list[Row] = field(default_factory=list)

    def restore(self, run_dir: RunDir, config: RunConfig, summary: RunSummary) -> None:
        """Give each lane its resume point from ``run_dir``'s rows, and count the kept rows into ``summary``.

        Raises:
            RunError: A result file has a bad line before its last (names file and line).
        """
        factories = {k: (t, partial(new_bank, m, config) if m.use_bank else None) for k, (t, m) in self.specs.items()}
        self.progress = restore_progress(run_dir, factories, shared=self.shared)
        for key, prog in self.progress.items():
            kept: list[Row] = [*prog.kept_steps, *prog.kept_hindsight]
            for row in kept:
                summary.count_resumed(row)
            if key in self.shared:
                self.recopied += [c for row in prog.kept_steps for c in copies(row, self.shared[key])]


def lane_keys(
    streams: Iterable[str], config: RunConfig, methods: Sequence[MethodSpec]
) -> list[tuple[LaneKey, MethodSpec]]:
    """Every lane of a run over streams named ``streams``, with its method, in the order lanes are built.

    One lane per stream, order, critic and method; a bank-free method whose orders are shared
    (:func:`~ceb.pipeline.reuse.shares_orders`) has one lane, of order 0, for all orders. The keys need only the
    stream names, so ``ceb merge`` lists a run's lanes from its ``config.json``.
    """
    share = shares_orders(config)
    critics = list(config.critic_configs())
    return [
        ((name, order, method.name, critic), method)
        for name in streams
        for order in range(config.orders)
        for critic in critics
        for method in methods
        if not (share and method.order_free and order)
    ]


def plan_lanes(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    methods: Sequence[MethodSpec],
    shard: Shard | None = None,
) -> LanePlan:
    """Every lane of a run (:func:`lane_keys`), or of its shard ``shard``, each over its trajectories in order."""
    share = shares_orders(config)
    plan = LanePlan(specs={}, shared={})
    orders: dict[str, list[list[Trajectory]]] = {}
    unions: dict[str, SharedStream] = {}
    for key, method in lane_keys(streams, config, methods):
        if shard is not None and not shard.keeps(key):
            continue
        name, order = key[0], key[1]
        if name not in orders:
            trajs = streams[name]
            orders[name] = [
                stream_order(trajs, r, config.order_seed)[: config.max_trajectories] for r in range(config.orders)
            ]
            if share:
                unions[name] = share_orders(orders[name])
        if share and method.order_free:  # one lane for every order (ceb.pipeline.reuse)
            union = unions[name]
            plan.specs[key] = (union.trajectories, method)
            plan.shared[key] = union
        else:
            plan.specs[key] = (orders[name][order], method)
    return plan


def build_lanes(
    plan: LanePlan,
    config: RunConfig,
    by_critic: Mapping[str, Stages],
    critic_stages: Mapping[tuple[str, str | CriticFactory], Critic],
    tokens: PromptTokenCounter | None,
    emit: Emit,
) -> list[Lane]:
    """The lanes of ``plan``, each at its resume point, with its critic label's stages.

    Args:
        plan: The planned lanes (and a resume's progress).
        config: The run's configuration.
        by_critic: Critic label -> its stages.
        critic_stages: (critic label, method's critic kind) -> the stage that scores.
        tokens: Prompt-token counter for the rows, or ``None``.
        emit: The lanes' row target until the runner gives each its own.
    """
    lanes: list[Lane] = []
    for key, (trajs, method) in plan.specs.items():
        prog = plan.progress.get(key, LaneProgress())
        args = (key[0], method, trajs, by_critic[key[3]], config, emit)
        kwargs: dict[str, Any] = {
            "bank": prog.bank,
            "order": key[1],
            "critic": key[3],
            "start": prog.position,
            "prefix": prog.prefix,
            "critic_stage": critic_stages[(key[3], method.critic)],
            "tokens": tokens,
        }
        if key in plan.shared:
            sources = {row.trajectory: row.order for row in prog.kept_steps}
            lanes.append(SharedLane(*args, shared=plan.shared[key], sources=sources, **kwargs))
        else:
            lanes.append(Lane(*args, **kwargs))
    return lanes
