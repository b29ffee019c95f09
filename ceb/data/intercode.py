"""Convert InterCode result files (princeton-nlp/intercode, ``data/results``) into streams.

Only the multi-turn "try again" runs: each turn executes and the environment scores the cumulative state, so
``rewards[t]`` follows action ``t`` (``../shared/data/intercode/ORIGIN.md``); ReAct and Plan-and-Solve
rewards carry no step signal. Streams per (dataset, actor): ``intercode-bash-<model>.jsonl`` from
``ic_bash_multiturn_<model>_10_turns_fs_<k>.json``, ``k = 1..4`` in order (missing ``k`` passed over), and
``intercode-sql-<model>.jsonl`` from ``ic_sql_multiturn_<model>_10_turns.json``; tasks in numeric key order.
A final ``"blocked"`` action with no observation (PaLM refused; ``experiments/eval_n_turn_others.py``) is
dropped and counted in ``blocked_turns``; a trajectory with no or an empty action is skipped and listed in
``skipped``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.data.converters import OUT_DIR, Converter, ConverterOption, SummaryColumn
from ceb.data.sources import data_root
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, SkippedTrajectory, write_converted
from ceb.errors import ConfigError, DataError, Problem
from ceb.logs import get_logger

__all__ = [
    "CONVERTER",
    "INTERCODE_ROOT_ENV",
    "ConvertedStream",
    "SkippedTrajectory",
    "convert_intercode",
    "step_labels",
]

INTERCODE_ROOT_ENV = "CEB_INTERCODE_ROOT"
"""Variable holding the InterCode root when ``--root`` is not given."""

_DOMAINS = {"bash": "shell", "sql": "sql"}
_FILE_SYSTEMS = (1, 2, 3, 4)
_BLOCKED = "blocked"
_EPS = 1e-9
_LAYOUT = (
    "expected an InterCode checkout holding"
    " data/results/bash/<model>/ic_bash_multiturn_<model>_10_turns_fs_<k>.json"
    " and data/results/sql/<model>/ic_sql_multiturn_<model>_10_turns.json"
)

log = get_logger(__name__)


def step_labels(rewards: Sequence[float]) -> list[int]:
    """Step labels of one trajectory from its rewards ``r_t``, shape ``(T,)`` -> 0/1 labels ``(T,)``.

    Paper appendix "Experimental Details": with ``r_{-1} = 0``, step ``t`` is positive when
    ``r_t - r_{t-1} > 0.05`` (exactly 0.05 is not), or it is the last step with ``r_t >= 0.7`` and
    ``r_t >= r_{t-1}``. Comparisons allow 1e-9 of float error (``0.7200000000000001 - 0.67`` is a rise of 0.05; 7
    bash steps).
    """
    labels: list[int] = []
    last = len(rewards) - 1
    previous = 0.0
    for t, reward in enumerate(rewards):
        rises = reward - previous > 0.05 + _EPS
        finishes = t == last and reward >= 0.7 - _EPS and reward >= previous - _EPS
        labels.append(int(rises or finishes))
        previous = reward
    return labels


def convert_intercode(
    root: str | Path,
    out_dir: str | Path,
    datasets: Sequence[str] = ("bash", "sql"),
) -> list[ConvertedStream]:
    """Convert InterCode multi-turn result files into one stream per (dataset, actor), in ``datasets`` order.

    Ids are ``intercode-bash/<model>/fs_<k>/<key>`` and ``intercode-sql/<model>/<key>``; ``env`` is ``fs_<k>``
    (bash only); ``meta`` holds ``task_id``, ``file`` (relative to ``root``) and sql's ``hardness`` (not
    ``max_reward``: it leaks the outcome). Step ``t``: ``state = o_{t-1}`` (empty first), ``action = a_t``,
    ``observation = o_t``, ``reward = r_t``, ``label`` by :func:`step_labels`. ``root`` is a checkout or its
    ``data`` folder (CLI: ``--root``, else :data:`INTERCODE_ROOT_ENV`); ``out_dir`` is created if missing.

    Raises:
        ConfigError: A dataset other than ``bash`` and ``sql``.
        DataError: ``root`` off-layout, no multi-turn files, bad JSON or record shape (names file, task key,
            field), or every trajectory of an actor skipped.
    """
    unknown = [d for d in datasets if d not in _DOMAINS]
    if unknown:
        raise ConfigError(f"unknown InterCode dataset(s) {unknown}; choose from {sorted(_DOMAINS)}")
    root = Path(root)
    out_dir = Path(out_dir)
    results = root / "data" / "results"
    if not results.is_dir():
        raise DataError(Problem(str(root), 0, "<file>", f"no data/results directory here; {_LAYOUT}"))

    plans: list[tuple[str, str, list[tuple[Path, str | None]]]] = []
    for dataset in datasets:
        found = _find_files(results, dataset)
        if not found:
            where = results / dataset
            raise DataError(Problem(str(where), 0, "<file>", f"no {dataset} multi-turn result files; {_LAYOUT}"))
        plans.extend((dataset, actor, files) for actor, files in found)

    # Every source file is read and checked before the first stream is written: an error leaves no
    # half-converted set of streams behind.
    built = [_build_stream(root, dataset, actor, files) for dataset, actor, files in plans]
    out_dir.mkdir(parents=True, exist_ok=True)
    return [_write(out_dir, stream) for stream in built]


def _convert_command(out_dir: Path, datasets: str, root: Path | None = None) -> list[ConvertedStream]:
    """:func:`convert_intercode` from the command line (``datasets`` comma-separated)."""
    return convert_intercode(
        data_root(root, "--root", INTERCODE_ROOT_ENV, "InterCode"),
        out_dir,
        datasets=tuple(d.strip() for d in datasets.split(",") if d),
    )


CONVERTER = Converter(
    help="""Write one trajectory stream per (dataset, agent) from InterCode's multi-turn result files.

state = the previous step's output; label = the paper's reward rule (a rise of more than 0.05, or a
final step at reward >= 0.7 that does not fall).""",
    convert=_convert_command,
    options=(
        ConverterOption(
            "root",
            Path | None,
            f"Root of an InterCode checkout (data/results/{{bash,sql}}/...); default: ${INTERCODE_ROOT_ENV}.",
            default=None,
        ),
        OUT_DIR,
        ConverterOption("datasets", str, "Comma-separated: bash, sql.", default="bash,sql"),
    ),
    columns=(
        SummaryColumn("skipped trajectories", lambda c: str(len(c.skipped))),
        SummaryColumn("dropped 'blocked' turns", lambda c: str(c.blocked_turns)),
    ),
)
"""``ceb convert intercode``."""


def _find_files(results: Path, dataset: str) -> list[tuple[str, list[tuple[Path, str | None]]]]:
    """``(actor, [(file, env)])`` for each model directory with multi-turn files, actors sorted."""
    base = results / dataset
    if not base.is_dir():
        return []
    found: list[tuple[str, list[tuple[Path, str | None]]]] = []
    for model_dir in sorted(p for p in base.iterdir() if p.is_dir()):
        model = model_dir.name
        files: list[tuple[Path, str | None]]
        if dataset == "bash":
            candidates = [
                (model_dir / f"ic_bash_multiturn_{model}_10_turns_fs_{k}.json", f"fs_{k}") for k in _FILE_SYSTEMS
            ]
            files = [(path, env) for path, env in candidates if path.is_file()]
        else:
            path = model_dir / f"ic_sql_multiturn_{model}_10_turns.json"
            files = [(path, None)] if path.is_file() else []
        if files:
            found.append((model, files))
    return found


@dataclass(frozen=True, slots=True)
class _Built:
    """One stream's trajectories and accounting, before writing."""

    dataset: str
    actor: str
    trajectories: list[Trajectory]
    skipped: list[SkippedTrajectory]
    blocked_turns: int
    sources: list[str]


def _build_stream(root: Path, dataset: str, actor: str, files: list[tuple[Path, str | None]]) -> _Built:
    trajectories: list[Trajectory] = []
    skipped: list[SkippedTrajectory] = []
    blocked_turns = 0
    sources: list[str] = []
    for path, env in files:
        rel = path.relative_to(root).as_posix()
        sources.append(rel)
        prefix = f"intercode-{dataset}/{actor}/{env}" if env else f"intercode-{dataset}/{actor}"
        for key, record in _load_tasks(path):
            task = _read_task(path, key, record, dataset)
            blocked_turns += task.blocked
            tid = f"{prefix}/{key}"
            skip = _skip(tid, task.actions)
            if skip is not None:
                skipped.append(skip)
                continue
            meta: dict[str, Any] = {"task_id": task.task_id, "file": rel}
            if task.hardness is not None:
                meta["hardness"] = task.hardness
            trajectories.append(
                Trajectory(
                    id=tid,
                    task=task.query,
                    domain=_DOMAINS[dataset],
                    steps=_steps(task),
                    actor=actor,
                    env=env,
                    meta=meta,
                )
            )

    if not trajectories:
        first = files[0][0]
        raise DataError(Problem(str(first), 0, "<file>", f"every {dataset} trajectory of {actor} had to be skipped"))
    return _Built(dataset, actor, trajectories, skipped, blocked_turns, sources)


def _write(out_dir: Path, built: _Built) -> ConvertedStream:
    stream = write_converted(
        out_dir / f"intercode-{built.dataset}-{built.actor}.jsonl",
        built.trajectories,
        dataset=built.dataset,
        actor=built.actor,
        sources=built.sources,
        skipped=built.skipped,
        blocked_turns=built.blocked_turns,
    )
    log.info(
        "intercode.stream_written",
        path=str(stream.path),
        trajectories=stream.trajectories,
        steps=stream.steps,
        skipped=len(built.skipped),
        skipped_by_reason=dict(Counter(s.reason for s in built.skipped)),
        blocked_turns=built.blocked_turns,
    )
    return stream


@dataclass(frozen=True, slots=True)
class _Task:
    """One source record, checked, with a trailing ``"blocked"`` placeholder already removed."""

    query: str
    task_id: int
    hardness: str | None
    actions: list[str]
    observations: list[str]
    rewards: list[float]
    blocked: int


def _steps(task: _Task) -> tuple[Step, ...]:
    labels = step_labels(task.rewards)
    steps: list[Step] = []
    state = ""
    for action, observation, reward, label in zip(task.actions, task.observations, task.rewards, labels, strict=True):
        steps.append(Step(state=state, action=action, observation=observation, reward=reward, label=label))
        # A shell / SQL agent sees the terminal: its next state is this step's output.
        state = observation
    return tuple(steps)


def _skip(tid: str, actions: list[str]) -> SkippedTrajectory | None:
    """Why a trajectory cannot be written, or ``None``."""
    if not actions:
        return SkippedTrajectory(tid, "no actions", 0)
    for t, action in enumerate(actions):
        if not action.strip():
            return SkippedTrajectory(tid, "empty action", len(actions), t)
    return None


def _load_tasks(path: Path) -> list[tuple[str, Any]]:
    """The file's ``(task key, record)`` pairs in numeric key order."""
    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise DataError(Problem(str(path), exc.lineno, "<file>", f"not valid JSON: {exc.msg}")) from exc
    except OSError as exc:
        raise DataError(Problem(str(path), 0, "<file>", f"cannot read the file: {exc.strerror or exc}")) from exc
    if not isinstance(data, dict):
        raise DataError(Problem(str(path), 0, "<file>", "must be a JSON object keyed by task index"))
    for key in data:
        if not (key.isascii() and key.isdigit()):
            raise DataError(Problem(str(path), 0, "<file>", f"keys must be task indices (0, 1, ...), got {key!r}", key))
    return sorted(data.items(), key=lambda item: int(item[0]))


def _read_task(path: Path, key: str, record: Any, dataset: str) -> _Task:
    """Check one source record's shape; raise :class:`DataError` naming file, task key and field."""

    def fail(field: str, message: str) -> DataError:
        return DataError(Problem(str(path), 0, field, message, key))

    if not isinstance(record, dict):
        raise fail("<task>", "must be an object")
    query = record.get("query")
    if not isinstance(query, str):
        raise fail("query", "missing or not a string")
    task_id = record.get("task_id")
    if type(task_id) is not int:
        raise fail("task_id", "missing or not an integer")
    hardness = record.get("hardness")
    if dataset == "sql" and not isinstance(hardness, str):
        raise fail("hardness", "missing or not a string (every InterCode-SQL record has one)")
    history = record.get("turn_history")
    if not isinstance(history, dict):
        raise fail("turn_history", "missing or not an object")
    actions = _list_of(history, "actions", str, fail)
    observations = _list_of(history, "observations", str, fail)
    raw_rewards = _list_of(history, "rewards", (int, float), fail)
    for t, reward in enumerate(raw_rewards):
        if isinstance(reward, bool) or not math.isfinite(reward):
            raise fail(f"turn_history.rewards[{t}]", f"must be a finite number, got {reward!r}")
    rewards = [float(r) for r in raw_rewards]

    blocked = 0
    if (
        actions
        and actions[-1] == _BLOCKED
        and len(actions) == len(rewards) == len(observations) + 1
        and rewards[-1] == 0.0
    ):
        actions, rewards, blocked = actions[:-1], rewards[:-1], 1
    if not len(actions) == len(observations) == len(rewards):
        raise fail(
            "turn_history",
            f"lengths differ: {len(actions)} actions, {len(observations)} observations, {len(rewards)} rewards",
        )
    return _Task(query, task_id, hardness if dataset == "sql" else None, actions, observations, rewards, blocked)


def _list_of(
    history: dict[str, Any], name: str, kind: type | tuple[type, ...], fail: Callable[[str, str], DataError]
) -> list[Any]:
    value = history.get(name)
    if not isinstance(value, list):
        raise fail(f"turn_history.{name}", "missing or not a list")
    for t, item in enumerate(value):
        if not isinstance(item, kind):
            raise fail(f"turn_history.{name}[{t}]", f"wrong type {type(item).__name__}")
    return value
