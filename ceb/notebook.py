"""Scoring from a notebook: trajectories, stream files or a DataFrame in, a pandas DataFrame of step scores out.

The pipeline of ``ceb score`` (:func:`ceb.pipeline.run_scoring`), writing the same run directory, read back as
the table ``ceb export`` writes (one column per :class:`~ceb.pipeline.results.StepRow` field). pandas (the
``notebook`` extra) is imported only when a function is called.

::

    import ceb
    scores = ceb.score("streams/intercode-bash-gpt-4.jsonl", methods=["ceb", "static"])
    scores.groupby("method")[["score", "label"]].mean()
    again = ceb.read_run(scores.attrs["run_dir"])

:func:`score` also works inside a running event loop (a Jupyter cell) by running on a worker thread;
:func:`ascore` is its coroutine twin.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ceb.config import RunConfig, load_config
from ceb.data.reader import parse_trajectory, read_stream
from ceb.data.streams import check_streams, parse_stream_specs
from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError, DataError, Problem, RunError
from ceb.pipeline.results import read_hindsight_rows, read_step_rows
from ceb.pipeline.rundir import RunDir
from ceb.version import install_command

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["FRAME_COLUMNS", "NOTEBOOK_HINT", "ascore", "read_run", "score", "trajectories_from_frame"]

NOTEBOOK_HINT = install_command("notebook")

FRAME_COLUMNS: dict[str, bool] = {
    "trajectory": True,
    "step": True,
    "task": True,
    "action": True,
    "state": False,
    "observation": False,
    "domain": False,
    "label": False,
    "reasoning": False,
    "op": False,
    "element": False,
    "value": False,
    "stream": False,
}
"""Column -> required, of :func:`trajectories_from_frame` (a row per step); ``task`` and ``domain`` come
from a trajectory's first row, ``stream`` (default ``"frame"``) splits streams, other columns are ignored."""

Data = Sequence[Trajectory] | Mapping[str, Sequence[Trajectory]] | str | Path | Sequence[str | Path] | Any


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ConfigError(f"the notebook API returns pandas DataFrames: {NOTEBOOK_HINT}") from exc
    return pandas


def score(
    data: Data,
    *,
    methods: Sequence[str] | None = None,
    config: RunConfig | Mapping[str, Any] | str | Path | None = None,
    run_dir: str | Path | None = None,
    overwrite: bool = False,
) -> pd.DataFrame:
    """Score ``data`` with ``methods``: the step rows of :func:`read_run`, ``attrs["metrics"]`` the ``metrics.json``.

    Args:
        data: In stream order: a sequence of :class:`~ceb.data.trajectory.Trajectory` (stream ``"stream"``); a
            mapping stream name -> trajectories; stream specs as ``ceb score`` takes them
            (:mod:`ceb.data.streams`); or a DataFrame, a row per step (:func:`trajectories_from_frame`).
        methods: ``None`` keeps the configuration's (default ``ceb`` and ``static``).
        config: A :class:`~ceb.config.RunConfig`, a settings mapping (``{"ceb": {"k": 3}}``) or a ``.toml`` /
            ``.json`` file; ``None``: defaults, the ``offline`` backend (no language model).
        run_dir: ``None``: a new temporary directory, kept (``frame.attrs["run_dir"]``).
        overwrite: Replace an earlier run's results in ``run_dir``.

    Raises:
        ConfigError: pandas missing (names the extra); ``data``, ``config`` or ``run_dir`` of another kind; an
            unknown method or setting; a bad settings file or stream name.
        DataError: A stream file or DataFrame row breaks the stream format, or an id repeats within a stream.
        RunError: ``run_dir`` holds a run (without ``overwrite``), or the run failed.
    """
    _pandas()
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(data, methods, config, run_dir, overwrite)
    # A loop runs in this thread (Jupyter): anyio cannot start another here, so the pipeline gets a thread.
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ceb-score") as pool:
        return pool.submit(_run_here, data, methods, config, run_dir, overwrite).result()


async def ascore(
    data: Data,
    *,
    methods: Sequence[str] | None = None,
    config: RunConfig | Mapping[str, Any] | str | Path | None = None,
    run_dir: str | Path | None = None,
    overwrite: bool = False,
) -> pd.DataFrame:
    """:func:`score` as a coroutine on the caller's loop (asyncio or trio, via anyio); raises as :func:`score`."""
    _pandas()
    streams, cfg, out = _prepare(data, methods, config, run_dir)
    from ceb.pipeline import run_scoring

    run = RunDir(out)
    if not overwrite and run.has_scores and run.scored_anything():  # the pipeline's refusal names CLI flags
        raise RunError(f"{out} already holds results ({run.SCORES}); choose another run_dir, or pass overwrite=True")

    await run_scoring(streams, cfg, out, overwrite=overwrite)
    return _finish(out, cfg)


def _run_here(
    data: Data,
    methods: Sequence[str] | None,
    config: RunConfig | Mapping[str, Any] | str | Path | None,
    run_dir: str | Path | None,
    overwrite: bool,
) -> pd.DataFrame:
    import anyio

    async def run() -> pd.DataFrame:
        return await ascore(data, methods=methods, config=config, run_dir=run_dir, overwrite=overwrite)

    return anyio.run(run)


def _prepare(
    data: Data,
    methods: Sequence[str] | None,
    config: RunConfig | Mapping[str, Any] | str | Path | None,
    run_dir: str | Path | None,
) -> tuple[dict[str, list[Trajectory]], RunConfig, Path]:
    if isinstance(methods, str) or not isinstance(methods, Sequence | None):
        raise ConfigError(f"methods must be a list of method names, e.g. ['ceb'], not {methods!r}")
    overrides = {"methods": tuple(methods)} if methods is not None else None
    if isinstance(config, RunConfig):
        cfg = load_config(overrides=overrides, base=config.model_dump(mode="json"))
    elif isinstance(config, Mapping):
        cfg = load_config(overrides=overrides, base=config)
    elif isinstance(config, str | Path | None):
        cfg = load_config(config, overrides)
    else:
        raise ConfigError(f"config must be a RunConfig, a mapping of settings or a settings file, not {_kind(config)}")
    out = (
        _run_dir(run_dir, "None for a new temporary one")
        if run_dir is not None
        else Path(tempfile.mkdtemp(prefix="ceb-run-"))
    )
    streams = _streams(data)
    check_streams(streams)
    return streams, cfg, out


def _run_dir(value: object, other: str) -> Path:
    """``value`` as a run directory; ``""`` is refused, not read as the current directory."""
    if not isinstance(value, str | Path) or value == "":
        raise ConfigError(f"run_dir must name a directory ({other}), not {value!r}")
    return Path(value)


def _kind(value: Any) -> str:
    return "None" if value is None else f"a value of type {type(value).__name__}"


_DATA = "data must be trajectories, a mapping of stream name to trajectories, stream file paths or a DataFrame"


def _streams(data: Data) -> dict[str, list[Trajectory]]:
    if isinstance(data, str | Path):
        data = [data]
    if isinstance(data, Mapping):
        out = {}
        for name, trajectories in data.items():
            listed = isinstance(trajectories, Sequence) and not isinstance(trajectories, str)
            bad = [t for t in trajectories if not isinstance(t, Trajectory)] if listed else [trajectories]
            if bad:
                raise ConfigError(f"data[{name!r}] must be a list of Trajectory; got {_kind(bad[0])}")
            out[name] = list(trajectories)
        return out
    if _is_frame(data):
        return trajectories_from_frame(data)
    if not isinstance(data, Sequence):
        raise ConfigError(f"{_DATA}, not {_kind(data)}")
    items = list(data)
    if items and all(isinstance(t, Trajectory) for t in items):
        return {"stream": items}
    if items and all(isinstance(t, str | Path) for t in items):
        return {name: read_stream(paths) for name, paths in parse_stream_specs([str(p) for p in items]).items()}
    raise ConfigError(
        f"{_DATA}; got an empty sequence" if not items else f"{_DATA}; got a list holding {_kind(items[0])}"
    )


def _is_frame(data: Any) -> bool:
    return type(data).__name__ == "DataFrame" and hasattr(data, "to_dict")


def _finish(out: Path, cfg: RunConfig) -> pd.DataFrame:
    from ceb.eval import run_metrics, write_metrics

    metrics = run_metrics(out, n_bins=cfg.ece_bins)
    write_metrics(out, metrics)
    frame = read_run(out)
    frame.attrs["metrics"] = metrics
    return frame


def read_run(run_dir: str | Path, *, table: Literal["scores", "hindsight"] = "scores") -> pd.DataFrame:
    """A run directory's rows as a DataFrame in file order, the table ``ceb export`` writes.

    ``attrs["run_dir"]`` is the directory; ``attrs["note"]`` says the rows are partial (a run in progress,
    interrupted or failed).

    Args:
        run_dir: A run directory (``ceb score --out``, :func:`score`).
        table: ``scores`` (a row per step and method, :class:`~ceb.pipeline.results.StepRow` fields) or
            ``hindsight`` (a row per trajectory and bank method, :class:`~ceb.pipeline.results.HindsightRow`).
            Nested fields stay Python lists.

    Raises:
        ConfigError: pandas missing (names the extra), or an unknown ``table``.
        RunError: No run, an incomplete one (:meth:`~ceb.pipeline.rundir.RunDir.require_readable`), or a line
            before the last that is not a row (names file and line).
    """
    pandas = _pandas()
    from ceb.pipeline.results import HindsightRow, StepRow

    run = RunDir(_run_dir(run_dir, "a run directory"))
    note = run.require_readable()
    if table == "scores":
        rows: list[Any] = list(read_step_rows(run.scores))
        columns = list(StepRow.__dataclass_fields__)
    elif table == "hindsight":
        rows = list(read_hindsight_rows(run.hindsight)) if run.hindsight.is_file() else []
        columns = list(HindsightRow.__dataclass_fields__)
    else:
        raise ConfigError(f"unknown table {table!r}; choose scores or hindsight")
    frame = pandas.DataFrame([asdict(r) for r in rows], columns=columns)
    frame.attrs["run_dir"] = str(run.path)
    if note is not None:  # a run being scored now, or one that ended interrupted: partial rows
        frame.attrs["note"] = note
    return frame


def trajectories_from_frame(frame: pd.DataFrame) -> dict[str, list[Trajectory]]:
    """Trajectories from a DataFrame, a row per step (:data:`FRAME_COLUMNS`), checked as stream lines.

    Grouped by ``stream`` then ``trajectory`` in first-appearance order; steps sorted by ``step``, numbered 0, 1, ...
    Missing optional cells (``None``, ``NaN``) are left out; an empty ``label`` is unlabelled.

    Raises:
        ConfigError: ``frame`` is not a DataFrame.
        DataError: A missing required column, or a row breaking the stream format (names row and field).
    """
    if not _is_frame(frame):
        raise ConfigError(f"frame must be a pandas DataFrame, not {_kind(frame)}")
    missing = [c for c, required in FRAME_COLUMNS.items() if required and c not in frame.columns]
    if missing:
        raise DataError(Problem("<DataFrame>", 0, missing[0], f"missing column; required: {_required()}"))
    records = frame.to_dict(orient="records")
    grouped: dict[str, dict[str, list[tuple[int, dict[str, Any]]]]] = {}
    for i, record in enumerate(records):
        stream, tid = _present(record.get("stream")), _present(record["trajectory"])
        if tid is None:  # str() would make it "nan"
            raise DataError(Problem(f"<DataFrame row {i}>", 0, "trajectory", "missing trajectory id"))
        grouped.setdefault(str(stream) if stream is not None else "frame", {}).setdefault(str(tid), []).append(
            (i, record)
        )
    out: dict[str, list[Trajectory]] = {}
    for stream, trajectories in grouped.items():
        out[stream] = [_trajectory(tid, rows) for tid, rows in trajectories.items()]
    return out


def _required() -> str:
    return ", ".join(c for c, required in FRAME_COLUMNS.items() if required)


def _present(value: Any) -> Any:
    """``value``, or ``None`` for a missing cell (pandas writes ``NaN`` or ``None``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _trajectory(tid: str, rows: list[tuple[int, dict[str, Any]]]) -> Trajectory:
    first_row, first = rows[0]
    where = f"<DataFrame row {first_row}>"
    ordered = sorted(rows, key=lambda r: _step_number(r[0], r[1]))
    for t, (i, record) in enumerate(ordered):
        if _step_number(i, record) != t:
            raise DataError(
                Problem(
                    f"<DataFrame row {i}>", 0, "step", f"trajectory {tid!r} must number its steps 0..{len(rows) - 1}"
                )
            )
    steps = []
    for _, record in ordered:
        step: dict[str, Any] = {"action": record["action"]}
        for key in ("state", "observation", "reasoning", "op", "element", "value"):
            value = _present(record.get(key))
            if value is not None:
                step[key] = value
        step.setdefault("state", "")
        step.setdefault("observation", "")
        label = _present(record.get("label"))
        if label is not None:
            step["label"] = int(label) if isinstance(label, float) and label.is_integer() else label
        steps.append(step)
    obj = {
        "id": tid,
        "task": first["task"],
        "domain": _present(first.get("domain")) or "generic",
        "steps": steps,
    }
    return parse_trajectory(obj, where)


def _step_number(i: int, record: dict[str, Any]) -> int:
    value = record.get("step")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DataError(Problem(f"<DataFrame row {i}>", 0, "step", f"must be a whole number, got {value!r}"))
    return value
