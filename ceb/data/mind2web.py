"""Convert Mind2Web tasks joined with an agent's per-step predictions into trajectory streams (domain ``web``).

Mind2Web (Deng et al., 2023, OSU-NLP-Group/Mind2Web) is an offline benchmark: at every step the agent picks
one element of a recorded page and an operation, and the page then moves on along the human's recorded path,
whatever the agent picked. The converter joins the dataset's tasks with one agent's predictions and writes one
stream per actor, ``mind2web-<actor>.jsonl``.

Input layout:
    Task files come in two upstream layouts, told apart by suffix (or ``layout=``); both are read as a stream,
    one task at a time (:mod:`ceb.data.mind2web_tasks`), so a file's size does not bound what can be read.

    ``raw``: as released on the Hugging Face hub (``osunlp/Mind2Web``, ``data/train/train_<k>.json``; the
    test zips have the same shape): each a JSON list of task objects. Fields read, per task:
    ``annotation_id`` (str, unique over all task files), ``confirmed_task`` (str), ``website`` (str),
    ``domain`` and ``subdomain`` (str, optional, copied to ``meta``), ``actions`` (list, one per step) and
    ``action_reprs`` (list of str, one per action; read unless ``observation="empty"``). Per action:
    ``action_uid`` (str), ``operation.op`` (``CLICK``, ``TYPE`` or ``SELECT``), ``operation.value`` (str,
    optional), ``cleaned_html`` (str; every element carries a ``backend_node_id`` attribute),
    ``pos_candidates`` and ``neg_candidates`` (lists of candidate objects with ``backend_node_id``, str or
    int; ``tag`` and ``attributes``, a JSON-encoded object or an object, are read only for the predicted
    candidate). ``raw_html``, ``operation.original_op`` and every other field are ignored. A task file may
    also be a directory: its ``*.json`` files are read in natural name order (``train_2`` before
    ``train_10``).

    ``multimodal``: the hub's ``osunlp/Multimodal-Mind2Web`` Parquet files (``data/<split>-<k>-of-<n>-*.parquet``,
    splits ``train``, ``test_task``, ``test_website``, ``test_domain``), one row per action, a task's rows
    consecutive. Columns read (the card's ``dataset_info``): ``annotation_id``, ``confirmed_task``,
    ``website``, ``domain``, ``subdomain``, ``action_uid``, ``cleaned_html`` (strings); ``operation`` (a
    string holding the JSON object ``{"original_op", "value", "op"}``); ``pos_candidates`` and
    ``neg_candidates`` (lists of strings, each a JSON-encoded candidate whose ``backend_node_id`` is read at
    its top level or, failing that, from its JSON-encoded ``attributes``); ``action_reprs`` (the task's list
    of strings, on every row); ``target_action_index`` (the step's number as a string; optional, row order
    otherwise) and ``target_action_reprs`` (the step's string; optional, ``action_reprs[index]`` otherwise);
    a revision whose card gives either as ``sequence: string`` stores a list of one, read the same.
    ``raw_html`` and ``screenshot`` are never read. The Hub stores a split as shards cut at equal row counts,
    whatever task a cut falls in: consecutive Parquet files are read as one sequence of rows, so a task whose
    rows run on into the next shard is one task (:func:`~ceb.data.mind2web_tasks.iter_all_tasks`); its
    ``meta.file`` then lists every shard it spans. A task cut at the edge of the files given is refused,
    naming the shard that holds its other rows.

    Predictions (a format defined here): a JSONL file with one object per predicted step, or a ``.json``
    file holding a list of such objects. Keys:

    - ``annotation_id`` (str) and ``action_uid`` (str): the step predicted.
    - ``element_id`` (str, int or null; the key must be present): the predicted element's
      ``backend_node_id``; null when the agent chose no element.
    - ``op`` (non-empty str): the predicted operation. ``HOVER`` and ``ENTER`` count as ``CLICK``, as in the
      dataset's own ``op`` field; any other value is kept and simply never matches.
    - ``value`` (str or null, optional): text to type or option to select.
    - ``reasoning`` (str or null, optional): the agent's stated reason.
    - ``actor`` (non-empty str, optional when ``convert_mind2web(actor=...)`` is given): the agent's name.
    - ``actor_logprobs`` (list of numbers <= 0, optional): natural-log token probabilities of the answer.

    Any other key is rejected, so a misspelt key cannot pass unnoticed. A task enters an actor's stream when
    that actor predicted at least one of its steps; it must then have a prediction for every step.

    MindAct's predictions (``<name>_predictions_top<k>.json`` from OSU-NLP-Group/Mind2Web's
    ``src/action_prediction/metric.py``): a JSON list of rows ``["<annotation_id>_<action_uid>",
    "<backend_node_id>", "<OP> <value>"]``, the action being MindAct's ``op + " " + value``. A row
    ``[id, "", ""]`` (no candidate chosen, "None of the above") becomes op ``NONE`` with no element, label 0.
    The rows name no agent: ``actor=`` is required.

Output, per step (the stream format): ``state`` is :func:`dom_snippet` of ``cleaned_html`` around the *predicted*
element (never the gold one: the state must not point at the answer); ``action`` is ``[OP] <tag> text`` or
``[OP] <tag> text -> value``; ``op``, ``element`` (``<tag> text``) and ``value`` are the prediction's
fields; ``reasoning`` and ``actor_logprobs`` are copied; ``label`` is :func:`mind2web_step_label` (the rule
lives in :mod:`ceb.data.references`, which ``ceb regenerate`` judges regenerated actions with).

Observation. Mind2Web records no environment response. After step ``t`` the page becomes the one the human's
action ``t`` produced, which is step ``t + 1``'s page. With ``observation="next-state"`` (the default) ``o_t``
is step ``t + 1``'s ``state`` (the DOM snippet, within ``dom_chars``), and empty after the last step: the page
after the human's action, not after the agent's. ``observation="reference"`` writes
``"reference action executed: " + action_reprs[t]`` instead: the human's action, from which the step's label is
computed, so it shows the reference answer to the critic's history and the labeller (issue 32); it is kept
only to compare with streams converted before. ``observation="empty"`` writes empty observations.

Reference actions. Unless ``observation="empty"``, each trajectory's ``meta["reference_actions"]``
(:data:`~ceb.data.converters.REFERENCE_ACTIONS`) lists ``action_reprs``, one per step: ``meta`` reaches no stage,
and the LLM judge of ``ceb relabel`` compares each step with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

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
from ceb.data.mind2web_dom import DEFAULT_DOM_CHARS, ELEMENT_TEXT_CHARS, MIN_DOM_CHARS, dom_snippet, locate
from ceb.data.mind2web_predictions import PREDICTION_FORMATS, Prediction, load_predictions
from ceb.data.mind2web_tasks import LAYOUTS, Action, Layout, Task, iter_all_tasks, task_files
from ceb.data.references import canonical_op, mind2web_step_label
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, StagedStreams, stream_file_names
from ceb.errors import ConfigError, DataError, Problem
from ceb.logs import get_logger

__all__ = [
    "CONVERTER",
    "DEFAULT_DOM_CHARS",
    "NO_ELEMENT",
    "Observation",
    "canonical_op",
    "convert_mind2web",
    "dom_snippet",
    "mind2web_step_label",
]

NO_ELEMENT = "(no element)"
"""Shown in a step's action text (and by the prompts) where the agent chose no element."""
_TEXT_ATTRIBUTES = ("aria_label", "aria-label", "title", "placeholder", "alt", "value", "name")

log = get_logger(__name__)


def convert_mind2web(
    tasks: str | Path | Sequence[str | Path],
    predictions: str | Path,
    out_dir: str | Path,
    *,
    actor: str | None = None,
    dom_chars: int = DEFAULT_DOM_CHARS,
    observation: Observation = "next-state",
    layout: Layout = "auto",
    predictions_format: str = "auto",
) -> list[ConvertedStream]:
    """Convert Mind2Web tasks and an agent's predictions into one trajectory stream per actor.

    Trajectory ids are ``mind2web/<actor>/<annotation_id>``; domain ``web``; ``task`` is ``confirmed_task``;
    ``env`` is ``website``; ``meta`` holds ``annotation_id``, ``domain``, ``subdomain`` and ``file``. Streams
    follow the task files' order, then each file's task order; only tasks the actor predicted are written.
    The module docstring gives the input layout and the per-step fields.

    Args:
        tasks: One task file, a directory of task files, or a sequence of task files, in stream order.
        predictions: The predictions file: ceb's (``.jsonl``, or ``.json`` holding a list of objects) or
            MindAct's (``.json`` holding a list of rows).
        out_dir: Directory for the ``.jsonl`` streams; created if missing, existing streams replaced.
        actor: Actor name for prediction records without an ``actor`` key; required for MindAct's rows.
        dom_chars: HTML budget of each state in characters (:func:`dom_snippet`).
        observation: ``"next-state"``, ``"reference"`` (shows the reference answer to the models) or
            ``"empty"``; see the module docstring and :data:`~ceb.data.converters.Observation`.
        layout: The task files' layout: ``"raw"``, ``"multimodal"`` or ``"auto"`` (by suffix).
        predictions_format: ``"ceb"``, ``"mindact"`` or ``"auto"`` (MindAct for a ``.json`` list of rows).

    Returns:
        One summary per stream written, actors sorted by name. ``dataset`` is ``"mind2web"``,
        ``blocked_turns`` 0, ``skipped`` empty, ``sources`` the task files then the predictions file.

    Raises:
        ConfigError: ``dom_chars`` is below 100; ``observation``, ``layout`` or ``predictions_format`` is not
            a known mode; a Parquet file is read without pyarrow (the ``parquet`` extra).
        DataError: A file is missing, not valid JSON, or breaks the layout (the problem names the file, the
            ``annotation_id`` as ``trajectory_id`` and the step, or the predictions line, and the field);
            a prediction names an unknown ``annotation_id`` or ``action_uid``, repeats a step, or has no
            actor; a predicted task lacks a prediction for one of its steps; two actors map to one file name.
    """
    if dom_chars < MIN_DOM_CHARS:
        raise ConfigError(f"dom_chars must be at least {MIN_DOM_CHARS}, got {dom_chars}")
    if observation not in OBSERVATIONS:
        raise ConfigError(f"unknown observation mode {observation!r}; choose one of {', '.join(OBSERVATIONS)}")
    task_paths = task_files(tasks, layout)
    pred_path = Path(predictions)
    by_actor = load_predictions(pred_path, actor, predictions_format)
    wanted: dict[str, list[str]] = {}
    for name, per_task in by_actor.items():
        for aid in per_task:
            wanted.setdefault(aid, []).append(name)

    files = stream_file_names("mind2web", sorted(by_actor), pred_path)
    ops: dict[str, Counter[str]] = {name: Counter() for name in by_actor}
    seen: dict[str, str] = {}
    layouts = {str(path): path_layout for path, path_layout in task_paths}
    tasks_in: Counter[str] = Counter()
    # Each trajectory is written as it is built (staged until every source is read): memory holds one task.
    with StagedStreams(out_dir, {name: files[name] for name in sorted(by_actor)}) as streams:
        for task in iter_all_tasks(task_paths, need_reprs=observation != "empty"):
            index = tasks_in[task.file]
            tasks_in[task.file] += 1
            if task.annotation_id in seen:
                where = f"[{index}].annotation_id" if layouts[task.file] == "raw" else "annotation_id"
                raise DataError(
                    Problem(
                        task.file,
                        0,
                        where,
                        f"annotation_id {task.annotation_id!r} repeats (first in {seen[task.annotation_id]}); "
                        "a task's rows must be consecutive",
                        task.annotation_id,
                    )
                )
            seen[task.annotation_id] = task.file
            for name in wanted.get(task.annotation_id, ()):
                traj = _trajectory(task, name, by_actor[name][task.annotation_id], pred_path, dom_chars, observation)
                streams.add(name, traj)
                ops[name].update(step.op or "" for step in traj.steps)

        for name, per_task in by_actor.items():
            for aid, per_step in per_task.items():
                if aid not in seen:
                    first = next(iter(per_step.values()))
                    known = ", ".join(str(p) for p, _ in task_paths)
                    raise DataError(
                        Problem(
                            str(pred_path),
                            first.line,
                            first.prefix + "annotation_id",
                            f"unknown annotation_id {aid!r} (actor {name!r}): no task in {known} has it",
                            aid,
                        )
                    )

        sources = (*(str(p) for p, _ in task_paths), str(pred_path))
        written = streams.commit(dataset="mind2web", actors={name: name for name in by_actor}, sources=sources)
    for stream in written:
        log.info(
            "mind2web.stream_written",
            path=str(stream.path),
            actor=stream.actor,
            trajectories=stream.trajectories,
            steps=stream.steps,
            ops=dict(ops[stream.actor]),
        )
    return written


CONVERTER = Converter(
    help="""Write one stream per agent from Mind2Web tasks joined with the agent's predictions.

state = a DOM snippet around the predicted element; label = the predicted element is a positive candidate
and the operation matches (the paper's rule).""",
    convert=convert_mind2web,
    options=(
        ConverterOption(
            "tasks",
            list[Path],
            "Task files: osunlp/Mind2Web JSON or Multimodal-Mind2Web Parquet, a file or a folder (the Hub "
            "snapshot's data/ folder); repeat it for more, read in the order given.",
        ),
        ConverterOption("predictions", Path, "The agent's per-step predictions: ceb's JSONL or MindAct's JSON."),
        OUT_DIR,
        ACTOR,
        ConverterOption(
            "layout",
            str,
            "Task file layout; auto = by suffix (.json raw, .parquet multimodal).",
            "auto",
            choices=LAYOUTS,
        ),
        ConverterOption(
            "predictions_format",
            str,
            "Predictions format; auto = MindAct for a .json list of rows, else ceb's.",
            "auto",
            choices=PREDICTION_FORMATS,
        ),
        ConverterOption(
            "dom_chars", int, "Budget of the DOM snippet (state), in characters.", default=DEFAULT_DOM_CHARS
        ),
        OBSERVATION,
    ),
)
"""``ceb convert mind2web`` (:data:`ceb.data.converters.CONVERTERS`)."""


# --- building a trajectory ----------------------------------------------------------------------------


def _trajectory(
    task: Task,
    actor: str,
    predictions: dict[str, Prediction],
    pred_path: Path,
    dom_chars: int,
    observation: Observation,
) -> Trajectory:
    known = {a.uid for a in task.actions}
    for uid, extra in predictions.items():
        if uid not in known:
            raise DataError(
                Problem(
                    str(pred_path),
                    extra.line,
                    extra.prefix + "action_uid",
                    f"unknown action_uid {uid!r}: task {task.annotation_id!r} in {task.file} has no such action",
                    task.annotation_id,
                )
            )
    steps: list[Step] = []
    for t, action in enumerate(task.actions):
        pred = predictions.get(action.uid)
        if pred is None:
            raise DataError(
                Problem(
                    str(pred_path),
                    0,
                    "action_uid",
                    f"no prediction by actor {actor!r} for action_uid {action.uid!r} (step {t} of annotation_id "
                    f"{task.annotation_id!r} in {task.file}); a predicted task needs one for every step",
                    task.annotation_id,
                    t,
                )
            )
        steps.append(_step(task, t, action, pred, dom_chars, observation))
    references = [a.reference for a in task.actions]
    return Trajectory(
        id=f"mind2web/{actor}/{task.annotation_id}",
        task=task.task,
        domain="web",
        steps=next_state_observations(steps) if observation == "next-state" else tuple(steps),
        actor=actor,
        env=task.website,
        meta={
            key: value
            for key, value in (
                ("annotation_id", task.annotation_id),
                ("domain", task.domain),
                ("subdomain", task.subdomain),
                # One file, or the Hub shards the task's rows run across (``ceb regenerate`` reads them again).
                ("file", task.file if len(task.files) == 1 else list(task.files)),
                (REFERENCE_ACTIONS, references if None not in references else None),
            )
            if value is not None
        },
    )


def _step(task: Task, t: int, action: Action, pred: Prediction, dom_chars: int, observation: Observation) -> Step:
    element = _describe(task, t, action, pred.element_id)
    op = pred.op.strip().upper()
    shown = element if element is not None else NO_ELEMENT
    text = f"[{op}] {shown}"
    if pred.value:
        text += f" -> {pred.value}"
    reference = f"{REFERENCE_OBSERVATION}{action.reference}" if observation == "reference" else ""
    return Step(
        state=dom_snippet(action.html, pred.element_id, dom_chars),
        action=text,
        observation=reference,
        reasoning=pred.reasoning,
        op=op,
        element=element,
        value=pred.value or None,
        actor_logprobs=pred.actor_logprobs,
        label=mind2web_step_label(pred.element_id, pred.op, action.positive, action.op),
    )


def _describe(task: Task, t: int, action: Action, node: str | None) -> str | None:
    """``<tag> text`` for the predicted element, from the page and, failing that, its candidate record."""
    if node is None:
        return None
    field, candidate = next(((f, c) for f, c in action.candidates if str(c.get("backend_node_id")) == node), ("", None))
    located = locate(action.html, node)
    if located is None and candidate is None:
        return f"(element {node}, not on this page)"
    tag = located.tag if located is not None else ""
    attrs: dict[str, str] = dict(located.attrs) if located is not None else {}
    text = located.text if located is not None else ""
    if candidate is not None:
        if isinstance(candidate.get("tag"), str) and candidate["tag"]:
            tag = candidate["tag"]
        for key, value in _candidate_attributes(task, t, field, candidate).items():
            attrs.setdefault(key, value)
    if not text:
        text = next((attrs[k].strip() for k in _TEXT_ATTRIBUTES if attrs.get(k, "").strip()), "")
    text = " ".join(text.split())
    if len(text) > ELEMENT_TEXT_CHARS:
        text = text[: ELEMENT_TEXT_CHARS - 3].rstrip() + "..."
    return f"<{tag or '?'}> {text}".rstrip()


def _candidate_attributes(task: Task, t: int, field: str, candidate: Mapping[str, Any]) -> dict[str, str]:
    raw = candidate.get("attributes")
    if raw is None:
        return {}
    value: Any = raw
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
    if not isinstance(value, dict):
        raise DataError(
            Problem(
                task.file,
                0,
                f"{field}.attributes",
                "must be an object or a JSON-encoded object",
                task.annotation_id,
                t,
            )
        )
    return {str(k): v for k, v in value.items() if isinstance(v, str)}
