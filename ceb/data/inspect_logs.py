"""Convert inspect_ai eval logs into streams: ``ceb convert inspect``.

Logs are read by inspect_ai's own reader (``read_eval_log`` header, ``read_eval_log_samples`` one at a
time), so every format (``.eval`` zip, ``.json``) and log version it reads is read; the ``inspect`` extra is
imported only when a conversion runs. One stream per log, ``inspect-<task>.jsonl`` (``<task>-<model>`` where
logs share a task, else the log's stem). Each sample epoch is a trajectory: ``id`` ``<sample id>/epoch-<n>``,
``actor`` the log's model, steps its ``messages`` by :mod:`ceb.data.chat` after :func:`openai_message` (a
failed tool with no text reads ``error: <message>``), ``task`` the first user message (else a text
``input``). The ``--scorer`` score (else the first) is the outcome by :func:`ceb.data.chat.outcome_label`;
``meta`` holds ``label``, ``score``, ``scorer``, ``file``, ``sample_id``, ``epoch``; no step gets a label.
Samples without an action are skipped and counted; a stopped run converts what it holds. A log inflating
past ``--max-log-mb`` (a zip's declared sizes) is refused before inspect_ai reads it, and a field past
``--max-field-mb`` when written.
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
"""The extra that brings inspect_ai."""

log = get_logger(__name__)


def _inspect_log() -> Any:
    """``inspect_ai.log``, or :class:`ConfigError` naming the extra."""
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
    """One stream per inspect_ai eval log (module docstring), in path order.

    ``logs`` is an ``.eval`` or ``.json`` log, or a folder searched at any depth by inspect_ai's
    ``list_eval_logs``; ``scorer`` gives the outcome (``None``: each sample's first); ``max_log_mb`` and
    ``max_field_mb`` bound a log's inflated size and a written text field, in MB (10^6 bytes).

    Raises:
        ConfigError: inspect_ai is not installed (names the extra).
        DataError: No log; an unreadable log; messages breaking the chat mapping (names file, sample, field);
            ``scorer`` missing from a scored sample; a log with no action; a log or field past its bound.
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
    """Each log's stream name: its task, else ``<task>-<model>``, else the file's stem."""

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
    """Bytes ``path`` inflates to: a zip's declared entry sizes, else its size."""
    try:
        with zipfile.ZipFile(path) as archive:
            return sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        return path.stat().st_size
    except OSError as exc:
        raise _unreadable(path, exc) from exc


def _read(path: Path, read: Any) -> Any:
    """``read()``, any reader failure as a :class:`DataError` naming ``path``."""
    try:
        return read()
    except Exception as exc:  # the reader raises whatever its parsers do (zip, JSON, pydantic): all mean "unreadable"
        raise _unreadable(path, exc) from exc


def _each(path: Path, samples: Iterable[Any]) -> Iterable[Any]:
    """The lazily read samples, a mid-way failure reported as :func:`_read` does."""
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
    """One inspect ``EvalSample`` as a trajectory; also the live gate's (:mod:`ceb.gate.inspect_approver`).

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
    """An inspect ``ChatMessage`` in the Chat Completions shape :func:`ceb.data.chat.chat_steps` reads."""
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
"""``ceb convert inspect``."""
