"""The converters behind ``ceb convert``: what each is called, what it takes, and where it lives.

A converter is a module with a :class:`Converter` value (by convention ``CONVERTER``): a help text, the
function that converts, and the command-line options that function takes. :data:`CONVERTERS` names each one
by a lazy ``"module:attr"`` entry, so adding a converter is its module plus one ``register`` line here (or a
``register`` call of its own, as ``tests/data/test_converters.py`` does); ``ceb convert`` builds one command
per entry when it runs, so nothing else needs editing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

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
"""The default of an option the user must give."""


@dataclass(frozen=True, slots=True)
class ConverterOption:
    """One option of a converter's command, passed to :attr:`Converter.convert` as a keyword argument.

    Attributes:
        name: The keyword; the flag is ``--`` and the name with ``_`` read as ``-`` unless ``flag`` is given.
        type: The value's type as the command line parses it: ``Path``, ``str``, ``int``, or ``X | None`` for
            an option that may be left out.
        help: One line for ``--help``.
        default: The value when the option is not given; :data:`REQUIRED` for an option that must be.
        flag: The flag, when it is not derived from ``name`` (``"--out"`` for ``out_dir``).
        choices: The values accepted, checked before the converter runs; ``None`` accepts any value.
    """

    name: str
    type: Any
    help: str
    default: Any = REQUIRED
    flag: str | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class SummaryColumn:
    """A column of the table ``ceb convert`` prints, one row per written stream.

    Attributes:
        title: The column header.
        value: The cell of one stream.
    """

    title: str
    value: Callable[[ConvertedStream], str]


@dataclass(frozen=True, slots=True)
class Converter:
    """A source layout ``ceb convert`` can turn into trajectory streams.

    Attributes:
        help: The command's help: a one-line summary, a blank line, then details.
        convert: Writes the streams and returns their summaries; called with one keyword argument per option,
            which must include :data:`OUT_DIR`. Errors are :class:`~ceb.errors.CEBError`.
        options: The command's options, in ``--help`` order.
        columns: Columns printed after the standard ones (stream, trajectories, steps, positive rate).
    """

    help: str
    convert: Callable[..., list[ConvertedStream]]
    options: tuple[ConverterOption, ...]
    columns: tuple[SummaryColumn, ...] = ()


OUT_DIR = ConverterOption("out_dir", Path, "Directory for the stream files.", default=Path("streams"), flag="--out")
"""The option every converter takes: where its streams go."""

ACTOR = ConverterOption("actor", str | None, "Actor name when the predictions do not carry one.", default=None)
"""The option of the converters that read a predictions file (:mod:`ceb.data.predictions`)."""

Observation = Literal["next-state", "reference", "empty"]
"""What the offline-benchmark converters (Mind2Web, AMEX) write as a step's ``observation`` ``o_t``.

Such a benchmark records no response to the agent's action: the episode moves on along the human's path
whatever the agent did. ``"next-state"`` (the default) writes the page or screen that comes next, the next
step's ``state`` (clipped as every state is; empty after the last step): the page after the human's action, not
after the agent's. ``"reference"`` writes the human's recorded action (:data:`REFERENCE_OBSERVATION` and the action):
that is what a step's ground-truth label is computed from, so it shows the reference answer to the critic (its
history) and to the labeller (issue 32); it is kept for comparison with streams converted before, never the
default. ``"empty"`` writes nothing."""

OBSERVATIONS: tuple[Observation, ...] = ("next-state", "reference", "empty")
"""Every :data:`Observation` mode, the default first."""

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
"""The option of the offline-benchmark converters (Mind2Web, AMEX): :data:`Observation`."""

REFERENCE_OBSERVATION = "reference action executed: "
"""Start of the observation the offline-benchmark converters write in their explicit ``observation="reference"``
mode: the human's recorded action that moved the episode on follows it. Streams converted before ``next-state``
became the default (issue 32) have it in every step; readers recognise such observations by it."""

REFERENCE_ACTIONS = "reference_actions"
"""Key of a trajectory's ``meta`` where the offline-benchmark converters keep the human's recorded action of
each step (a list of strings, one per step; Mind2Web's ``action_reprs``, AMEX's action rendered like an
agent's). ``meta`` is evaluation-only and never reaches a stage (:meth:`~ceb.data.trajectory.Trajectory.blinded`);
the LLM judge of ``ceb relabel`` reads it (:func:`ceb.data.references.reference_actions`)."""


def next_state_observations(steps: Sequence[Step]) -> tuple[Step, ...]:
    """``steps`` with each observation the next step's state, and the last one empty (``"next-state"`` mode).

    The state is used as the converter wrote it, so the observation is clipped as a state is.
    """
    return tuple(
        replace(step, observation=steps[t + 1].state if t + 1 < len(steps) else "") for t, step in enumerate(steps)
    )


CONVERTERS: Registry[Converter] = Registry("converter")
"""Every converter by name, in the order :mod:`ceb.data` declares them (a converter module imports this one, so
the list is kept in the package, not here)."""
