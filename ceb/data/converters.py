"""The converters behind ``ceb convert``: a :class:`Converter` per module (``CONVERTER``), named in :data:`CONVERTERS`.

Entries are lazy ``"module:attr"`` strings; ``ceb convert`` builds one command per entry, so a new converter is
its module plus one ``register`` line in :mod:`ceb.data`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

from ceb.data.trajectory import Step
from ceb.data.writer import ConvertedStream
from ceb.registry import Registry

__all__ = [
    "ACTOR",
    "CONVERTERS",
    "OBSERVATION",
    "OBSERVATIONS",
    "OUT_DIR",
    "REFERENCE_ACTIONS",
    "REFERENCE_OBSERVATION",
    "REQUIRED",
    "Converter",
    "ConverterOption",
    "Observation",
    "SummaryColumn",
    "next_state_observations",
]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""Default of an option the user must give."""


@dataclass(frozen=True, slots=True)
class ConverterOption:
    """One option of a converter's command, passed to :attr:`Converter.convert` by keyword.

    Attributes:
        name: The keyword; the flag is ``--name`` with ``_`` as ``-`` unless ``flag`` is given.
        type: As the command line parses it: ``Path``, ``str``, ``int``, or ``X | None`` for an optional one.
        default: :data:`REQUIRED` for an option that must be given.
        choices: Accepted values, checked before the converter runs; ``None`` accepts any.
    """

    name: str
    type: Any
    help: str
    default: Any = REQUIRED
    flag: str | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SummaryColumn:
    """A column of the table ``ceb convert`` prints: header and the cell of one stream."""

    title: str
    value: Callable[[ConvertedStream], str]


@dataclass(frozen=True, slots=True)
class Converter:
    """A source layout ``ceb convert`` can turn into streams.

    Attributes:
        help: One-line summary, blank line, details.
        convert: Called with one keyword per option (:data:`OUT_DIR` included); raises :class:`~ceb.errors.CEBError`.
        options: In ``--help`` order.
        columns: Printed after stream, trajectories, steps and positive rate.
    """

    help: str
    convert: Callable[..., list[ConvertedStream]]
    options: tuple[ConverterOption, ...]
    columns: tuple[SummaryColumn, ...] = ()


OUT_DIR = ConverterOption("out_dir", Path, "Directory for the stream files.", default=Path("streams"), flag="--out")

ACTOR = ConverterOption("actor", str | None, "Actor name when the predictions do not carry one.", default=None)
"""Option of the converters that read a predictions file (:mod:`ceb.data.predictions`)."""

Observation = Literal["next-state", "reference", "empty"]
"""What the Mind2Web and AMEX converters write as ``o_t``; those benchmarks record no response.

``"next-state"`` (default): the next step's state (empty after the last): the page after the human's action,
not the agent's.
``"reference"``: :data:`REFERENCE_OBSERVATION` and the human's action, from which the label is computed, so it
leaks the answer to critic and labeller (issue 32; only to compare with old streams). ``"empty"``: nothing."""

OBSERVATIONS: tuple[Observation, ...] = get_args(Observation)
"""Every :data:`Observation`, the default first."""

OBSERVATION = ConverterOption(
    "observation",
    str,
    "What each step's observation holds: next-state (the next step's page or screen: the page after the human's "
    "action, not after the agent's; empty after the last step), empty, or reference (the human's recorded action: "
    "SHOWS THE REFERENCE ANSWER, from which the labels are computed, to the critic and the labeller; only to compare "
    "with old streams).",
    default="next-state",
    choices=OBSERVATIONS,
)

REFERENCE_OBSERVATION = "reference action executed: "
"""Prefix of a ``"reference"`` observation; streams from before issue 32 have it on every step."""

REFERENCE_ACTIONS = "reference_actions"
"""``meta`` key holding the human's action of each step (list of str), for the ``ceb relabel`` judge only.

``meta`` never reaches a stage (:meth:`~ceb.data.trajectory.Trajectory.blinded`)."""


def next_state_observations(steps: Sequence[Step]) -> tuple[Step, ...]:
    """``steps`` with each observation the next step's (already clipped) state, the last empty."""
    return tuple(
        replace(step, observation=steps[t + 1].state if t + 1 < len(steps) else "") for t, step in enumerate(steps)
    )


CONVERTERS: Registry[Converter] = Registry("converter")
"""Every converter by name, in :mod:`ceb.data`'s declaration order."""
