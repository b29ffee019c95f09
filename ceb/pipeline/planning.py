"""Lane planning: which lanes a run has, over which trajectories, and where each starts.

A run has one lane per (stream, order, method, critic) of a method with a bank, each over its stream in that
order (:func:`stream_order`, cut at ``max_trajectories``); a bank-free method has one key per (stream, critic),
of order 0, over the union of the orders, scored in the stream's step pool (:mod:`ceb.pipeline.pool`). A resume
then gives each lane its starting point and bank and each pooled method its kept steps
(:mod:`ceb.pipeline.resume`). :func:`build_lanes` turns the plan into the :class:`~ceb.pipeline.lane.Lane` and
:class:`~ceb.pipeline.pool.StepPool` objects the runner executes (:mod:`ceb.pipeline.runner`).
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
from ceb.pipeline.pool import PooledMethod, SharedStream, StepPool, copies, share_orders
from ceb.pipeline.resume import LaneProgress, config_fingerprint, restore_progress, stream_fingerprint
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
        shared: The keys of ``specs`` of the bank-free methods (scored in the step pool), with their stream's union
            of orders.
        progress: Lane -> where it resumes (empty for a fresh run; a lane missing here starts at 0).
        recopied: Copies of the source rows a resume kept (:mod:`ceb.pipeline.pool`): written again first,
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
        pooled = {key: self.specs[key][1].reads_own_scores for key in self.shared}
        self.progress = restore_progress(run_dir, factories, pooled=pooled)
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

    One lane per stream, order, critic and method with a bank; a bank-free method has one key, of order 0, for
    all orders (:mod:`ceb.pipeline.pool`). The keys need only the stream names, so ``ceb merge`` lists a run's
    lanes from its ``config.json``.
    """
    critics = list(config.critic_configs())
    return [
        ((name, order, method.name, critic), method)
        for name in streams
        for order in range(config.orders)
        for critic in critics
        for method in methods
        if not (method.order_free and order)
    ]


def plan_lanes(
    streams: Mapping[str, Sequence[Trajectory]],
    config: RunConfig,
    methods: Sequence[MethodSpec],
    shard: Shard | None = None,
) -> LanePlan:
    """Every lane of a run (:func:`lane_keys`), or of its shard ``shard``, each over its trajectories in order."""
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
            unions[name] = share_orders(orders[name])
        if method.order_free:  # one key for every order, in the step pool (ceb.pipeline.pool)
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
) -> tuple[list[Lane], list[StepPool]]:
    """The lanes of ``plan``'s bank methods, each at its resume point, and one step pool per (stream, critic).

    Args:
        plan: The planned lanes (and a resume's progress).
        config: The run's configuration.
        by_critic: Critic label -> its stages.
        critic_stages: (critic label, method's critic kind) -> the stage that scores.
        tokens: Prompt-token counter for the rows, or ``None``.
        emit: Receives the lanes' rows.
    """
    lanes: list[Lane] = []
    pooled: dict[tuple[str, str], list[PooledMethod]] = {}
    for key, (trajs, method) in plan.specs.items():
        prog = plan.progress.get(key, LaneProgress())
        stage = critic_stages[(key[3], method.critic)]
        if key in plan.shared:
            kept = {(row.trajectory, row.step): row.score for row in prog.kept_steps}
            pooled.setdefault((key[0], key[3]), []).append(PooledMethod(key, method, stage, kept))
            continue
        lanes.append(
            Lane(
                key[0],
                method,
                trajs,
                by_critic[key[3]],
                config,
                emit,
                prog.bank,
                order=key[1],
                critic=key[3],
                start=prog.position,
                prefix=prog.prefix,
                critic_stage=stage,
                tokens=tokens,
            )
        )
    pools = [
        StepPool(stream, critic, methods, plan.shared[methods[0].key], config, tokens)
        for (stream, critic), methods in pooled.items()
    ]
    return lanes, pools
