"""The output side of every converter: writing its streams and the summary each returns.

A converter builds its trajectories first and writes only once every source has been read and checked, so an
error leaves no half-converted set of streams behind. :func:`write_converted` then writes one stream (through
the strict :func:`~ceb.data.reader.write_stream`) and counts it into a :class:`ConvertedStream`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ceb.data.reader import write_stream
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem

__all__ = ["ConvertedStream", "SkippedTrajectory", "stream_file_names", "write_converted"]

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class SkippedTrajectory:
    """A source trajectory left out of a stream, and why.

    Attributes:
        id: The trajectory id it would have had.
        reason: ``"no actions"`` or ``"empty action"``.
        steps: Steps it held (after dropping a ``"blocked"`` placeholder).
        step: 0-based index of the first empty action, for ``"empty action"``.
    """

    id: str
    reason: str
    steps: int
    step: int | None = None


@dataclass(frozen=True, slots=True)
class ConvertedStream:
    """Summary of one written stream.

    Attributes:
        path: The JSONL file written.
        dataset: The source: ``"bash"`` or ``"sql"`` for InterCode, ``"mind2web"``, ``"amex"``.
        actor: The agent whose steps the stream holds (InterCode's model directory name, ``gpt-4``).
        trajectories: Trajectories written.
        steps: Steps written.
        positive_rate: Share of the labelled steps with label 1, in [0, 1]; NaN when no step has a label.
        skipped: Source trajectories left out, in source order.
        blocked_turns: ``"blocked"`` placeholder turns dropped (InterCode's PaLM refusals; no action was
            executed).
        sources: Source files in stream order (InterCode: relative to its root; the offline GUI converters:
            the task or episode files, then the predictions file).
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
    """Write one converted stream and summarise it.

    Args:
        path: The ``.jsonl`` file to write (replaced if it exists).
        trajectories: The stream, in order.
        dataset: :attr:`ConvertedStream.dataset`.
        actor: :attr:`ConvertedStream.actor`.
        sources: :attr:`ConvertedStream.sources`.
        skipped: :attr:`ConvertedStream.skipped`.
        blocked_turns: :attr:`ConvertedStream.blocked_turns`.

    Returns:
        The summary, ``path`` as :func:`~ceb.data.reader.write_stream` returned it.

    Raises:
        DataError: A trajectory breaks the stream contract (from :func:`~ceb.data.reader.write_stream`).
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


def stream_file_names(prefix: str, actors: Iterable[str], where: Path) -> dict[str, str]:
    """``actor -> <prefix>-<actor>.jsonl``, each run of characters unsafe in a file name replaced by ``_``.

    Args:
        prefix: The dataset's file prefix (``mind2web``).
        actors: The actors, each given a file.
        where: The file the actor names came from, for the error.

    Returns:
        The file name (no directory) of each actor.

    Raises:
        DataError: Two actors map to one file name.
    """
    files: dict[str, str] = {}
    taken: dict[str, str] = {}
    for name in actors:
        file = f"{prefix}-{_UNSAFE_NAME.sub('_', name)}.jsonl"
        if file in taken:
            raise DataError(
                Problem(str(where), 0, "actor", f"actors {taken[file]!r} and {name!r} would both write {file}")
            )
        taken[file] = name
        files[name] = file
    return files
