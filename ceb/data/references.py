"""Step labels against the dataset's reference (paper appendix "Experimental Details"), one rule for all users.

``ceb convert`` labels logged actions and ``ceb regenerate`` labels regenerated ones with the same functions;
:func:`step_references` re-reads each step's reference from the source files. A regenerated action names an
element as the state shows it (:data:`ACTION_SPACES`): Mind2Web by ``backend_node_id``, AMEX by list index
``[i]`` (tapped at the box centre). :func:`reference_actions` gives the judge of ``ceb relabel`` the reference
action text from the evaluation-only ``meta``.
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
    """The human's action of each step as text, shape ``(T,)``; ``None`` where the stream has none.

    Read from ``meta["reference_actions"]``, else from observations after
    :data:`~ceb.data.converters.REFERENCE_OBSERVATION` (older streams); all ``None`` for executed streams
    (InterCode). Judge-only (paper appendix "LLM-as-Judge Label Analysis"): the labels are computed from these.
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
    """Mind2Web step label: 1 when the element is a ``pos_candidate`` and the op matches, else 0.

    Paper appendix "Experimental Details". Ops compare by :func:`canonical_op`; the typed value is not compared;
    a step with no ``pos_candidates`` (pruned target) is never positive. ``predicted_element`` is a
    ``backend_node_id`` or ``None``.
    """
    matches_element = predicted_element is not None and predicted_element in positive_ids
    return int(matches_element and canonical_op(predicted_op) == canonical_op(gold_op))


@dataclass(frozen=True, slots=True)
class Mind2WebReference:
    """A Mind2Web step's reference: the positive ``backend_node_id`` set and the gold ``operation.op``."""

    positive: frozenset[str]
    op: str

    def label(self, element_id: str | None, op: str) -> int:
        """:func:`mind2web_step_label` of choosing ``element_id`` with ``op``."""
        return mind2web_step_label(element_id, op, self.positive, self.op)


def amex_step_label(
    gold_action: str,
    gold_box: Box | None,
    predicted_action: str,
    predicted_point: tuple[float, float] | None,
) -> int | None:
    """AMEX step label (paper appendix "Experimental Details"): scored only on ``TAP`` reference steps.

    Positive when the prediction is ``TAP`` and ``predicted_point`` (pixels) lies in ``gold_box`` (edges
    included). Returns ``None`` when the reference is not ``TAP`` or ``gold_box`` is ``None``.
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
    """An AMEX step's reference: action, the human's box (or ``None``) and the screen's boxes (``[i]``)."""

    action: str
    box: Box | None
    screen: tuple[Box, ...]

    def label(self, element_id: str | None, op: str) -> int | None:
        """:func:`amex_step_label` of ``op`` at the centre of box ``[element_id]``."""
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
    """The actions a domain's regenerated step may take: operation names, and the element names a state shows."""

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
    """The reference of every step, keyed by ``(trajectory id, step)``.

    Dispatches on meta: ``annotation_id`` -> :func:`mind2web_references` (``tasks``), ``episode_id`` ->
    :func:`amex_references` (``elements``). ``None`` paths mean the ones recorded in ``meta["file"]``.

    Raises:
        DataError: A trajectory converted from neither (names file, line and ``meta``), or as the two callees.
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
    """References of AMEX ``trajectories``, re-read from ``meta["file"]`` and ``elements`` (default: beside it).

    Raises:
        DataError: No ``meta.file``, episode or step count differs, or a file cannot be read.
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
    """References of Mind2Web ``trajectories``, matched to tasks by ``meta["annotation_id"]``.

    Tasks come from ``tasks`` or, when ``None``, each trajectory's ``meta["file"]``.

    Raises:
        DataError: No ``annotation_id``/``file`` in meta, task not found, or step count differs (names file and
            line); a task file cannot be read.
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
