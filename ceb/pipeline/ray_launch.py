"""``ceb grid FILE --ray ADDRESS``: one Ray task per shard (:mod:`ceb.pipeline.shard`), then one merge.

Each task runs :func:`~ceb.pipeline.runner.run_scoring` for shard ``i/N`` into ``OUT/parts/shard<i>of<N>``
(:meth:`RunDir.part <ceb.pipeline.rundir.RunDir.part>`). Ray retries a task whose worker died up to ``retries``
times, and the retry resumes the part (:mod:`ceb.pipeline.resume`); errors of the run itself are not retried
(https://docs.ray.io/en/latest/ray-core/tasks.html, ``max_retries``). The driver then merges the parts
(:func:`~ceb.pipeline.merge.merge_runs`). Failed shards are reported and stay resumable (``--resume``, or
``--shard i/N --resume`` by hand). Needs the ``ray`` extra, imported only at launch, and paths every node sees.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from ceb.config import RunConfig
from ceb.errors import CEBError, ConfigError, RunError
from ceb.logs import get_logger
from ceb.pipeline.merge import MergeResult, merge_runs
from ceb.pipeline.planning import lane_keys
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.runner import run_scoring
from ceb.pipeline.shard import Shard
from ceb.stages.methods import resolve_method
from ceb.version import install_command

__all__ = [
    "RAY_EXTRA",
    "RayRun",
    "ShardDone",
    "ShardFailed",
    "ShardTask",
    "parse_address",
    "recorded_plan",
    "run_on_ray",
    "run_shard",
]

log = get_logger(__name__)

RAY_EXTRA = "ray"
"""The ``pip install -e '.[ray]'`` extra that brings Ray."""

_ADDRESS = re.compile(r"(ray://)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?:\d{1,5}|\[[0-9A-Fa-f:]+\]:\d{1,5}")


def parse_address(text: str) -> str:
    """The ``--ray`` address as ``ray.init`` takes it: ``local``, ``auto``, ``HOST:PORT`` or ``ray://HOST:PORT``.

    ``local`` starts a loopback Ray for the run; ``auto`` joins this machine's cluster; ``HOST:PORT`` is a head's GCS
    port (6379), ``ray://HOST:PORT`` its Ray Client server (10001).

    Raises:
        ConfigError: Anything else.
    """
    address = text.strip()
    if address in ("local", "auto") or _ADDRESS.fullmatch(address):
        return address
    raise ConfigError(
        f"--ray {text!r}: give local (a Ray instance on this machine), auto (the cluster this machine joined), "
        f"HOST:PORT (the head node) or ray://HOST:PORT (Ray Client)"
    )


def _import_ray() -> Any:
    """The ``ray`` module."""
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(
            f"--ray needs Ray, which is not installed ({exc}); install it with: {install_command(RAY_EXTRA)}"
        ) from None
    return ray


@dataclass(frozen=True, slots=True)
class ShardTask:
    """What one Ray task needs to score its shard (small, so it travels by value).

    Attributes:
        part: Its run directory (absolute: the worker's working directory is not the driver's).
        config: The run's effective configuration (:meth:`RunConfig.model_dump` in JSON mode).
        streams: Stream name -> its files (absolute), in stream order; the worker reads them itself.
    """

    shard: Shard
    part: Path
    config: dict[str, Any]
    streams: dict[str, list[Path]]


@dataclass(frozen=True, slots=True)
class ShardDone:
    """A shard whose task finished.

    Attributes:
        resumed: The task resumed a started part (a retry, or ``--resume``); ``steps_kept`` rows were kept.
        steps_scored: Step rows the part holds, kept ones included (``trajectories_voted`` likewise).
        wall_s: Seconds the finishing attempt ran.
    """

    shard: Shard
    part: Path
    resumed: bool
    steps_kept: int
    steps_scored: int
    steps_failed: int
    trajectories_voted: int
    wall_s: float
    pid: int


@dataclass(frozen=True, slots=True)
class ShardFailed:
    """A shard whose task failed: its worker died more often than ``retries`` allows, or its run raised.

    Attributes:
        part: Its run directory, left as the last attempt left it (resumable once started).
        cause: The run's own error when the task raised one (bad input, say), else ``None`` (a lost worker).
    """

    shard: Shard
    part: Path
    error: str
    cause: CEBError | None = None


@dataclass(frozen=True, slots=True)
class RayRun:
    """What :func:`run_on_ray` did: shards ``done`` and ``failed`` (then no merge), in shard order.

    Attributes:
        out: The merged run directory (its ``parts/`` hold the shards).
        count: N, the number of shards.
        cpus: CPUs of the Ray cluster when the launch started.
    """

    out: Path
    count: int
    done: list[ShardDone]
    failed: list[ShardFailed]
    merged: MergeResult | None
    cpus: int


def run_shard(task: ShardTask) -> ShardDone:
    """Score one shard into its part, in the Ray worker (the task body); a started part is resumed.

    Raises:
        CEBError: The run's own error; not retried.
        OSError: The part cannot be written.
    """
    from ceb.data import read_stream

    started = time.perf_counter()
    run = RunDir(task.part)
    resumed = run.started
    config = RunConfig.model_validate(task.config)
    streams = {name: read_stream(paths) for name, paths in task.streams.items()}
    summary = anyio.run(lambda: run_scoring(streams, config, run.path, resume=resumed, shard=task.shard))
    return ShardDone(
        shard=task.shard,
        part=run.path,
        resumed=resumed,
        steps_kept=summary.steps_resumed,
        steps_scored=summary.steps_scored,
        steps_failed=summary.steps_failed,
        trajectories_voted=summary.trajectories_voted,
        wall_s=time.perf_counter() - started,
        pid=os.getpid(),
    )


def recorded_plan(out: str | Path) -> tuple[int, list[str]] | None:
    """The shard count and streams the parts of an earlier launch into ``out`` recorded; ``None`` without parts.

    Raises:
        RunError: The parts disagree on the shard count (not one launch).
    """
    parts = RunDir(out).parts()
    if not parts:
        return None
    counts = {(Shard.from_record(p.recorded_shard()) or Shard(0, 1)).count for p in parts}
    if len(counts) > 1:
        raise RunError(
            f"{RunDir(out).path / RunDir.PARTS} holds parts of {' and '.join(map(str, sorted(counts)))} shards; "
            f"keep the parts of one launch"
        )
    return counts.pop(), parts[0].recorded_streams()


def _prepare(out: RunDir, count: int | None, *, resume: bool, overwrite: bool) -> int | None:
    """Check ``out`` for a launch and return the shard count it imposes (``None``: free to choose)."""
    if resume and overwrite:
        raise RunError("choose one of --overwrite and --resume")
    if overwrite:
        out.remove_results()
        for part in out.parts():
            part.remove_results()
        return None
    plan = recorded_plan(out.path)
    if resume and plan is not None and (out.started or out.has_scores) and out.recorded_summary() is None:
        # A merge cut short (Ctrl-C, a full disk): merge_runs writes summary.json last, and its files come from the
        # parts alone, so they are merged again. Refusing would leave only --overwrite, which deletes the parts.
        log.warning("merging again over a merge that did not finish", out=str(out))
        out.remove_results()
    if out.started or out.has_scores:
        raise RunError(f"{out} already holds a run; choose a new --out, or pass --overwrite")
    if not resume:
        if plan is not None:
            raise RunError(
                f"{out.path / RunDir.PARTS} holds the parts of an earlier launch ({plan[0]} shards); continue it "
                f"with --resume, or pass --overwrite"
            )
        return None
    if plan is None:
        raise RunError(f"cannot resume {out}: no parts in {out.path / RunDir.PARTS}; leave out --resume")
    if count is not None and count != plan[0]:
        raise RunError(f"--shards {count}: the parts in {out.path / RunDir.PARTS} are of {plan[0]} shards")
    return plan[0]


def run_on_ray(
    streams: Mapping[str, Sequence[Path]],
    config: RunConfig,
    out: str | Path,
    *,
    address: str,
    shards: int | None = None,
    retries: int = 3,
    cpus_per_task: float = 1.0,
    resume: bool = False,
    overwrite: bool = False,
    on_shard: Callable[[ShardDone | ShardFailed], None] | None = None,
) -> RayRun:
    """Score ``streams`` under ``config`` as N Ray tasks, one per shard, then merge the parts into ``out``.

    Args:
        streams: Stream name -> its files (on a file system every node sees).
        config: The run's effective configuration.
        out: The merged run directory; parts in ``out/parts/shard<i>of<N>``.
        address: :func:`parse_address`; an existing ``ray.init`` connection is kept.
        shards: N; default the cluster's CPUs / ``cpus_per_task``, at most one per lane; a resume takes the parts' N.
        retries: Ray's ``max_retries`` for a dead worker.
        cpus_per_task: Ray's ``num_cpus`` per task.
        resume: Continue an earlier launch's parts (finished ones kept) and redo an unfinished merge.
        overwrite: Replace an earlier launch's results and parts.
        on_shard: Called in the driver as each shard finishes or fails.

    Returns:
        The shards done and failed, and the merge (``None`` when a shard failed).

    Raises:
        ConfigError: Ray is not installed (names the extra), an unknown method, or no stream.
        RunError: ``out`` holds a run or parts (without ``resume`` / ``overwrite``), a resume without parts or with
            another N, or the parts cannot be merged (:func:`~ceb.pipeline.merge.merge_runs`).
        KeyboardInterrupt: Ctrl-C (or SIGTERM, via the caller's handler); running tasks are cancelled, parts kept.
    """
    if not streams:
        raise ConfigError("no stream to score")
    if cpus_per_task <= 0:
        raise ConfigError(f"cpus_per_task {cpus_per_task}: give a positive number of CPUs")
    target = RunDir(out)
    methods = [resolve_method(m) for m in config.methods]
    lanes = len(lane_keys(list(streams), config, methods))
    ray = _import_ray()
    fixed = _prepare(target, shards, resume=resume, overwrite=overwrite)
    own = not ray.is_initialized()
    # ray.init replaces the driver's SIGTERM handler with its own (sys.exit(15)); a caller's handler is put back, so
    # that a scheduler's SIGTERM stops the launch as the caller chose (ceb's CLI: as Ctrl-C, the parts kept).
    sigterm = signal.getsignal(signal.SIGTERM)
    if own and address == "local":
        # A Ray instance for this run alone: nothing outside this machine needs to reach it, so it listens on
        # loopback only (Ray's default is the machine's own network address).
        ray.init(address="local", _node_ip_address="127.0.0.1")
    elif own:
        ray.init(address=address)
    if callable(sigterm) and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, sigterm)
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        count = fixed or shards or max(1, min(lanes, int(cpus / cpus_per_task)))
        jobs = [
            ShardTask(
                shard=Shard(i, count),
                part=target.part(i, count).path.resolve(),
                config=config.model_dump(mode="json"),
                streams={name: [Path(p).resolve() for p in paths] for name, paths in streams.items()},
            )
            for i in range(count)
        ]
        log.info("launching shards on ray", out=str(target), shards=count, cpus=cpus, retries=retries)
        remote = ray.remote(max_retries=retries, num_cpus=cpus_per_task, retry_exceptions=False)(run_shard)
        done, failed = _wait_all(ray, {remote.remote(job): job for job in jobs}, on_shard)
    finally:
        if own:
            ray.shutdown()
    done.sort(key=lambda d: d.shard.index)
    failed.sort(key=lambda f: f.shard.index)
    merged = None
    if not failed:
        merged = merge_runs([d.part for d in done], target.path)
    return RayRun(target.path, count, done, failed, merged, cpus)


def _wait_all(
    ray: Any, pending: dict[Any, ShardTask], on_shard: Callable[[ShardDone | ShardFailed], None] | None
) -> tuple[list[ShardDone], list[ShardFailed]]:
    """Wait for every task; a failed one is recorded, never stops the others."""
    done: list[ShardDone] = []
    failed: list[ShardFailed] = []
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                job = pending.pop(ref)
                outcome: ShardDone | ShardFailed
                try:
                    outcome = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:  # the run raised: its own error, not retried
                    cause = exc.cause if isinstance(exc.cause, CEBError) else None
                    reason = str(exc.cause) if exc.cause is not None else str(exc).splitlines()[0]
                    outcome = ShardFailed(job.shard, job.part, " ".join(reason.split()), cause)
                except ray.exceptions.RayError as exc:  # the worker died on its last try, or the node was lost
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                    outcome = ShardFailed(job.shard, job.part, f"{type(exc).__name__}: {first}")
                if isinstance(outcome, ShardDone):
                    done.append(outcome)
                else:
                    failed.append(outcome)
                log.info("shard ended", shard=str(job.shard), ok=isinstance(outcome, ShardDone))
                if on_shard is not None:
                    on_shard(outcome)
    except BaseException:
        # Ctrl-C (or a lost driver connection): stop the tasks still running; their parts stay to resume.
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    return done, failed
