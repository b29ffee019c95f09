"""The predictions container of the Mind2Web and AMEX converters: one agent answer per recorded step.

JSONL (an object a line) or a ``.json`` list; every key from the converter's list (no misspelling passes), an
``actor`` (or the converter's default), optional ``actor_logprobs`` (natural logs). :func:`read_predictions`
checks these; each converter reads its own keys through the record's ``fail``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.data.sources import Fail, kind
from ceb.errors import DataError, Problem

__all__ = ["CheckedPrediction", "PredictionRecord", "read_predictions"]


@dataclass(frozen=True, slots=True)
class PredictionRecord:
    """One record and its place: ``line`` (1-based; 0 for a list item), ``prefix`` (``"[i]."`` for item ``i``)."""

    line: int
    prefix: str
    where: str
    obj: Any


@dataclass(frozen=True, slots=True)
class CheckedPrediction:
    """A record past the shared checks; ``fail`` builds a :class:`~ceb.errors.DataError` naming file, place, field."""

    record: PredictionRecord
    obj: Mapping[str, Any]
    fail: Fail
    actor: str
    logprobs: tuple[float, ...] | None


def read_predictions(path: Path, keys: Sequence[str], default_actor: str | None) -> Iterator[CheckedPrediction]:
    """The records of ``path`` (``.json``: a list; else JSONL), in order, with their actor and log-probs.

    Raises:
        DataError: Unreadable, bad JSON or no record; a record not an object, with a key not in ``keys``, or no
            usable actor or log-probs (names file, line or item, field).
    """
    found = False
    for record in _load_records(path):
        obj = record.obj

        def fail(field: str, message: str, record: PredictionRecord = record) -> DataError:
            return DataError(Problem(str(path), record.line, record.prefix + field, message))

        if not isinstance(obj, dict):
            raise fail("<line>", f"must be a JSON object, got {kind(obj)}")
        unknown = sorted(set(obj) - set(keys))
        if unknown:
            raise fail(unknown[0], f"unknown key; a prediction holds {', '.join(keys)}")
        name = obj.get("actor", default_actor)
        if name is None:
            raise fail("actor", "missing: give each prediction an actor, or pass actor= to the converter")
        if not isinstance(name, str) or not name.strip():
            raise fail("actor", f"must be a non-empty string, got {kind(name)}")
        found = True
        yield CheckedPrediction(record, obj, fail, name, _logprobs(obj.get("actor_logprobs"), fail))
    if not found:
        raise DataError(Problem(str(path), 0, "<file>", "holds no prediction"))


def _load_records(path: Path) -> Iterator[PredictionRecord]:
    """JSONL lines, or the items of a ``.json`` list."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(Problem(str(path), 0, "<file>", f"cannot read the file: {exc.strerror or exc}")) from exc
    if path.suffix == ".json":
        try:
            items = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise DataError(Problem(str(path), exc.lineno, "<file>", f"not valid JSON: {exc.msg}")) from exc
        if not isinstance(items, list):
            raise DataError(Problem(str(path), 0, "<file>", "a .json predictions file must hold a list of objects"))
        yield from (PredictionRecord(0, f"[{i}].", f"item [{i}]", item) for i, item in enumerate(items))
        return
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise DataError(Problem(str(path), lineno, "<line>", f"not valid JSON: {exc.msg}")) from exc
        yield PredictionRecord(lineno, "", f"line {lineno}", obj)


def _logprobs(value: Any, fail: Fail) -> tuple[float, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise fail("actor_logprobs", "must be a non-empty list of log-probabilities (numbers <= 0) or null")
    for j, x in enumerate(value):
        if type(x) not in (int, float) or not math.isfinite(x) or x > 0:
            raise fail(f"actor_logprobs[{j}]", f"must be a finite number <= 0 (a natural log), got {x!r}")
    return tuple(float(x) for x in value)
