"""``ceb relabel``'s batch: judge every trajectory of a stream and write a new stream with the judge's labels.

The input file is never modified: the labels go into a new stream file, each into its trajectory's
``meta["alt_labels"][name]`` (one 0/1 per step), the column the pipeline carries to evaluation
(:func:`ceb.pipeline.lane.alt_labels`) and ``ceb report`` compares with the strict labels (label shift).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio
import structlog

from ceb.backends.base import ChatBackend
from ceb.data.converters import REFERENCE_ACTIONS, REFERENCE_OBSERVATION
from ceb.data.reader import write_stream
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem
from ceb.stages.base import CallStats
from ceb.stages.judge import JUDGE_LABEL, LLMJudge, first_without_reference
from ceb.stages.templates import PromptSet

__all__ = ["RelabelSummary", "relabel_stream", "require_references"]

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RelabelSummary:
    """What :func:`relabel_stream` did.

    Attributes:
        trajectories: Trajectories in the stream.
        judged: Trajectories that got a judge label per step.
        unreadable: ``(trajectory id, reason)`` of each trajectory left without a judge label.
        steps: Steps that got a judge label.
        stats: Requests, tokens and time over every request (re-asks included).
    """

    trajectories: int
    judged: int
    steps: int
    unreadable: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    stats: CallStats = field(default_factory=CallStats)


_WHY_JUDGE = (
    "the judge compares each step with the dataset's reference, so a stream without one (InterCode) cannot be "
    "relabelled"
)


def require_references(trajectories: Sequence[Trajectory], why: str = _WHY_JUDGE) -> None:
    """Refuse a stream with a step that carries no reference action: there would be nothing to compare with.

    ``why`` ends the message: what the reference is needed for (the judge's comparison by default;
    ``ceb regenerate`` passes its own).

    Raises:
        DataError: One line naming the file and line (the trajectory's ``source``), the first trajectory lacking
            a reference, and its step.
    """
    missing = first_without_reference(trajectories)
    if missing is not None:
        trajectory, t = missing
        path, _, line = trajectory.source.rpartition(":")
        message = (
            f"no reference action (meta.{REFERENCE_ACTIONS}, as the Mind2Web and AMEX converters write it, or, in an "
            f"older stream, an observation starting {REFERENCE_OBSERVATION.strip()!r}); {why}"
        )
        lineno = int(line) if line.isdigit() else 0
        raise DataError(
            Problem(path or "<stream>", lineno, f"meta.{REFERENCE_ACTIONS}[{t}]", message, trajectory.id, t)
        )


def _with_label(trajectory: Trajectory, name: str, labels: tuple[int, ...]) -> Trajectory:
    meta = dict(trajectory.meta)
    columns = meta.get("alt_labels")
    meta["alt_labels"] = (dict(columns) if isinstance(columns, dict) else {}) | {name: list(labels)}
    return replace(trajectory, meta=meta)


async def relabel_stream(
    trajectories: Sequence[Trajectory],
    chat: ChatBackend,
    prompts: PromptSet,
    out: str | Path,
    *,
    name: str = JUDGE_LABEL,
    concurrency: int = 64,
) -> RelabelSummary:
    """Judge each trajectory (one request each, concurrently) and write the stream with the labels to ``out``.

    A trajectory whose reply stays unreadable after one re-ask keeps whatever ``alt_labels`` it had and gets no
    ``name`` column; it is counted in :attr:`RelabelSummary.unreadable`. The file is written only when every
    request is done, atomically (:func:`~ceb.data.reader.write_stream`), and not at all when no trajectory got a
    judge label.

    Args:
        trajectories: The stream, in order; every step must carry a reference action (:func:`require_references`).
        chat: The judge's endpoint.
        prompts: Templates.
        out: The new stream file.
        name: The judge's column in ``meta["alt_labels"]``.
        concurrency: Requests in flight at once (``backend.max_concurrency``; the backend's slots still apply).

    Raises:
        DataError: A step has no reference action (:func:`require_references`); nothing is asked.
        FatalBackendError: The endpoint refuses every request; nothing is written.
        OSError: ``out`` cannot be written.
    """
    require_references(trajectories)
    judge = LLMJudge(chat, prompts)
    results: list[Trajectory] = list(trajectories)
    unreadable: list[tuple[str, str]] = []
    stats = CallStats()
    steps = 0
    pending = iter(range(len(trajectories)))

    async def one(i: int) -> None:
        nonlocal stats, steps
        trajectory = trajectories[i]
        answer = await judge.label(trajectory)
        stats += answer.stats
        if answer.value is None:
            reason = answer.error or "no reply"
            log.warning("no judge label", trajectory=trajectory.id, reason=reason)
            unreadable.append((trajectory.id, reason))
            return
        results[i] = _with_label(trajectory, name, answer.value)
        steps += len(answer.value)

    async def worker() -> None:
        for i in pending:  # the workers share one iterator: `concurrency` requests in flight, no task per trajectory
            await one(i)

    async with anyio.create_task_group() as tg:
        for _ in range(min(concurrency, len(trajectories))):
            tg.start_soon(worker)
    order = {t.id: i for i, t in enumerate(trajectories)}
    unreadable.sort(key=lambda u: order[u[0]])
    if len(unreadable) < len(trajectories):
        write_stream(out, results)
    return RelabelSummary(
        trajectories=len(trajectories),
        judged=len(trajectories) - len(unreadable),
        steps=steps,
        unreadable=tuple(unreadable),
        stats=stats,
    )
