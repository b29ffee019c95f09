"""Judging an action against a step's reference: the converters' label rules, in one place.

The offline converters label each step by comparing the agent's action with the dataset's reference
(paper appendix "Experimental Details"). ``ceb convert mind2web`` labels the logged action with
:func:`mind2web_step_label`; ``ceb regenerate`` judges a regenerated action with the same function, fed by
:func:`mind2web_references` (the step's positive candidates and gold operation, read again from the task files
the stream was converted from), so a regenerated action and a logged one are held to one rule.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ceb.data.mind2web_tasks import iter_tasks, task_files
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem

__all__ = ["Mind2WebReference", "canonical_op", "mind2web_references", "mind2web_step_label"]

_OP_ALIASES = {"HOVER": "CLICK", "ENTER": "CLICK"}


def canonical_op(op: str) -> str:
    """``op`` as the dataset compares operations: upper case, ``HOVER`` and ``ENTER`` read as ``CLICK``."""
    upper = op.strip().upper()
    return _OP_ALIASES.get(upper, upper)


def mind2web_step_label(
    predicted_element: str | None,
    predicted_op: str,
    positive_ids: Collection[str],
    gold_op: str,
) -> int:
    """Ground-truth label of one Mind2Web step.

    The rule of the paper's appendix "Experimental Details": a step is positive when the predicted element is
    one of the step's ``pos_candidates`` and the predicted operation type equals the gold ``operation.op``.
    Operations compare case-insensitively, with ``HOVER`` and ``ENTER`` read as ``CLICK`` (the dataset maps
    them so in ``op``). The typed or selected value is not compared. A step whose ``pos_candidates`` is empty
    (the dataset's pruning can drop the target) is never positive.

    Args:
        predicted_element: ``backend_node_id`` the agent chose, or ``None`` for no element.
        predicted_op: The agent's operation.
        positive_ids: ``backend_node_id`` of every positive candidate of the step.
        gold_op: The step's ``operation.op``.

    Returns:
        1 when both element and operation match, else 0.
    """
    matches_element = predicted_element is not None and predicted_element in positive_ids
    return int(matches_element and canonical_op(predicted_op) == canonical_op(gold_op))


@dataclass(frozen=True, slots=True)
class Mind2WebReference:
    """What a Mind2Web step's action is judged against.

    Attributes:
        positive: ``backend_node_id`` of every positive candidate of the step.
        op: The gold ``operation.op``.
    """

    positive: frozenset[str]
    op: str

    def label(self, element_id: str | None, op: str) -> int:
        """:func:`mind2web_step_label` of an action choosing ``element_id`` with ``op``: 1 or 0."""
        return mind2web_step_label(element_id, op, self.positive, self.op)


def mind2web_references(
    trajectories: Sequence[Trajectory], tasks: str | Path | Sequence[str | Path] | None = None
) -> dict[tuple[str, int], Mind2WebReference]:
    """The reference of every step of Mind2Web ``trajectories``, keyed by ``(trajectory id, step)``.

    A trajectory is matched to its task by ``meta["annotation_id"]``, as ``ceb convert mind2web`` writes it.
    The tasks are read from ``tasks`` (task files or folders, as given to the converter) or, when ``None``, from
    each trajectory's ``meta["file"]`` (the task file the converter read, a path as it was given then).

    Raises:
        DataError: A trajectory has no ``annotation_id`` or ``file`` in its meta (not converted from Mind2Web),
            its task is in none of the files, or its step count differs from the task's (names the stream file
            and line); a task file cannot be read.
    """

    def problem(trajectory: Trajectory, field: str, message: str) -> DataError:
        path, _, line = trajectory.source.rpartition(":")
        return DataError(Problem(path or "<stream>", int(line) if line.isdigit() else 0, field, message, trajectory.id))

    wanted: dict[str, list[Trajectory]] = {}
    files: list[str | Path] = []
    for trajectory in trajectories:
        aid, file = trajectory.meta.get("annotation_id"), trajectory.meta.get("file")
        if not isinstance(aid, str) or (tasks is None and not isinstance(file, str)):
            missing = "annotation_id" if not isinstance(aid, str) else "file"
            raise problem(
                trajectory,
                f"meta.{missing}",
                "no Mind2Web task to judge against: regeneration judges Mind2Web streams written by "
                "`ceb convert mind2web` (their meta names the task)",
            )
        wanted.setdefault(aid, []).append(trajectory)
        if tasks is None and file not in files:
            files.append(str(file))
    found: dict[str, tuple[Mind2WebReference, ...]] = {}
    for path, layout in task_files(tasks if tasks is not None else files):
        for task in iter_tasks(path, layout, need_reprs=False):
            if task.annotation_id in wanted and task.annotation_id not in found:
                found[task.annotation_id] = tuple(Mind2WebReference(a.positive, a.op) for a in task.actions)
    out: dict[tuple[str, int], Mind2WebReference] = {}
    for aid, group in wanted.items():
        for trajectory in group:
            refs = found.get(aid)
            if refs is None:
                raise problem(trajectory, "meta.annotation_id", f"task {aid!r} is in none of the task files")
            if len(refs) != len(trajectory.steps):
                raise problem(
                    trajectory,
                    "steps",
                    f"{len(trajectory.steps)} steps, but task {aid!r} has {len(refs)} actions",
                )
            out.update(((trajectory.id, t), r) for t, r in enumerate(refs))
    return out
