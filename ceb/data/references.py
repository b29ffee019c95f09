"""Judging an action against a step's reference: the converters' label rules, in one place.

The offline converters label each step by comparing the agent's action with the dataset's reference
(paper appendix "Experimental Details"). ``ceb convert mind2web`` labels the logged action with
:func:`mind2web_step_label`, ``ceb convert amex`` with :func:`amex_step_label` (its human's element:
:func:`amex_gold_box`); ``ceb regenerate`` judges a regenerated action with the same functions, fed by
:func:`step_references` (each step's reference, read again from the files the stream was converted from), so a
regenerated action and a logged one are held to one rule.

A regenerated action names an element the way the stream's state shows them (:data:`ACTION_SPACES`): a
Mind2Web element by its ``backend_node_id`` (:func:`~ceb.data.mind2web_dom.element_ids` of the page), an AMEX
element by its index ``[i]`` in the clickable-element list (:func:`screen_element_ids`; it is tapped at its
box's centre).

The reference *action* itself, as text, is what the LLM judge of ``ceb relabel`` compares each step with:
:func:`reference_actions` reads it from the trajectory's evaluation-only ``meta`` (the converters write it there,
never into a prompt).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from ceb.data.amex_episodes import Episode, GoldStep, element_files, episode_files, read_elements, read_episode
from ceb.data.amex_screen import TAP, Box, Element, inside, touched_box
from ceb.data.converters import REFERENCE_ACTIONS, REFERENCE_OBSERVATION
from ceb.data.mind2web_dom import element_ids
from ceb.data.mind2web_tasks import iter_all_tasks, task_files
from ceb.data.trajectory import Trajectory
from ceb.errors import DataError, Problem

__all__ = [
    "ACTION_SPACES",
    "ActionSpace",
    "AmexReference",
    "Mind2WebReference",
    "StepReference",
    "amex_gold_box",
    "amex_references",
    "amex_step_label",
    "canonical_op",
    "mind2web_references",
    "mind2web_step_label",
    "reference_actions",
    "screen_element_ids",
    "step_references",
]

_OP_ALIASES = {"HOVER": "CLICK", "ENTER": "CLICK"}


def reference_actions(trajectory: Trajectory) -> tuple[str | None, ...]:
    """The human's recorded action of each step as text, shape ``(T,)``; ``None`` where the stream carries none.

    Read from ``meta["reference_actions"]`` (:data:`~ceb.data.converters.REFERENCE_ACTIONS`, one string per step,
    as ``ceb convert mind2web`` and ``ceb convert amex`` write it). A stream converted before that (or with
    ``observation="reference"``) and without the key has it in each observation after
    :data:`~ceb.data.converters.REFERENCE_OBSERVATION`, which is read instead. An executed stream (InterCode)
    has neither: every entry is ``None``. Only the judge may read these (paper appendix "LLM-as-Judge Label
    Analysis"): they are the answer the step labels are computed from.
    """
    listed = trajectory.meta.get(REFERENCE_ACTIONS)
    if isinstance(listed, list) and len(listed) == len(trajectory.steps):
        return tuple(r if isinstance(r, str) and r.strip() else None for r in listed)
    out: list[str | None] = []
    for step in trajectory.steps:
        text = step.observation[len(REFERENCE_OBSERVATION) :]
        out.append(text if step.observation.startswith(REFERENCE_OBSERVATION) and text.strip() else None)
    return tuple(out)


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


def amex_step_label(
    gold_action: str,
    gold_box: Box | None,
    predicted_action: str,
    predicted_point: tuple[float, float] | None,
) -> int | None:
    """Ground-truth label of one AMEX step (paper appendix "Experimental Details").

    Only ``TAP`` reference steps are scored: positive when the predicted action is ``TAP`` and the predicted
    touch point lies inside the human's element box (edges included), else negative. Action names compare
    case-insensitively.

    Args:
        gold_action: The reference step's ``action``.
        gold_box: Box of the element the human touched (:func:`amex_gold_box`), in pixels, or ``None`` when the
            point lies in no clickable box.
        predicted_action: The agent's action type.
        predicted_point: The agent's touch point in pixels, or ``None``.

    Returns:
        1 or 0; ``None`` when the reference action is not ``TAP`` or ``gold_box`` is ``None``.
    """
    if gold_action.strip().upper() != TAP or gold_box is None:
        return None
    if predicted_action.strip().upper() != TAP or predicted_point is None:
        return 0
    return int(inside(predicted_point, gold_box))


def amex_gold_box(gold: GoldStep, screen: Sequence[Element]) -> Box | None:
    """The box of the element the human touched: the smallest clickable box holding ``touch_coord``, or ``None``."""
    index = touched_box(gold.touch, [e.box for e in screen]) if gold.touch is not None else None
    return screen[index].box if index is not None else None


class StepReference(Protocol):
    """What a regenerated action of one step is judged against."""

    def label(self, element_id: str | None, op: str) -> int | None:
        """The converter's label of an action naming ``element_id`` (as the state shows it) with ``op``."""
        ...


@dataclass(frozen=True, slots=True)
class AmexReference:
    """What an AMEX step's action is judged against.

    Attributes:
        action: The reference step's ``action``.
        box: The human's element box (:func:`amex_gold_box`), ``None`` when there is none.
        screen: The screen's clickable element boxes, in the state's order (``[i]`` is ``screen[i]``).
    """

    action: str
    box: Box | None
    screen: tuple[Box, ...]

    def label(self, element_id: str | None, op: str) -> int | None:
        """:func:`amex_step_label` of ``op`` at the centre of element ``[element_id]``'s box (no point without one)."""
        point = None
        if element_id is not None and element_id.isdigit() and int(element_id) < len(self.screen):
            x1, y1, x2, y2 = self.screen[int(element_id)]
            point = ((x1 + x2) / 2, (y1 + y2) / 2)
        return amex_step_label(self.action, self.box, op, point)


_SCREEN_LINE = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def screen_element_ids(state: str) -> list[str]:
    """The indices ``[i]`` of the clickable elements an AMEX state lists (elements cut for length are not)."""
    return list(dict.fromkeys(m.group(1) for m in _SCREEN_LINE.finditer(state)))


@dataclass(frozen=True, slots=True)
class ActionSpace:
    """The actions a domain's regenerated step may take, as its converter represents them.

    Attributes:
        operations: The operation names.
        element_ids: The names of the elements a state shows.
    """

    operations: tuple[str, ...]
    element_ids: Callable[[str], list[str]]


ACTION_SPACES: dict[str, ActionSpace] = {
    "web": ActionSpace(("CLICK", "TYPE", "SELECT"), element_ids),
    "mobile": ActionSpace(
        (TAP, "TYPE", "SWIPE", "PRESS_BACK", "PRESS_HOME", "PRESS_ENTER", "TASK_COMPLETE", "TASK_IMPOSSIBLE"),
        screen_element_ids,
    ),
}
"""Per stream domain: Mind2Web's operations (``web``) and AMEX's action names (``mobile``)."""


def step_references(
    trajectories: Sequence[Trajectory],
    tasks: str | Path | Sequence[str | Path] | None = None,
    elements: str | Path | None = None,
) -> dict[tuple[str, int], StepReference]:
    """The reference of every step, keyed by ``(trajectory id, step)``: Mind2Web's or AMEX's, by the meta.

    A trajectory whose meta has ``annotation_id`` is judged by :func:`mind2web_references` (``tasks``); one
    with ``episode_id`` by :func:`amex_references` (``elements``).

    Args:
        trajectories: Streams written by ``ceb convert mind2web`` or ``ceb convert amex``.
        tasks: Mind2Web task files or folders (``None``: each trajectory's ``meta["file"]``).
        elements: AMEX ``element_anno`` folder (``None``: beside each episode file's folder).

    Returns:
        One :class:`StepReference` per step of every trajectory (``sum(len(t.steps))`` entries).

    Raises:
        DataError: A trajectory converted from neither (names the stream file and line and ``meta``), or as
            :func:`mind2web_references` and :func:`amex_references` raise.
    """
    web = [t for t in trajectories if "annotation_id" in t.meta]
    mobile = [t for t in trajectories if "episode_id" in t.meta and "annotation_id" not in t.meta]
    for trajectory in trajectories:
        if "annotation_id" not in trajectory.meta and "episode_id" not in trajectory.meta:
            raise _problem(
                trajectory,
                "meta",
                "no dataset task to judge against: regeneration judges Mind2Web and AMEX streams written by "
                "`ceb convert` (their meta names the task: annotation_id or episode_id)",
            )
    refs: dict[tuple[str, int], StepReference] = {}
    if web:
        refs.update(mind2web_references(web, tasks))
    if mobile:
        refs.update(amex_references(mobile, elements))
    return refs


def _problem(trajectory: Trajectory, field: str, message: str) -> DataError:
    path, _, line = trajectory.source.rpartition(":")
    return DataError(Problem(path or "<stream>", int(line) if line.isdigit() else 0, field, message, trajectory.id))


def amex_references(
    trajectories: Sequence[Trajectory], elements: str | Path | None = None
) -> dict[tuple[str, int], AmexReference]:
    """The reference of every step of AMEX ``trajectories``, keyed by ``(trajectory id, step)``.

    Each trajectory's episode is read again from its ``meta["file"]``, as ``ceb convert amex`` wrote it, and
    each screen from ``elements`` (the ``element_anno`` folder), by default ``element_anno`` beside the episode
    file's folder, as the converter finds it.

    Raises:
        DataError: A trajectory has no ``file`` in its meta, its episode is not that file's, its step count
            differs, or an episode or element file cannot be read.
    """
    out: dict[tuple[str, int], AmexReference] = {}
    screens_of: dict[Path, dict[str, Path]] = {}
    for trajectory in trajectories:
        file = trajectory.meta.get("file")
        if not isinstance(file, str):
            raise _problem(trajectory, "meta.file", "no AMEX episode file to judge against")
        episode: Episode = read_episode(Path(file))
        if episode.episode_id != trajectory.meta.get("episode_id") or len(episode.steps) != len(trajectory.steps):
            raise _problem(
                trajectory, "meta.episode_id", f"{file} holds episode {episode.episode_id!r} of another shape"
            )
        element_dir = Path(elements) if elements is not None else episode_files(Path(file))[1]
        if element_dir not in screens_of:
            screens_of[element_dir] = element_files(element_dir)
        for t, gold in enumerate(episode.steps):
            screen = read_elements(element_dir, screens_of[element_dir], episode, t)
            out[(trajectory.id, t)] = AmexReference(
                gold.action, amex_gold_box(gold, screen), tuple(e.box for e in screen)
            )
    return out


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
    wanted: dict[str, list[Trajectory]] = {}
    files: list[str | Path] = []
    for trajectory in trajectories:
        aid, file = trajectory.meta.get("annotation_id"), trajectory.meta.get("file")
        # A task whose rows run across Hub shards names every shard (ceb.data.mind2web).
        named = [file] if isinstance(file, str) else file if isinstance(file, list) else None
        if not isinstance(aid, str) or (
            tasks is None and (not named or not all(isinstance(f, str) and f for f in named))
        ):
            missing = "annotation_id" if not isinstance(aid, str) else "file"
            raise _problem(
                trajectory,
                f"meta.{missing}",
                "no Mind2Web task to judge against: regeneration judges Mind2Web streams written by "
                "`ceb convert mind2web` (their meta names the task)",
            )
        wanted.setdefault(aid, []).append(trajectory)
        if tasks is None:
            files.extend(str(f) for f in named or () if str(f) not in files)
    found: dict[str, tuple[Mind2WebReference, ...]] = {}
    read = iter_all_tasks(task_files(tasks if tasks is not None else files), need_reprs=False, skip_cut_edges=True)
    for task in read:
        if task.annotation_id in wanted and task.annotation_id not in found:
            found[task.annotation_id] = tuple(Mind2WebReference(a.positive, a.op) for a in task.actions)
    out: dict[tuple[str, int], Mind2WebReference] = {}
    for aid, group in wanted.items():
        for trajectory in group:
            refs = found.get(aid)
            if refs is None:
                raise _problem(trajectory, "meta.annotation_id", f"task {aid!r} is in none of the task files")
            if len(refs) != len(trajectory.steps):
                raise _problem(
                    trajectory,
                    "steps",
                    f"{len(trajectory.steps)} steps, but task {aid!r} has {len(refs)} actions",
                )
            out.update(((trajectory.id, t), r) for t, r in enumerate(refs))
    return out
