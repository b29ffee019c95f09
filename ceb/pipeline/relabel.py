"""``ceb relabel``'s batch: judge every trajectory of a stream and write a new stream with the judge's labels.

Labels go into ``meta["alt_labels"][name]`` of a new file (one 0/1 per step; :func:`ceb.pipeline.lane.alt_labels`).
Judgments are journalled in ``OUT.judgments.jsonl`` (:class:`JudgmentLog`) keyed on the trajectory id and a
digest of ``backend:model`` and the exact messages, so a rerun asks only what is missing or changed; the journal is
removed once every trajectory is labelled. :func:`judge_stream` is ``ceb label``'s loop too.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO

import anyio
import orjson

from ceb.backends.base import ChatBackend
from ceb.data.converters import REFERENCE_ACTIONS, REFERENCE_OBSERVATION
from ceb.data.reader import write_stream
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem, RunError, with_path
from ceb.logs import get_logger
from ceb.stages.asking import Answer
from ceb.stages.base import CallStats
from ceb.stages.judge import JUDGE_LABEL, LLMJudge, first_without_reference
from ceb.stages.templates import PromptSet

__all__ = ["JudgmentLog", "RelabelSummary", "judge_stream", "relabel_stream", "require_references"]

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RelabelSummary:
    """What :func:`relabel_stream` did.

    Attributes:
        judged: Trajectories labelled at every step; ``reused`` of them read from the journal, not asked.
        unreadable: ``(trajectory id, reason)`` of each trajectory left without a label.
    """

    trajectories: int
    judged: int
    steps: int
    unreadable: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    stats: CallStats = field(default_factory=CallStats)
    reused: int = 0


_WHY_JUDGE = (
    "the judge compares each step with the dataset's reference, so a stream without one (InterCode) cannot be "
    "relabelled"
)


def require_references(trajectories: Sequence[Trajectory], why: str = _WHY_JUDGE) -> None:
    """Refuse a stream with a step that carries no reference action; ``why`` ends the message.

    Raises:
        DataError: Names the file and line, the trajectory and its step.
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


class JudgmentLog:
    """The journal ``OUT.judgments.jsonl`` of one output ``OUT``: ``{"trajectory", "key", "labels"}`` a line.

    ``key`` is :meth:`key` of the answered request; only judged trajectories are recorded.
    """

    SUFFIX = ".judgments.jsonl"

    __slots__ = ("path",)

    def __init__(self, out: str | Path) -> None:
        out = Path(out)
        self.path = out.with_name(out.name + self.SUFFIX)

    @staticmethod
    def key(judge: str, request_messages: object) -> str:
        """What a judgment answers: a digest (BLAKE2b, 16 bytes, hex) of the judge's name and the messages sent."""
        blob = orjson.dumps([judge, request_messages], option=orjson.OPT_SORT_KEYS)
        return hashlib.blake2b(blob, digest_size=16).hexdigest()

    def read(self) -> dict[tuple[str, str], tuple[int, ...]]:
        """The recorded judgments, ``(trajectory id, key) -> labels``; a torn last piece is ignored.

        Raises:
            RunError: A whole line is not a judgment (names the file and line).
        """
        if not self.path.is_file():
            return {}
        lines = self.path.read_bytes().split(b"\n")
        if lines.pop():
            log.warning("ignoring a cut last line", file=str(self.path), line=len(lines) + 1)
        found: dict[tuple[str, str], tuple[int, ...]] = {}
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = orjson.loads(line)
                labels = tuple(int(y) for y in obj["labels"])
                found[(str(obj["trajectory"]), str(obj["key"]))] = labels
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise RunError(
                    f"{self.path}:{n}: not a judgment ({exc}); delete the file to judge every trajectory again"
                ) from None
        return found

    @contextmanager
    def appender(self) -> Iterator[IO[bytes]]:
        """The journal open for appending, held exclusively, a torn last line cut off; :meth:`read` inside the block.

        Raises:
            RunError: Another ``ceb relabel`` is writing the same output (names the journal).
            OSError: The journal cannot be opened or cut (names it).
        """
        try:
            sink = self.path.open("ab")
        except OSError as exc:
            raise with_path(exc, self.path) from exc
        with sink:
            try:
                fcntl.flock(sink.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise RunError(f"{self.path} is in use: another ceb relabel is writing the same output") from None
            try:
                data = self.path.read_bytes()
                keep = data.rfind(b"\n") + 1
                if keep < len(data):  # a write cut short by a kill: the next line must not continue it
                    log.warning("cutting off a cut last line", file=str(self.path), line=data.count(b"\n") + 1)
                    os.ftruncate(sink.fileno(), keep)
            except OSError as exc:
                raise with_path(exc, self.path) from exc
            try:
                yield sink
            finally:
                sink.flush()
                if os.fstat(sink.fileno()).st_size == 0:  # nothing recorded, now or before: leave no empty file
                    self.path.unlink(missing_ok=True)

    def remove(self) -> None:
        """Delete the journal (the output holds every judgment)."""
        self.path.unlink(missing_ok=True)


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
    judge_name: str = "",
) -> RelabelSummary:
    """Judge each trajectory (one request each, concurrently) and write the stream with the labels to ``out``.

    A reply unreadable after one re-ask leaves that trajectory without a ``name`` column
    (:attr:`RelabelSummary.unreadable`). ``out`` is written atomically once every request is done, not at all when
    nothing was labelled; judgments are journalled and reused (:class:`JudgmentLog`).

    Args:
        trajectories: The stream, in order; every step must carry a reference action.
        chat: The judge's endpoint.
        prompts: Templates.
        out: The new stream file.
        name: The judge's column in ``meta["alt_labels"]``.
        concurrency: Requests in flight (the backend's slots still apply).
        judge_name: ``backend:model``, part of each judgment's key.

    Raises:
        DataError: A step has no reference action (:func:`require_references`); nothing is asked.
        RunError: The journal holds a non-judgment line, or another run is writing it; nothing is asked.
        FatalBackendError: The endpoint refuses every request; nothing is written (the journal stays).
        OSError: ``out`` or its journal cannot be written.
    """
    require_references(trajectories)
    judge = LLMJudge(chat, prompts)
    keys = [JudgmentLog.key(judge_name, judge.messages(t)) for t in trajectories]

    def labelled(trajectory: Trajectory, labels: tuple[int, ...] | None) -> Trajectory:
        return trajectory if labels is None else _with_label(trajectory, name, labels)

    return await judge_stream(trajectories, keys, judge.label, labelled, out, concurrency=concurrency)


async def judge_stream(
    trajectories: Sequence[Trajectory],
    keys: Sequence[str],
    ask: Callable[[Trajectory], Awaitable[Answer[tuple[int, ...]]]],
    labelled: Callable[[Trajectory, tuple[int, ...] | None], Trajectory],
    out: str | Path,
    *,
    concurrency: int,
) -> RelabelSummary:
    """Ask ``ask`` for each trajectory's step labels (``concurrency`` at once), journalled, and write ``out``.

    ``ceb relabel``'s and ``ceb label``'s loop: a ``keys`` entry the journal holds is not asked again; ``labelled``
    builds the trajectory written for the labels (or ``None``). ``out`` is written atomically at the end, if anything
    was labelled.

    Raises:
        RunError: As :func:`relabel_stream`.
        FatalBackendError: As :func:`relabel_stream`.
        OSError: ``out`` or its journal cannot be written.
    """
    journal = JudgmentLog(out)
    unreadable: list[tuple[str, str]] = []
    stats = CallStats()

    with journal.appender() as sink:
        recorded = journal.read()
        labels = [recorded.get((t.id, k)) for t, k in zip(trajectories, keys, strict=True)]
        reused = sum(y is not None for y in labels)
        if reused:
            log.info("judgments recorded by an earlier run are reused", file=str(journal.path), reused=reused)
        pending = iter([i for i, y in enumerate(labels) if y is None])

        async def one(i: int) -> None:
            nonlocal stats
            trajectory = trajectories[i]
            answer = await ask(trajectory)
            stats += answer.stats
            if answer.value is None:
                reason = answer.error or "no reply"
                log.warning("no judge label", trajectory=trajectory.id, reason=reason)
                unreadable.append((trajectory.id, reason))
                return
            record = {"trajectory": trajectory.id, "key": keys[i], "labels": list(answer.value)}
            sink.write(orjson.dumps(record) + b"\n")
            sink.flush()  # in the kernel once written: a killed process keeps it
            labels[i] = answer.value

        async def worker() -> None:
            for i in pending:  # one shared iterator: `concurrency` requests in flight, no task per trajectory
                await one(i)

        async with anyio.create_task_group() as tg:
            for _ in range(min(concurrency, len(trajectories) - reused)):
                tg.start_soon(worker)
        results = [labelled(t, y) for t, y in zip(trajectories, labels, strict=True)]
        if len(unreadable) < len(trajectories):
            write_stream(out, results)
            if not unreadable:
                journal.remove()  # still held: no other run reads it half way
    order = {t.id: i for i, t in enumerate(trajectories)}
    unreadable.sort(key=lambda u: order[u[0]])
    return RelabelSummary(
        trajectories=len(trajectories),
        judged=len(trajectories) - len(unreadable),
        steps=sum(len(y) for y in labels if y is not None),
        unreadable=tuple(unreadable),
        stats=stats,
        reused=reused,
    )
