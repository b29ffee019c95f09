"""Strict reading of converter inputs: JSON fields checked one by one, input files in a fixed order.

A record's reader makes a :data:`Fail` turning ``(field, message)`` into a :class:`~ceb.errors.DataError`
placed in its file; the helpers here call it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ceb.errors import ConfigError, DataError

__all__ = ["Fail", "data_root", "json_files_under", "kind", "natural_key", "optional_str", "required_str"]

Fail = Callable[..., DataError]
"""``fail(field, message[, step])`` -> the record's :class:`~ceb.errors.DataError`."""

_DIGITS = re.compile(r"(\d+)")


def required_str(obj: Mapping[str, Any], key: str, fail: Fail) -> str:
    """``obj[key]``, a string with more than white space; else ``fail(key, ...)`` is raised."""
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise fail(key, f"missing or not a non-empty string, got {kind(value)}")
    return value


def optional_str(obj: Mapping[str, Any], key: str, fail: Fail) -> str | None:
    """``obj[key]``, a string or ``None``; else ``fail(key, ...)`` is raised."""
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise fail(key, f"must be a string or null, got {kind(value)}")
    return value


def kind(x: Any) -> str:
    """A decoded JSON value's kind for messages: ``"null"``, ``"a number"``, ``"an empty string"``..."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "a boolean"
    if isinstance(x, int | float):
        return "a number"
    if isinstance(x, str):
        return "a string" if x.strip() else "an empty string"
    if isinstance(x, list):
        return "a list"
    if isinstance(x, dict):
        return "an object"
    return type(x).__name__


def natural_key(path: Path) -> list[str | int]:
    """Sort key comparing digit runs as numbers: ``train_2`` before ``train_10``."""
    return [int(part) if part.isdigit() else part for part in _DIGITS.split(path.name)]


def json_files_under(directory: Path, pattern: str = "*.json") -> list[Path]:
    """Files matching ``pattern`` under ``directory``, by relative path part by part in :func:`natural_key` order."""
    found = [p for p in directory.rglob(pattern) if p.is_file()]
    return sorted(found, key=lambda p: [natural_key(Path(part)) for part in p.relative_to(directory).parts])


def data_root(given: str | Path | None, flag: str, variable: str, what: str) -> Path:
    """A data set's root: ``given`` (the flag), else environment ``variable``; never the working directory.

    Raises:
        ConfigError: Neither is given (an empty variable counts as absent); names ``flag`` and ``variable``.
    """
    if given is not None:
        return Path(given)
    value = os.environ.get(variable, "").strip()
    if not value:
        raise ConfigError(f"no {what} data root: pass {flag} DIR or set {variable}=DIR")
    return Path(value)
