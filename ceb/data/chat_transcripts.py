"""Convert OpenAI chat transcripts (agents on the OpenAI SDK) into one stream: ``ceb convert chat``.

Input: a ``.jsonl`` file (a transcript a line), a ``.json`` file (one transcript, or a bare ``messages``
array), or a folder of both (any depth, natural order). A transcript::

    {"messages": [...],                 required: Chat Completions messages (ceb.data.chat)
     "id": "run-7",                     optional (default: <file>:<line>)
     "task": "...",                     optional (default: the first user message's text)
     "labels": [1, 0, null],            optional: one step label per step
     "success": true,                   optional: the outcome (true/false or 1/0)
     "score": 1.0,                      optional: 1 or 0 is the outcome unless success says
     "actor": "gpt-5", "model": "...",  optional: the agent (actor, else model, else --actor)
     "env": "...", "domain": "tool",    optional (domain else --domain)
     "meta": {...},                     optional: carried through
     "tools": [...], "parallel_tool_calls": ...}   ignored (request / fine-tuning format fields)

Other top-level fields (``usage``, ``created``) go to ``meta`` with one warning per file (``strict`` refuses
them). Steps are :func:`ceb.data.chat.chat_steps`. The outcome (:func:`ceb.data.chat.outcome_label`) is
written as ``meta.label`` with the raw ``meta.score``; step metrics do not read it. ``meta`` also records
``file`` and ``line``; a transcript with no step is skipped and counted. Output: ``<out>/chat-<input
name>.jsonl``, all or nothing; problems name file, line and field (``messages[3].tool_call_id``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from ceb.data.chat import chat_steps, outcome_label
from ceb.data.converters import OUT_DIR, Converter, ConverterOption, SummaryColumn
from ceb.data.reader import DOMAIN
from ceb.data.sources import json_files_under, kind
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, SkippedTrajectory, StagedStreams, stream_file_names
from ceb.errors import DataError, Problem
from ceb.logs import get_logger

__all__ = ["CONVERTER", "DEFAULT_DOMAIN", "convert_chat", "transcript_files"]

DEFAULT_DOMAIN = "tool"
"""Domain of a transcript that names none (the ``generic`` prompt family)."""

_FIELDS = (
    "messages",
    "id",
    "task",
    "labels",
    "success",
    "score",
    "actor",
    "model",
    "env",
    "domain",
    "meta",
    "tools",
    "parallel_tool_calls",
)
_OWN_META = ("file", "line", "label", "score")

log = get_logger(__name__)


def convert_chat(
    transcripts: str | Path,
    out_dir: str | Path,
    actor: str | None = None,
    domain: str = DEFAULT_DOMAIN,
    strict: bool = False,
) -> list[ConvertedStream]:
    """One stream ``chat-<name>.jsonl`` in ``out_dir`` from chat transcripts (module docstring).

    ``actor`` and ``domain`` apply to transcripts naming none; ``strict`` refuses unknown top-level fields
    instead of keeping them in ``meta``.

    Raises:
        DataError: No file; a line not JSON or not a transcript (unknown field under ``strict``, bad message,
            ``labels`` not one per step, repeated id); or no transcript had a step. Names file, line, field.
    """
    root = Path(transcripts)
    files = transcript_files(root)
    if not DOMAIN.fullmatch(domain):
        raise DataError(Problem(str(root), 0, "--domain", f"must be a lower-case word, got {domain!r}"))
    name = stream_file_names("chat", [root.stem or "transcripts"], root)[root.stem or "transcripts"]
    skipped: list[SkippedTrajectory] = []
    seen: dict[str, str] = {}
    actors: set[str] = set()
    with StagedStreams(out_dir, {"chat": name}) as staged:
        for path in files:
            rel = path.name if path == root else path.relative_to(root).as_posix()
            for line, record in _unknown_fields_in_meta(path, _records(path), strict):
                trajectory = _trajectory(record, path, rel, line, actor, domain)
                if trajectory.id in seen:
                    problem = f"duplicate id {trajectory.id!r}; first at {seen[trajectory.id]}"
                    raise DataError(Problem(str(path), line, "id", problem, trajectory.id))
                seen[trajectory.id] = f"{rel}:{line}"
                if not trajectory.steps:
                    skipped.append(SkippedTrajectory(trajectory.id, "no actions", 0))
                    continue
                staged.add("chat", trajectory)
                actors.add(trajectory.actor or "unknown")
        if len(skipped) == len(seen):
            raise DataError(
                Problem(str(root), 0, "<file>", "no transcript has an assistant action (a tool call or reply)")
            )
        [stream] = staged.commit(
            dataset="chat",
            actors={"chat": actors.pop() if len(actors) == 1 else "several"},
            sources=[str(p) for p in files],
            skipped={"chat": skipped},
        )
    log.info("chat.stream_written", path=str(stream.path), trajectories=stream.trajectories, skipped=len(skipped))
    return [stream]


def transcript_files(root: Path) -> list[Path]:
    """``root`` itself, or the ``.jsonl``/``.json`` files under folder ``root`` in natural order.

    Raises:
        DataError: ``root`` does not exist, or holds no such file.
    """
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise DataError(Problem(str(root), 0, "<file>", "no such file or folder"))
    files = [p for p in json_files_under(root, "*.json*") if p.suffix in (".json", ".jsonl")]
    if not files:
        raise DataError(Problem(str(root), 0, "<file>", "no .jsonl or .json transcript file in this folder"))
    return files


def _records(path: Path) -> Iterator[tuple[int, Any]]:
    """:func:`_read_records`; a file failing mid-read is reported as unreadable."""
    try:
        yield from _read_records(path)
    except OSError as exc:
        raise DataError(Problem(str(path), 0, "<file>", f"cannot read the file: {exc.strerror or exc}")) from None


def _read_records(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line, transcript)`` per JSON line, or the whole file (indented JSON) at its first line."""
    first = 0
    with path.open("rb") as handle:  # its failure to open or read: _records
        for n, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                value = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                if first:  # a later line: the file is JSON Lines and this line is broken
                    raise DataError(Problem(str(path), n, "<line>", f"not valid JSON: {exc.msg}")) from exc
                first = n
                break
            first = first or n
            yield n, value
        else:
            if not first:
                raise DataError(Problem(str(path), 0, "<file>", "holds no transcript (empty)"))
            return
    try:
        whole = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as exc:
        raise DataError(Problem(str(path), max(first, exc.lineno), "<line>", f"not valid JSON: {exc.msg}")) from exc
    yield first, whole


def _unknown_fields_in_meta(path: Path, records: Iterator[tuple[int, Any]], strict: bool) -> Iterator[tuple[int, Any]]:
    """``records`` with unknown top-level fields moved into ``meta`` (one warning), unless ``strict``."""
    kept: dict[str, int] = {}
    for line, record in records:
        unknown = [] if strict or not isinstance(record, dict) else sorted(set(record) - set(_FIELDS))
        meta = record.get("meta") if unknown else None
        if unknown and (meta is None or isinstance(meta, dict)):
            meta = dict(meta or {})
            for key in unknown:
                if key in meta or key in _OWN_META:
                    problem = f"unknown field, kept in meta, but meta.{key} is taken; rename one"
                    raise DataError(Problem(str(path), line, key[:60], problem))
                meta[key] = record.pop(key)
                kept[key] = kept.get(key, 0) + 1
            record["meta"] = meta
        yield line, record
    if kept:
        fields = ", ".join(f"{key} ({n} transcripts)" for key, n in sorted(kept.items()))
        log.warning("chat.unknown_fields_kept_in_meta", file=str(path), fields=fields, refuse_with="--strict")


def _trajectory(record: Any, path: Path, rel: str, line: int, actor: str | None, domain: str) -> Trajectory:
    """One transcript as a trajectory (maybe stepless); problems name ``path``, ``line``, field."""

    def fail(field: str, message: str) -> DataError:
        return DataError(Problem(str(path), line, field, message))

    if isinstance(record, list):  # a bare messages array: the whole file is one transcript
        record = {"messages": record}
    if not isinstance(record, dict):
        raise fail("<line>", f"must be a transcript object or a messages array, got {kind(record)}")
    unknown = sorted(set(record) - set(_FIELDS))
    if unknown:
        raise fail(str(unknown[0])[:60], f"unknown field; allowed: {', '.join(_FIELDS)}")
    if "messages" not in record:
        raise fail("messages", "required field is missing")
    chat = chat_steps(record["messages"], path=str(path), line=line)
    tid = _string(record, "id", fail) or f"{rel}:{line}"
    if not tid.strip():
        raise fail("id", "must be a non-blank string")
    task = _string(record, "task", fail)
    if task is None:
        if chat.task is None:
            raise fail("task", "missing, and the messages hold no user message to take it from")
        task = chat.task
    steps = _labelled(chat.steps, record.get("labels"), fail)
    meta = _meta(record, rel, line, fail)
    own_domain = _string(record, "domain", fail) or domain
    if not DOMAIN.fullmatch(own_domain):
        raise fail("domain", "must be a lower-case word matching [a-z][a-z0-9_-]*")
    return Trajectory(
        id=tid,
        task=task,
        domain=own_domain,
        steps=steps,
        actor=_string(record, "actor", fail) or _string(record, "model", fail) or actor,
        env=_string(record, "env", fail),
        meta=meta,
        source=f"{path}:{line}",
    )


def _string(record: dict[str, Any], key: str, fail: Any) -> str | None:
    value = record.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(key, f"must be a string or null, got {kind(value)}")
    return value


def _labelled(steps: tuple[Step, ...], labels: Any, fail: Any) -> tuple[Step, ...]:
    """``steps`` with the held-out ``labels`` applied, when given."""
    if labels is None:
        return steps
    if not isinstance(labels, list):
        raise fail("labels", f"must be a list with one label (0, 1 or null) per step, got {kind(labels)}")
    if len(labels) != len(steps):
        raise fail(
            "labels",
            f"{len(labels)} labels for {len(steps)} steps (a step per assistant tool call, and per reply without one)",
        )
    out = []
    for t, (step, label) in enumerate(zip(steps, labels, strict=True)):
        if label is not None and not (type(label) is int and label in (0, 1)):
            raise fail(f"labels[{t}]", f"must be the integer 0 or 1, or null, got {label!r}")
        out.append(replace(step, label=label))
    return tuple(out)


def _meta(record: dict[str, Any], rel: str, line: int, fail: Any) -> dict[str, Any]:
    """The transcript's ``meta`` plus ``file``, ``line``, ``label``, ``score``."""
    given = record.get("meta")
    if given is not None and not isinstance(given, dict):
        raise fail("meta", f"must be an object or null, got {kind(given)}")
    meta = dict(given or {})
    for key in _OWN_META:
        if key in meta:
            raise fail(f"meta.{key}", f"is ceb's own ({', '.join(_OWN_META)}); rename it")
    meta |= {"file": rel, "line": line}
    success, score = record.get("success"), record.get("score")
    if success is not None and (isinstance(success, str) or outcome_label(success) is None):
        raise fail("success", f"must be true, false, 1 or 0, got {success!r}")
    if score is not None and (isinstance(score, bool) or not isinstance(score, int | float)):
        raise fail("score", f"must be a number, got {kind(score)}")
    label = outcome_label(success) if success is not None else outcome_label(score) if score is not None else None
    if label is not None:
        meta["label"] = label
    if score is not None:
        meta["score"] = score
    return meta


CONVERTER = Converter(
    help="""Write one trajectory stream from OpenAI chat transcripts (JSONL, one per line, or one per file).

Each assistant tool call is a step (action = name {arguments}, observation = the tool message answering
it, state = the observation before); the first user message is the task; optional labels (one per step)
and success / score (the trajectory's outcome, kept in meta). Fields: ceb/data/chat_transcripts.py.""",
    convert=convert_chat,
    options=(
        ConverterOption("transcripts", Path, "A .jsonl / .json transcript file, or a folder of them."),
        OUT_DIR,
        ConverterOption("actor", str | None, "Actor of a transcript that names none (actor or model).", default=None),
        ConverterOption(
            "domain", str, "Domain of a transcript that names none (prompt family).", default=DEFAULT_DOMAIN
        ),
        ConverterOption(
            "strict",
            bool,
            "Refuse a transcript with an unknown top-level field (default: keep it in meta, warning once a file).",
            default=False,
            flag="--strict",
        ),
    ),
    columns=(SummaryColumn("skipped (no action)", lambda c: str(len(c.skipped))),),
)
"""``ceb convert chat``."""
