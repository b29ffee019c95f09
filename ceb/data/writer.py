"""The output side of every converter: its streams, written all-or-nothing, and the summary each returns.

Either the trajectories are built first and written once (:func:`write_converted`, via
:func:`~ceb.data.reader.write_stream`), or they are written as they are read into a staging folder beside the
output and moved into place only when every source has been read (:class:`StagedStreams`: memory does not
grow with the output). An error leaves no half-converted set of streams.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO

from ceb.data.reader import encode_trajectory, write_stream
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem, StreamValidationError, with_path

__all__ = [
    "MAX_FIELD_MB",
    "MAX_LOG_MB",
    "ConvertedStream",
    "SkippedTrajectory",
    "StagedStreams",
    "check_log_size",
    "stream_file_names",
    "write_converted",
]

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")

MB = 1_000_000
MAX_LOG_MB = 256
"""Default ``--max-log-mb``: MB (10^6 bytes) one source log may inflate to; refused before reading."""
MAX_FIELD_MB = 8
"""Default ``--max-field-mb``: MB of one UTF-8 text field (task, state, action, observation, reasoning)."""


def check_log_size(path: Path, size: int, max_mb: float) -> None:
    """Refuse a source log whose inflated ``size`` (bytes) exceeds ``max_mb`` MB.

    Raises:
        DataError: Names the file, its size and the limit.
    """
    if size > max_mb * MB:
        message = f"inflates to {size / MB:,.1f} MB, over the limit of {max_mb:g} MB a log (--max-log-mb)"
        raise DataError(Problem(str(path), 0, "<file>", message))


@dataclass(frozen=True, slots=True)
class SkippedTrajectory:
    """A source trajectory left out of a stream.

    Attributes:
        reason: ``"no actions"`` or ``"empty action"``.
        steps: Steps it held, after dropping ``"blocked"`` placeholders.
        step: 0-based index of the first empty action (``"empty action"`` only).
    """

    id: str
    reason: str
    steps: int
    step: int | None = None


@dataclass(frozen=True, slots=True)
class ConvertedStream:
    """Summary of one written stream.

    Attributes:
        dataset: ``"bash"``/``"sql"`` (InterCode), ``"mind2web"``, ``"amex"``, ``"chat"`` or ``"inspect"``.
        actor: The agent (InterCode's model directory, ``gpt-4``; ``"several"`` for a mixed chat stream).
        positive_rate: Share of labelled steps with label 1, in [0, 1]; NaN when none is labelled.
        blocked_turns: InterCode's ``"blocked"`` turns (PaLM refusals, nothing executed) dropped.
        sources: Source files in stream order (InterCode: relative to its root).
    """

    path: Path
    dataset: str
    actor: str
    trajectories: int
    steps: int
    positive_rate: float
    skipped: tuple[SkippedTrajectory, ...]
    blocked_turns: int
    sources: tuple[str, ...]


def write_converted(
    path: Path,
    trajectories: Sequence[Trajectory],
    *,
    dataset: str,
    actor: str,
    sources: Iterable[str],
    skipped: Iterable[SkippedTrajectory] = (),
    blocked_turns: int = 0,
) -> ConvertedStream:
    """Write one stream with :func:`~ceb.data.reader.write_stream` (replacing ``path``) and summarise it.

    Raises:
        DataError: A trajectory breaks the stream format.
    """
    out = write_stream(path, trajectories)
    labels = [s.label for t in trajectories for s in t.steps]
    labelled = [label for label in labels if label is not None]
    return ConvertedStream(
        path=out,
        dataset=dataset,
        actor=actor,
        trajectories=len(trajectories),
        steps=len(labels),
        positive_rate=sum(labelled) / len(labelled) if labelled else math.nan,
        skipped=tuple(skipped),
        blocked_turns=blocked_turns,
        sources=tuple(sources),
    )


def stream_file_names(prefix: str, actors: Iterable[str], where: Path, what: str = "actor") -> dict[str, str]:
    """``actor -> <prefix>-<actor>.jsonl``, runs of file-unsafe characters replaced by ``_``.

    Raises:
        DataError: Two actors map to one file name (names ``where`` and ``what``).
    """
    files: dict[str, str] = {}
    taken: dict[str, str] = {}
    for name in actors:
        file = f"{prefix}-{_UNSAFE_NAME.sub('_', name)}.jsonl"
        if file in taken:
            raise DataError(
                Problem(str(where), 0, what, f"{what}s {taken[file]!r} and {name!r} would both write {file}")
            )
        taken[file] = name
        files[name] = file
    return files


def _origin(trajectory: Trajectory, out: Path, line: int) -> tuple[str, int]:
    """A problem's place: the trajectory's ``source`` when it has one, else ``out`` at ``line``."""
    if not trajectory.source:
        return str(out), line
    path, _, at = trajectory.source.rpartition(":")
    return (path, int(at)) if path and at.isdigit() else (trajectory.source, 0)


@dataclass
class _Staged:
    """One stream being staged, with its running counts."""

    name: str
    file: IO[bytes]
    trajectories: int = 0
    steps: int = 0
    labelled: int = 0
    positive: int = 0
    ids: set[str] = field(default_factory=set)


class StagedStreams:
    """Streams written a trajectory at a time into a hidden staging folder beside ``out_dir`` (same file system).

    A context manager: leaving it without :meth:`commit` deletes the staging folder, ``out_dir`` untouched. Memory
    holds one trajectory and each stream's ids. ``names`` maps keys to file names (:func:`stream_file_names`);
    ``max_field_mb`` bounds each text field (:data:`MAX_FIELD_MB`).
    """

    def __init__(self, out_dir: str | Path, names: dict[str, str], max_field_mb: float = MAX_FIELD_MB) -> None:
        self.out_dir = Path(out_dir)
        self._max_field = max_field_mb * MB
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._stage = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.", dir=self.out_dir.parent))
        self._streams = {key: _Staged(name, (self._stage / name).open("wb")) for key, name in names.items()}

    def __enter__(self) -> StagedStreams:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for stream in self._streams.values():
            with contextlib.suppress(OSError):  # a full disk fails the flush again; the staging folder goes anyway
                stream.file.close()
        shutil.rmtree(self._stage, ignore_errors=True)

    def add(self, key: str, trajectory: Trajectory) -> None:
        """Append ``trajectory`` to stream ``key``.

        Raises:
            DataError: It breaks the format, repeats an id or has a field over the bound (names its ``source``, else
                the stream file and line).
            OSError: The staged file cannot be written, naming the stream's file.
        """
        stream = self._streams[key]
        line = stream.trajectories + 1
        path, at = _origin(trajectory, self.out_dir / stream.name, line)
        if trajectory.id in stream.ids:
            raise DataError(Problem(path, at, "id", f"duplicate id {trajectory.id!r}", trajectory.id))
        self._check_fields(trajectory, path, at)
        try:
            encoded = encode_trajectory(trajectory, Path(path), at)
        except StreamValidationError as exc:
            raise DataError(exc.problems[0]) from exc
        where = self.out_dir / stream.name
        try:
            stream.file.write(encoded + b"\n")
        except OSError as exc:  # a full disk, say: name the stream (the system names no file)
            raise with_path(exc, where) from exc
        stream.ids.add(trajectory.id)
        stream.trajectories += 1
        for step in trajectory.steps:
            stream.steps += 1
            if step.label is not None:
                stream.labelled += 1
                stream.positive += step.label

    def _check_fields(self, trajectory: Trajectory, path: str, line: int) -> None:
        """Refuse a text field over ``max_field_mb`` UTF-8 bytes."""
        fields = [("task", trajectory.task, None)] + [
            (f"steps[{t}].{name}", getattr(step, name) or "", t)
            for t, step in enumerate(trajectory.steps)
            for name in ("state", "action", "observation", "reasoning")
        ]
        for name, text, t in fields:
            if len(text) * 4 > self._max_field and len(text.encode()) > self._max_field:
                message = f"is {len(text.encode()) / MB:,.1f} MB, over the limit of {self._max_field / MB:g} MB a field"
                raise DataError(Problem(path, line, name, f"{message} (--max-field-mb)", trajectory.id, t))

    def commit(
        self,
        *,
        dataset: str,
        actors: dict[str, str],
        sources: Iterable[str],
        skipped: Mapping[str, Sequence[SkippedTrajectory]] | None = None,
    ) -> list[ConvertedStream]:
        """Move every stream into ``out_dir`` (replacing same-named files); one summary each, in ``names`` order.

        Raises:
            DataError: A stream holds no trajectory.
            OSError: A stream cannot be written, naming its file.
        """
        sources = tuple(sources)
        for stream in self._streams.values():
            if stream.trajectories == 0:
                raise DataError(Problem(str(self.out_dir / stream.name), 0, "<file>", "no trajectories to write"))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        out: list[ConvertedStream] = []
        for key, stream in self._streams.items():
            dest = self.out_dir / stream.name
            try:
                stream.file.flush()
                os.fsync(stream.file.fileno())
                stream.file.close()
            except OSError as exc:
                raise with_path(exc, dest) from exc
            os.replace(self._stage / stream.name, dest)
            out.append(
                ConvertedStream(
                    path=dest,
                    dataset=dataset,
                    actor=actors[key],
                    trajectories=stream.trajectories,
                    steps=stream.steps,
                    positive_rate=stream.positive / stream.labelled if stream.labelled else math.nan,
                    skipped=tuple((skipped or {}).get(key, ())),
                    blocked_turns=0,
                    sources=sources,
                )
            )
        return out
