"""Where a benchmark's figures go: one JSON file per run, named by the benchmark and the UTC time it was written."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["results_path", "save_results"]


def _settings(value: Any) -> Any:
    """A pydantic settings model inside a result (e.g. :class:`~ceb.sim.SimConfig`), as its fields."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot encode {type(value).__name__}")


def results_path(out: Path, kind: str) -> Path:
    """``<out>/<kind>-<UTC stamp>.json``, the file :func:`save_results` writes now."""
    return out / f"{kind}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"


def save_results(
    out: Path,
    kind: str,
    result: DataclassInstance | Mapping[str, Any],
    machine: Mapping[str, Any] | None = None,
    *,
    path: Path | None = None,
) -> Path:
    """Write ``result`` as ``<out>/<kind>-<UTC stamp>.json`` (or ``path``): ``{"benchmark": kind, ..., "machine"}``.

    ``result`` is a dataclass (nested dataclasses, tuples, numpy values and pydantic settings allowed) or a mapping.

    Raises:
        OSError: The folder or file cannot be written.
        TypeError: A value orjson cannot encode.
    """
    fields = dataclasses.asdict(result) if dataclasses.is_dataclass(result) else dict(result)
    doc = {"benchmark": kind, **fields} | ({"machine": dict(machine)} if machine is not None else {})
    out.mkdir(parents=True, exist_ok=True)
    path = path or results_path(out, kind)
    path.write_bytes(orjson.dumps(doc, default=_settings, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    return path
