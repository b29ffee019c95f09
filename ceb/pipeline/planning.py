"""Lane planning: which lanes a run has, over which trajectories, and where each starts.

One lane per (stream, order, method, critic) of a bank method (:func:`stream_order`, cut at ``max_trajectories``);
one key per (stream, critic) for a bank-free method, over the union of the orders (:mod:`ceb.pipeline.pool`).
A resume supplies starting points, banks and kept steps (:mod:`ceb.pipeline.resume`).
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
    """Order ``order`` of a stream: the input order for 0, else :meth:`random.Random.shuffle` (``seed + order``)."""
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
        specs: Lane -> (its trajectories in order, its method), in build order.
        shared: The bank-free keys of ``specs`` with their stream's union of orders (:mod:`ceb.pipeline.pool`).
        progress: Lane -> where it resumes (missing: position 0).
        recopied: Copies of the source rows a resume kept, written again first without a request.
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
    """Every lane of a run over streams named ``streams``, with its method, in build order (no trajectories needed)."""
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
    """The lanes of ``plan``'s bank methods at their resume points, and one step pool per (stream, critic).

    ``critic_stages`` maps (critic label, method's critic kind) to the scoring stage; ``emit`` receives the lanes'
    rows.
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
