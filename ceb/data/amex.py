"""Convert AMEX episodes joined with an agent's per-step predictions into trajectory streams (domain ``mobile``).

AMEX (Chai et al., 2024, "Android Multi-annotation Expo"; Hugging Face ``Yuxiang007/AMEX``) records human
episodes on Android apps: an instruction, one screenshot per step with the human's action, and per screenshot
an annotation of its interactive elements. Like Mind2Web it is offline: the agent predicts one action per
recorded screen and the episode then moves on along the human's path. The converter joins the episodes with
one agent's predictions and writes one stream per actor, ``amex-<actor>.jsonl``.

Input layout:
    Episode files (the dataset's ``instruction_anno`` folder), one JSON object per file. Fields read:
    ``episode_id`` (str, unique), ``instruction`` (str) and ``steps`` (non-empty list). Per step:
    ``step_id`` (int, unique within the episode), ``image_path`` (str, the screenshot's file name),
    ``action`` (non-empty str; the dataset uses ``TAP``, ``SWIPE``, ``TYPE``, ``PRESS_BACK``, ``PRESS_HOME``,
    ``PRESS_ENTER``, ``TASK_COMPLETE``, ``TASK_IMPOSSIBLE``; any name is accepted), ``touch_coord`` ([x, y]
    in screen pixels; required when ``action`` is ``TAP``), ``lift_coord`` ([x, y], optional, shown for
    swipes), ``type_text`` (str or null, optional), ``device_dim`` ([width, height] in pixels; required
    when the predictions are not in pixels) and ``package_name`` (str, optional; the first step's becomes
    ``env``). A directory argument means every ``*.json`` file under it, at any depth (archives unpack
    into nested folders), in a fixed order: :func:`~ceb.data.sources.json_files_under`.

    Element files (the dataset's ``element_anno`` folder, searched at any depth): one JSON object per
    screenshot, named after the screenshot's stem (``<image_path stem>.json``; a stem found twice is an
    error). Fields read: ``clickable_elements`` (list), each with ``bbox`` ([x1, y1, x2, y2] in the pixels
    of ``touch_coord``; corners in either order), ``xml_desc`` (list of str, optional) and ``functionality``
    (str, optional). Assumed, not verified here: the screenshot, the boxes and ``touch_coord`` share one
    pixel frame of size ``device_dim``.

    Predictions (a format defined here): a JSONL file with one object per predicted step, or a ``.json``
    file holding a list of such objects. Keys, named after the episode fields they predict:

    - ``episode_id`` (str) and ``step_id`` (int): the step predicted.
    - ``action`` (non-empty str): the predicted action type, in the dataset's names (``TAP``, ...).
    - ``touch_coord`` ([x, y], required for ``TAP``) and ``lift_coord`` ([x, y], optional): in the frame
      chosen by ``convert_amex(coords=...)``: ``"pixel"`` (default), ``"unit"`` (fractions of
      ``device_dim`` in [0, 1]) or ``"permille"`` (0 to 1000, as many vision-language models answer).
    - ``type_text`` (str or null, optional), ``reasoning`` (str or null, optional).
    - ``actor`` (non-empty str, optional when ``convert_amex(actor=...)`` is given).
    - ``actor_logprobs`` (list of numbers <= 0, optional).

    Any other key is rejected. An episode enters an actor's stream when that actor predicted at least one of
    its steps; it must then have a prediction for every step.

Output, per step (the stream format): ``state`` is :func:`render_elements` of the screen's clickable elements (the
paper's "visible clickable element list", section 3.2); ``action`` is the prediction rendered as
``[TAP] (x, y) on [i] <element>``, ``[TYPE] "text"``, ``[SWIPE] (x, y) -> (x, y)`` or ``[PRESS_BACK]``, with
coordinates in pixels and ``[i]`` the clickable element of the state that holds the point; ``op`` is the
action type, ``element`` that ``[i] <element>``, ``value`` the typed text; ``label`` is
:func:`amex_step_label` (the rule lives in :mod:`ceb.data.references`, which ``ceb regenerate`` judges
regenerated actions with).

Labels. The paper scores TAP steps only (appendix "Experimental Details"): a step whose reference action is
``TAP`` is positive when the predicted action is ``TAP`` and its touch point lies inside the box of the element
the human touched (edges included); any other prediction is negative. The human's element is the smallest
clickable element whose box holds the reference ``touch_coord`` (:func:`touched_box`). Steps whose reference
action is not ``TAP`` get a null label (the paper gives no rule for them), and so do ``TAP`` steps whose
reference point lies in no clickable box (no box to compare against). ``ConvertedStream.positive_rate`` is
taken over the labelled steps (NaN when there are none); the null counts by reason are logged
(``amex.stream_written``).

Observation. Nothing after an action is recorded but the next screenshot, the screen the human's action ``t``
led to. With ``observation="next-state"`` (the default) ``o_t`` is step ``t + 1``'s ``state`` (its clickable
elements, within ``state_chars``), and empty after the last step: the page after the human's action, not after
the agent's. ``observation="reference"`` writes ``"reference action executed: "`` and the human's action ``t``
rendered like an action instead: the label is computed from that action, so it shows the reference answer to the
critic's history and the labeller (issue 32); it is kept only to compare with streams converted before.
``observation="empty"`` writes empty observations.

Reference actions. Each trajectory's ``meta["reference_actions"]`` (:data:`~ceb.data.converters.REFERENCE_ACTIONS`)
lists the human's actions, one per step, rendered like an action: ``meta`` reaches no stage, and the LLM judge
of ``ceb relabel`` compares each step with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ceb.data.amex_episodes import Episode, GoldStep, element_files, episode_files, read_elements, read_episode
from ceb.data.amex_predictions import Prediction, load_predictions
from ceb.data.amex_screen import (
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
    """Convert AMEX episodes and an agent's predictions into one trajectory stream per actor.

    Trajectory ids are ``amex/<actor>/<episode_id>``; domain ``mobile``; ``task`` is the ``instruction``;
    ``env`` the first step's ``package_name``; ``meta`` holds ``episode_id`` and ``file``. Streams follow the
    episode files' order; only episodes the actor predicted are written. The module docstring gives the input
    layout, the per-step fields and the label rule.

    Args:
        episodes: One episode file, a directory of them at any depth (``instruction_anno``), or a sequence
            of files, in stream order.
        predictions: The predictions file (``.jsonl``, or ``.json`` holding a list).
        out_dir: Directory for the ``.jsonl`` streams; created if missing, existing streams replaced.
        elements: The ``element_anno`` directory. Default: ``element_anno`` beside the episode directory
            (for a directory argument) or beside the first episode file's directory.
        actor: Actor name for prediction records without an ``actor`` key.
        coords: Frame of predicted points: ``"pixel"``, ``"unit"`` or ``"permille"`` (of ``device_dim``).
        state_chars: Budget of each state in characters (:func:`render_elements`).
        observation: ``"next-state"``, ``"reference"`` (shows the reference answer to the models) or
            ``"empty"``; see the module docstring and :data:`~ceb.data.converters.Observation`.

    Returns:
        One summary per stream written, actors sorted by name. ``dataset`` is ``"amex"``, ``blocked_turns``
        0, ``skipped`` empty, ``positive_rate`` over labelled steps only (NaN when none), ``sources`` the
        episode files then the predictions file.

    Raises:
        ConfigError: ``state_chars`` is below 200, or ``coords`` / ``observation`` is not a known mode.
        DataError: A file is missing, not valid JSON, or breaks the layout (the problem names the file, the
            ``episode_id`` as ``trajectory_id`` and the step, or the predictions line, and the field); a
            prediction names an unknown episode or ``step_id``, repeats a step, lacks a field its action
            needs, or has no actor; a predicted episode lacks a prediction for one of its steps.
    """
    if state_chars < MIN_STATE_CHARS:
        raise ConfigError(f"state_chars must be at least {MIN_STATE_CHARS}, got {state_chars}")
    if coords not in ("pixel", "unit", "permille"):
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
            choices=("pixel", "unit", "permille"),
        ),
        OBSERVATION,
    ),
)
"""``ceb convert amex`` (:data:`ceb.data.converters.CONVERTERS`)."""


# --- episodes and element annotations -----------------------------------------------------------------


# --- building a trajectory ----------------------------------------------------------------------------


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


# --- small helpers ------------------------------------------------------------------------------------


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
