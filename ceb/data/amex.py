"""Convert AMEX episodes joined with an agent's per-step predictions into streams (domain ``mobile``).

AMEX (Chai et al., 2024; hub ``Yuxiang007/AMEX``) records human Android episodes: an instruction, a screenshot
and the human's action per step, and each screenshot's interactive elements. It is offline like Mind2Web: the
episode moves on along the human's path. One stream per actor, ``amex-<actor>.jsonl``.

Input layout:
    Episode files (``instruction_anno``), one JSON object each: ``episode_id`` (unique), ``instruction``,
    ``steps`` (non-empty). Per step: ``step_id`` (int, unique in the episode), ``image_path``, ``action``
    (non-empty; the dataset's ``TAP``, ``SWIPE``, ``TYPE``, ``PRESS_BACK``, ``PRESS_HOME``, ``PRESS_ENTER``,
    ``TASK_COMPLETE``, ``TASK_IMPOSSIBLE``; any name accepted), ``touch_coord`` ([x, y] pixels, required for
    ``TAP``), optional ``lift_coord`` and ``type_text``, ``device_dim`` ([width, height], required unless
    predictions are in pixels), optional ``package_name`` (the first step's is ``env``). A directory means
    every ``*.json`` under it (:func:`~ceb.data.sources.json_files_under`).

    Element files (``element_anno``, any depth), one per screenshot named ``<image_path stem>.json`` (a stem
    found twice is an error): ``clickable_elements``, each with ``bbox`` ([x1, y1, x2, y2] in
    ``touch_coord``'s pixels, corners in either order), optional ``xml_desc`` (list of str) and
    ``functionality``. Assumed, not checked: screenshot, boxes and points share the ``device_dim`` frame.

    Predictions (ceb's format): JSONL, or a ``.json`` list, of objects with ``episode_id`` and ``step_id``;
    ``action`` (non-empty, the dataset's names); ``touch_coord`` (required for ``TAP``) and optional
    ``lift_coord`` in the ``coords=`` frame (``"pixel"``, ``"unit"``: fractions of ``device_dim``, or
    ``"permille"``: 0 to 1000); optional ``type_text``, ``reasoning``, ``actor`` (required unless ``actor=``)
    and ``actor_logprobs`` (numbers <= 0). Other keys are refused. A predicted episode needs a prediction for
    every step.

Output per step: ``state`` is :func:`render_elements` of the clickable elements (paper section 3.2);
``action`` is ``[TAP] (x, y) on [i] <element>``, ``[TYPE] "text"``, ``[SWIPE] (x, y) -> (x, y)`` or
``[PRESS_BACK]`` (pixels; ``[i]`` the element holding the point), with ``op``, ``element`` and ``value`` to
match. ``label`` is :func:`amex_step_label`: only ``TAP`` reference steps are scored (paper appendix
"Experimental Details"), against the smallest clickable box holding the human's point (:func:`touched_box`);
other steps, and ``TAP`` steps whose point is in no box, get a null label (counted by reason in
``amex.stream_written``). ``observation="next-state"`` (default) gives step ``t + 1``'s state (empty after the
last): the screen after the human's action, not the agent's; ``"reference"`` writes ``"reference action
executed: "`` and the human's action, which leaks the label (issue 32; kept to compare with old streams);
``"empty"`` writes none. ``meta["reference_actions"]`` lists the human's actions for the ``ceb relabel`` judge.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ceb.data.amex_episodes import Episode, GoldStep, element_files, episode_files, read_elements, read_episode
from ceb.data.amex_predictions import Prediction, load_predictions
from ceb.data.amex_screen import (
    COORDS,
    DEFAULT_STATE_CHARS,
    MIN_STATE_CHARS,
    TAP,
    Box,
    Coords,
    Element,
    describe_action,
    render,
    render_elements,
    to_pixels,
    touched_box,
)
from ceb.data.converters import (
    ACTOR,
    OBSERVATION,
    OBSERVATIONS,
    OUT_DIR,
    REFERENCE_ACTIONS,
    REFERENCE_OBSERVATION,
    Converter,
    ConverterOption,
    Observation,
    next_state_observations,
)
from ceb.data.references import amex_gold_box, amex_step_label
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, stream_file_names, write_converted
from ceb.errors import ConfigError, DataError, Problem
from ceb.logs import get_logger

__all__ = [
    "CONVERTER",
    "DEFAULT_STATE_CHARS",
    "Box",
    "Coords",
    "Observation",
    "amex_step_label",
    "convert_amex",
    "render_elements",
    "touched_box",
]


log = get_logger(__name__)


def convert_amex(
    episodes: str | Path | Sequence[str | Path],
    predictions: str | Path,
    out_dir: str | Path,
    *,
    elements: str | Path | None = None,
    actor: str | None = None,
    coords: Coords = "pixel",
    state_chars: int = DEFAULT_STATE_CHARS,
    observation: Observation = "next-state",
) -> list[ConvertedStream]:
    """One stream per actor from AMEX episodes and predictions (module docstring), actors sorted by name.

    Ids are ``amex/<actor>/<episode_id>``; ``task`` is the ``instruction``; ``meta`` holds ``episode_id`` and
    ``file``; ``positive_rate`` is over labelled steps (NaN when none). ``out_dir`` is created if missing.

    Args:
        episodes: An episode file, a directory (any depth) or several files, in stream order.
        predictions: ``.jsonl``, or ``.json`` holding a list.
        out_dir: Where the streams go; existing ones are replaced.
        elements: The ``element_anno`` directory; default: beside the episode directory (or first file's).
        actor: Name for predictions without ``actor``.
        coords: Frame of predicted points: ``"pixel"``, ``"unit"`` or ``"permille"`` (of ``device_dim``).
        state_chars: Character budget of each state (:func:`render_elements`), at least 200.
        observation: :data:`~ceb.data.converters.Observation`.

    Raises:
        ConfigError: ``state_chars`` below 200, or an unknown ``coords`` or ``observation``.
        DataError: A file missing, bad JSON or off-layout (names file, ``episode_id``, step or line, field); an
            unknown episode or ``step_id``, a repeated step, a missing field, no actor, or a predicted episode
            missing a step.
    """
    if state_chars < MIN_STATE_CHARS:
        raise ConfigError(f"state_chars must be at least {MIN_STATE_CHARS}, got {state_chars}")
    if coords not in COORDS:
        raise ConfigError(f"unknown coords {coords!r}; choose 'pixel', 'unit' or 'permille'")
    if observation not in OBSERVATIONS:
        raise ConfigError(f"unknown observation mode {observation!r}; choose one of {', '.join(OBSERVATIONS)}")
    files, default_elements = episode_files(episodes)
    element_dir = Path(elements) if elements is not None else default_elements
    if not element_dir.is_dir():
        raise DataError(
            Problem(str(element_dir), 0, "<file>", "no element_anno directory here; pass elements= explicitly")
        )
    screen_files = element_files(element_dir)
    pred_path = Path(predictions)
    by_actor = load_predictions(pred_path, actor)
    wanted: dict[str, list[str]] = {}
    for name, per_episode in by_actor.items():
        for eid in per_episode:
            wanted.setdefault(eid, []).append(name)

    built: dict[str, list[tuple[Trajectory, Counter[str]]]] = {name: [] for name in by_actor}
    seen: dict[str, Path] = {}
    for path in files:
        episode = read_episode(path)
        if episode.episode_id in seen:
            raise DataError(
                Problem(
                    str(path),
                    0,
                    "episode_id",
                    f"episode_id {episode.episode_id!r} repeats (first in {seen[episode.episode_id]})",
                    episode.episode_id,
                )
            )
        seen[episode.episode_id] = path
        names = wanted.get(episode.episode_id, [])
        if not names:
            continue
        screens = [read_elements(element_dir, screen_files, episode, t) for t in range(len(episode.steps))]
        for name in names:
            built[name].append(
                _trajectory(
                    episode,
                    screens,
                    name,
                    by_actor[name][episode.episode_id],
                    pred_path,
                    coords,
                    state_chars,
                    observation,
                )
            )

    for name, per_episode in by_actor.items():
        for eid, per_step in per_episode.items():
            if eid not in seen:
                first = next(iter(per_step.values()))
                raise DataError(
                    Problem(
                        str(pred_path),
                        first.line,
                        first.prefix + "episode_id",
                        f"unknown episode_id {eid!r} (actor {name!r}): no file among the {len(files)} episode "
                        "files has it",
                        eid,
                    )
                )

    sources = (*(str(p) for p in files), str(pred_path))
    out = Path(out_dir)
    stream_files = stream_file_names("amex", sorted(by_actor), pred_path)
    out.mkdir(parents=True, exist_ok=True)
    return [_write(out / stream_files[name], name, built[name], sources) for name in sorted(by_actor)]


CONVERTER = Converter(
    help="""Write one stream per agent from AMEX episodes joined with the agent's predictions.

state = the visible clickable elements; a TAP step is positive when the predicted point falls inside the
gold element's bounding box (the paper's rule); other steps carry no label.""",
    convert=convert_amex,
    options=(
        ConverterOption("episodes", Path, "AMEX instruction_anno folder (or episode JSON files)."),
        ConverterOption("predictions", Path, "The agent's per-step predictions (see ceb/data/amex.py)."),
        ConverterOption("elements", Path | None, "AMEX element_anno folder.", default=None),
        OUT_DIR,
        ACTOR,
        ConverterOption(
            "coords",
            str,
            "Predicted points in pixel, unit (0-1) or permille.",
            default="pixel",
            choices=COORDS,
        ),
        OBSERVATION,
    ),
)
"""``ceb convert amex``."""


def _trajectory(
    episode: Episode,
    screens: list[list[Element]],
    actor: str,
    predictions: dict[int, Prediction],
    pred_path: Path,
    coords: Coords,
    state_chars: int,
    observation: Observation,
) -> tuple[Trajectory, Counter[str]]:
    """The actor's trajectory for one episode, and its null labels counted by reason."""
    known = {s.step_id for s in episode.steps}
    for step_id, extra in predictions.items():
        if step_id not in known:
            raise DataError(
                Problem(
                    str(pred_path),
                    extra.line,
                    extra.prefix + "step_id",
                    f"unknown step_id {step_id}: episode {episode.episode_id!r} in {episode.file} has no such step",
                    episode.episode_id,
                )
            )
    steps: list[Step] = []
    references: list[str] = []
    reasons = Counter[str]()
    for t, (gold, screen) in enumerate(zip(episode.steps, screens, strict=True)):
        pred = predictions.get(gold.step_id)
        if pred is None:
            raise DataError(
                Problem(
                    str(pred_path),
                    0,
                    "step_id",
                    f"no prediction by actor {actor!r} for step_id {gold.step_id} (step {t} of episode_id "
                    f"{episode.episode_id!r} in {episode.file}); a predicted episode needs one for every step",
                    episode.episode_id,
                    t,
                )
            )
        step, reason = _step(episode, t, gold, screen, pred, pred_path, coords, state_chars, observation)
        steps.append(step)
        references.append(describe_action(gold.action, gold.touch, gold.lift, gold.type_text, screen)[0])
        if reason is not None:
            reasons[reason] += 1
    first_package = episode.steps[0].package_name
    trajectory = Trajectory(
        id=f"amex/{actor}/{episode.episode_id}",
        task=episode.instruction,
        domain="mobile",
        steps=next_state_observations(steps) if observation == "next-state" else tuple(steps),
        actor=actor,
        env=first_package,
        meta={"episode_id": episode.episode_id, "file": episode.file, REFERENCE_ACTIONS: references},
    )
    return trajectory, reasons


def _step(
    episode: Episode,
    t: int,
    gold: GoldStep,
    screen: list[Element],
    pred: Prediction,
    pred_path: Path,
    coords: Coords,
    state_chars: int,
    observation: Observation,
) -> tuple[Step, str | None]:
    """One output step, and why its label is null (``None`` when it has a label)."""
    if coords != "pixel" and gold.device_dim is None and (pred.touch or pred.lift):
        raise DataError(
            Problem(
                episode.file,
                0,
                f"steps[{t}].device_dim",
                f"missing: predicted points in {coords!r} coordinates ({pred.where} of {pred_path}) need the "
                "screen size to become pixels",
                episode.episode_id,
                t,
            )
        )
    touch = to_pixels(pred.touch, coords, gold.device_dim)
    lift = to_pixels(pred.lift, coords, gold.device_dim)
    text, element = describe_action(pred.action, touch, lift, pred.type_text, screen)
    gold_box = amex_gold_box(gold, screen)
    reason = None
    if gold.action != TAP:
        reason = "reference action is not TAP"
    elif gold_box is None:
        reason = "reference touch point in no clickable box"
    reference = ""
    if observation == "reference":
        executed, _ = describe_action(gold.action, gold.touch, gold.lift, gold.type_text, screen)
        reference = REFERENCE_OBSERVATION + executed  # shows the answer to the models: an explicit opt-in only
    step = Step(
        state=render(screen, gold.device_dim, state_chars),
        action=text,
        observation=reference,
        reasoning=pred.reasoning,
        op=pred.action,
        element=element,
        value=pred.type_text or None,
        actor_logprobs=pred.actor_logprobs,
        label=amex_step_label(gold.action, gold_box, pred.action, touch),
    )
    return step, reason


def _write(
    path: Path, actor: str, built: list[tuple[Trajectory, Counter[str]]], sources: tuple[str, ...]
) -> ConvertedStream:
    trajectories = [traj for traj, _ in built]
    stream = write_converted(path, trajectories, dataset="amex", actor=actor, sources=sources)
    unlabelled = Counter[str]()
    for _, reasons in built:
        unlabelled.update(reasons)
    log.info(
        "amex.stream_written",
        path=str(stream.path),
        actor=actor,
        trajectories=stream.trajectories,
        steps=stream.steps,
        labelled=sum(1 for traj in trajectories for s in traj.steps if s.label is not None),
        unlabelled_by_reason=dict(unlabelled),
    )
    return stream
