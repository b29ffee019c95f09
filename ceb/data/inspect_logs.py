"""Convert inspect_ai evaluation logs into trajectory streams: ``ceb convert inspect``.

The logs are read by inspect_ai's own reader (``inspect_ai.log.read_eval_log`` for the header,
``read_eval_log_samples`` one sample at a time), so both of its formats, ``.eval`` (a zip) and ``.json``, and
every log version it reads are read here. inspect_ai is an optional extra
(``pip install -e '.[inspect]'``), imported only when a conversion runs.

One stream per log file (a log is one task run by one model), named by its task: ``inspect-<task>.jsonl``, or
``inspect-<task>-<model>.jsonl`` where several logs ran the task, or ``inspect-<log file stem>.jsonl`` where they
ran it with one model too (inspect_ai's own file names, ``<time>_<task>_<id>``, run to 61 characters). Each sample
(each epoch of it) is one trajectory:

- ``id`` = ``<sample id>/epoch-<epoch>``; ``actor`` = the log's model (``mockllm/model``); ``domain`` =
  ``--domain``;
- the steps are the sample's ``messages`` read by the chat mapping of :mod:`ceb.data.chat` (each assistant
  tool call a step, the ``tool`` message answering it its observation, a reply without a call a step), after
  each inspect message is written in the OpenAI shape: an assistant's ``tool_calls`` as
  ``{"id", "type": "function", "function": {"name", "arguments"}}``, a tool message's text (or, when the tool
  failed with no text, ``error: <message>``) as its content;
- ``task`` = the first user message (else the sample's ``input`` when it is text);
- the sample's score is the trajectory's outcome, a trajectory-level label: the scorer ``--scorer`` names, else
  the sample's first scorer; its value maps by :func:`ceb.data.chat.outcome_label` (``"C"``, ``True``, 1 -> 1;
  ``"I"``, ``False``, 0 -> 0; anything else, such as ``"P"`` or 0.5, no label). ``meta`` holds ``label`` (when
  there is one), ``score`` (the value), ``scorer``, ``file``, ``sample_id`` and ``epoch``; no step carries a
  label (an outcome does not say which step was productive) and ceb's step metrics do not read ``meta``.

A sample with no assistant action is skipped and counted. A log whose samples are not all there (a run that
was stopped) converts the samples it holds.

Bounds: a log whose entries inflate past ``--max-log-mb`` (default :data:`~ceb.data.writer.MAX_LOG_MB`; the
sizes a ``.eval`` zip declares, which its reader holds each entry to, or a ``.json`` log's size) is refused before
inspect_ai reads it, and a text field past ``--max-field-mb`` (:data:`~ceb.data.writer.MAX_FIELD_MB`) when it is
written: a small compressed log cannot fill the disk or the memory.
"""

from __future__ import annotations

import math
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ceb.data.chat import chat_steps, outcome_label
from ceb.data.chat_transcripts import DEFAULT_DOMAIN
from ceb.data.converters import OUT_DIR, Converter, ConverterOption, SummaryColumn
from ceb.data.reader import DOMAIN
from ceb.data.trajectory import Trajectory
from ceb.data.writer import (
    MAX_FIELD_MB,
    MAX_LOG_MB,
    ConvertedStream,
    SkippedTrajectory,
    StagedStreams,
    check_log_size,
    stream_file_names,
)
from ceb.errors import ConfigError, DataError, Problem
from ceb.logs import get_logger
from ceb.version import install_command

__all__ = ["CONVERTER", "INSPECT_EXTRA", "convert_inspect", "openai_message", "sample_trajectory"]

INSPECT_EXTRA = "inspect"
"""The extra that brings inspect_ai: ``pip install -e '.[inspect]'``."""

log = get_logger(__name__)


def _inspect_log() -> Any:
    """The ``inspect_ai.log`` module.

    Raises:
        ConfigError: inspect_ai is not installed (names the extra).
    """
    try:
        import inspect_ai.log
    except ImportError as exc:
        raise ConfigError(
            f"ceb convert inspect reads logs with inspect_ai's own reader, which is not installed ({exc}); "
            f"install it with: {install_command(INSPECT_EXTRA)}"
        ) from None
    return inspect_ai.log


def convert_inspect(
    logs: str | Path,
    out_dir: str | Path,
    scorer: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    max_log_mb: float = MAX_LOG_MB,
    max_field_mb: float = MAX_FIELD_MB,
) -> list[ConvertedStream]:
    """Convert inspect_ai eval logs into one trajectory stream per log (the module docstring's mapping).

    Args:
        logs: An ``.eval`` or ``.json`` log, or a folder searched at any depth by inspect_ai's own
            ``list_eval_logs`` (every ``.eval`` file, and the ``.json`` files named as inspect_ai names its logs,
            ``<time>_<task>_<id>.json``), converted in path order.
        out_dir: Directory for the ``inspect-<name>.jsonl`` streams, named by each log's task (``<task>-<model>``
            where logs share a task, the file's stem where they share both); created if missing, existing ones
            replaced.
        scorer: The scorer whose score is the outcome; ``None``: each sample's first scorer.
        domain: The trajectories' domain (prompt family).
        max_log_mb: The most a log may inflate to, in MB (10^6 bytes).
        max_field_mb: The most one text field written may hold, in MB.

    Returns:
        One summary per log, in file-name order.

    Raises:
        ConfigError: inspect_ai is not installed (the message names the extra).
        DataError: No log at ``logs``; a log inspect_ai cannot read; a sample whose messages break the chat
            mapping (names the file, the sample and the message field); ``scorer`` names no score of a scored
            sample; a log with no sample that has an action; or a log or a field past its bound (names the file,
            the field and the limit).
    """
    reader = _inspect_log()
    root = Path(logs)
    if not DOMAIN.fullmatch(domain):
        raise DataError(Problem(str(root), 0, "--domain", f"must be a lower-case word, got {domain!r}"))
    for flag, mb in (("--max-log-mb", max_log_mb), ("--max-field-mb", max_field_mb)):
        if not 0 < mb < math.inf:
            raise DataError(Problem(str(root), 0, flag, f"must be a positive number of MB, got {mb!r}"))
    files = _log_files(reader, root)
    for f in files:
        check_log_size(f, _inflated_size(f), max_log_mb)
    headers = {f: _read(f, lambda f=f: reader.read_eval_log(str(f), header_only=True)) for f in files}
    short = _stream_names(files, headers)
    by_name = stream_file_names("inspect", [short[f.stem] for f in files], root, what="log")
    names = {f.stem: by_name[short[f.stem]] for f in files}
    actors = {f.stem: str(headers[f].eval.model) for f in files}
    skipped: dict[str, list[SkippedTrajectory]] = {f.stem: [] for f in files}
    with StagedStreams(out_dir, names, max_field_mb) as staged:
        for f in files:
            written = 0
            samples: Iterable[Any] = _read(
                f, lambda f=f: reader.read_eval_log_samples(str(f), all_samples_required=False)
            )
            for sample in _each(f, samples):
                trajectory = sample_trajectory(sample, f, actors[f.stem], scorer, domain)
                if trajectory.steps:
                    staged.add(f.stem, trajectory)
                    written += 1
                else:
                    skipped[f.stem].append(SkippedTrajectory(trajectory.id, "no actions", 0))
            if not written:
                raise DataError(
                    Problem(str(f), 0, "<file>", "no sample with an assistant action (a tool call or reply)")
                )
        streams = staged.commit(dataset="inspect", actors=actors, sources=[str(f) for f in files], skipped=skipped)
    for stream in streams:
        log.info("inspect.stream_written", path=str(stream.path), trajectories=stream.trajectories)
    return streams


def _stream_names(files: list[Path], headers: dict[Path, Any]) -> dict[str, str]:
    """Each log's stream name: its task; ``<task>-<model>`` where logs share a task; else the file's stem.

    inspect_ai names a log ``<time>_<task>_<id>`` (61 characters for a short task), a name every row repeated.
    """

    def tail(name: object) -> str:
        return str(name).rsplit("/", 1)[-1]

    task = {f: tail(headers[f].eval.task) for f in files}
    with_model = {f: f"{task[f]}-{tail(headers[f].eval.model)}" for f in files}
    out: dict[str, str] = {}
    for f in files:
        for names in (task, with_model):
            if list(names.values()).count(names[f]) == 1:
                out[f.stem] = names[f]
                break
        else:
            out[f.stem] = f.stem
    return out


def _log_files(reader: Any, root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(Problem(str(root), 0, "<file>", "no such file or folder"))
    found = reader.list_eval_logs(str(root), formats=["eval", "json"], recursive=True)
    files = sorted(Path(info.name.removeprefix("file://")) for info in found)
    if not files:
        raise DataError(Problem(str(root), 0, "<file>", "no inspect_ai log (.eval or .json) in this folder"))
    return files


def _inflated_size(path: Path) -> int:
    """The bytes ``path`` inflates to: the sum of a zip's declared entry sizes, else the file's size."""
    try:
        with zipfile.ZipFile(path) as archive:
            return sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        return path.stat().st_size
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _read(path: Path, read: Any) -> Any:
    """``read()``; any failure of inspect_ai's reader is a :class:`DataError` naming ``path``."""
    try:
        return read()
    except Exception as exc:  # the reader raises whatever its parsers do (zip, JSON, pydantic): all mean "unreadable"
        raise _unreadable(path, exc) from exc


def _each(path: Path, samples: Iterable[Any]) -> Iterable[Any]:
    """The samples of a lazy reader, a failure mid-way named like one at the start."""
    it = iter(samples)
    while True:
        try:
            sample = next(it)
        except StopIteration:
            return
        except Exception as exc:  # as in _read: a corrupt sample inside the zip fails only when it is reached
            raise _unreadable(path, exc) from exc
        yield sample


def _unreadable(path: Path, exc: Exception) -> DataError:
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    return DataError(
        Problem(str(path), 0, "<file>", f"inspect_ai cannot read it as an eval log: {type(exc).__name__}: {first}")
    )


def sample_trajectory(sample: Any, path: Path, actor: str, scorer: str | None, domain: str) -> Trajectory:
    """One inspect ``EvalSample`` as the trajectory ``ceb convert inspect`` writes (the module docstring's mapping).

    Also the live gate's, for a sample that ended (:mod:`ceb.gate.inspect_approver`). ``path`` names the log in
    problems and ``source``; ``scorer`` as :func:`convert_inspect`'s.

    Raises:
        DataError: A bad message, or no score by ``scorer`` (names ``path`` and the sample).
    """
    tid = f"{sample.id}/epoch-{sample.epoch}"
    field = f"samples[{tid}]"
    chat = chat_steps([openai_message(m) for m in sample.messages], path=str(path), field=f"{field}.messages")
    task = chat.task if chat.task is not None else sample.input if isinstance(sample.input, str) else ""
    meta: dict[str, Any] = {"file": path.name, "sample_id": sample.id, "epoch": sample.epoch}
    scores = sample.scores or {}
    if scores:
        name = scorer if scorer is not None else next(iter(scores))
        if name not in scores:
            message = f"no score by {name!r}; this sample's scorers: {', '.join(scores)}"
            raise DataError(Problem(str(path), 0, f"{field}.scores", message, tid))
        value = scores[name].value
        meta |= {"scorer": name, "score": value}
        label = outcome_label(value)
        if label is not None:
            meta["label"] = label
    return Trajectory(
        id=tid, task=task, domain=domain, steps=chat.steps, actor=actor, meta=meta, source=f"{path}:{tid}"
    )


def openai_message(message: Any) -> dict[str, Any]:
    """An inspect ``ChatMessage`` in the OpenAI Chat Completions shape :func:`ceb.data.chat.chat_steps` reads."""
    out: dict[str, Any] = {"role": message.role, "content": message.text}
    if message.role == "assistant" and message.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.function, "arguments": c.arguments}}
            for c in message.tool_calls
        ]
    elif message.role == "tool":
        out["tool_call_id"] = message.tool_call_id
        if not message.text and message.error is not None:
            out["content"] = f"error: {message.error.message}"
    return out


CONVERTER = Converter(
    help=f"""Write one trajectory stream per inspect_ai eval log (.eval or .json), each sample a trajectory.

Read by inspect_ai's own log reader ({install_command(INSPECT_EXTRA)}). Steps: the sample's messages
as `ceb convert chat` reads them; the sample's score (C/I, 1/0, true/false) is the trajectory's
outcome, kept in meta.label. Fields: ceb/data/inspect_logs.py.""",
    convert=convert_inspect,
    options=(
        ConverterOption("logs", Path, "An inspect_ai log (.eval or .json), or a folder searched for them."),
        OUT_DIR,
        ConverterOption(
            "scorer", str | None, "Scorer whose score is the outcome; default: each sample's first.", default=None
        ),
        ConverterOption("domain", str, "Domain of the trajectories (prompt family).", default=DEFAULT_DOMAIN),
        ConverterOption(
            "max_log_mb", float, "Refuse a log that inflates past this many MB (10^6 bytes).", default=MAX_LOG_MB
        ),
        ConverterOption(
            "max_field_mb",
            float,
            "Refuse a text field (task, action, observation...) past this many MB.",
            default=MAX_FIELD_MB,
        ),
    ),
    columns=(SummaryColumn("skipped (no action)", lambda c: str(len(c.skipped))),),
)
"""``ceb convert inspect`` (:data:`ceb.data.converters.CONVERTERS`)."""
