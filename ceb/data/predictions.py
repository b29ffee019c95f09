"""The predictions file of the offline GUI converters (Mind2Web, AMEX): one agent's answer per recorded step.

Both converters read the same container: a JSONL file with one object per predicted step, or a ``.json`` file
holding a list of such objects. Every record is an object whose keys all belong to the converter's list (so a
misspelt key cannot pass unnoticed), names its agent in ``actor`` (or the converter is given a default), and
may carry ``actor_logprobs``, the natural-log token probabilities of the answer. :func:`read_predictions`
checks those shared rules; each converter then reads its own keys through the record's ``fail``.
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
    """One record of a predictions file and its place: a JSONL line, or an item of a ``.json`` list.

    Attributes:
        line: 1-based line of a JSONL record; 0 for a list item (a problem then names the item in its field).
        prefix: ``""`` for a JSONL record, ``"[i]."`` for item ``i`` of a list; prepended to field names.
        where: ``"line 3"`` or ``"item [3]"``, for messages.
        obj: The decoded record.
    """

    line: int
    prefix: str
    where: str
    obj: Any


@dataclass(frozen=True, slots=True)
class CheckedPrediction:
    """A prediction record past the checks every predictions file shares (see :func:`read_predictions`).

    Attributes:
        record: The record and its place in the file.
        obj: The record's object; its keys are among the converter's.
        fail: Builds a :class:`~ceb.errors.DataError` naming the file, the line or item, and a field.
        actor: The agent's name: the record's ``actor``, or the converter's default.
        logprobs: ``actor_logprobs``, each a natural log <= 0, or ``None``.
    """

    record: PredictionRecord
    obj: Mapping[str, Any]
    fail: Fail
    actor: str
    logprobs: tuple[float, ...] | None


def read_predictions(path: Path, keys: Sequence[str], default_actor: str | None) -> Iterator[CheckedPrediction]:
    """The records of a predictions file, each an object with only ``keys``, with its actor and log-probs.

    Args:
        path: The predictions file: ``.json`` holds a list of records, any other suffix is read as JSONL.
        keys: Every key a record may hold.
        default_actor: The actor of records without an ``actor`` key, or ``None`` to require the key.

    Yields:
        The records in file order.

    Raises:
        DataError: The file cannot be read, is not valid JSON or holds no record; a record is not an object,
            has an unknown key, or has no usable actor or log-probs (names the file, the line or item, and
            the field).
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
    """The records of a predictions file: JSONL lines, or the items of a ``.json`` list."""
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
