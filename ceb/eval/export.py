"""A run's result rows as one flat, typed table: Parquet (pyarrow, the ``parquet`` extra) or CSV.

Rows come from the one reader (:func:`ceb.pipeline.read_step_rows`, :func:`ceb.pipeline.read_hindsight_rows`), so
older layouts are upgraded first; one column per field of :class:`~ceb.pipeline.results.StepRow` (``scores``) or
:class:`~ceb.pipeline.results.HindsightRow` (``hindsight``), in order. Parquet has the fixed :func:`arrow_schema`,
nested fields nested; CSV (RFC 4180, UTF-8) writes scalars as ``scores.jsonl`` does, null as an empty cell, nested
fields as compact JSON. ``scores`` also carries :data:`TEXT_COLUMNS` from the recorded stream files, each cut to
``text_chars``. A table is written to a temporary sibling and renamed, so a failed export leaves nothing.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Callable, Iterable, Iterator
from contextlib import suppress
from dataclasses import asdict, dataclass, fields
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import orjson

from ceb.bank import BankRecord
from ceb.errors import ConfigError, RunError, with_path
from ceb.pipeline.results import ROW_SCHEMA, HindsightRow, StepRow, read_hindsight_rows, read_step_rows
from ceb.pipeline.rundir import RunDir
from ceb.version import install_command

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FORMATS",
    "TABLES",
    "TEXT_CHARS",
    "TEXT_COLUMNS",
    "ExportFormat",
    "ExportResult",
    "ExportTable",
    "arrow_schema",
    "export_table",
]

ExportFormat = Literal["parquet", "csv"]
ExportTable = Literal["scores", "hindsight"]
FORMATS: tuple[ExportFormat, ...] = get_args(ExportFormat)
"""The formats :func:`export_table` writes."""
TABLES: tuple[ExportTable, ...] = get_args(ExportTable)
"""The tables of a run directory: ``scores`` (``scores.jsonl``) and ``hindsight`` (``hindsight.jsonl``)."""

TEXT_COLUMNS = ("task", "state", "action", "observation")
"""The step's text a ``scores`` export carries after the row's fields."""

TEXT_CHARS = 500
"""Characters of each text column kept by default."""

PARQUET_HINT = install_command("parquet")
"""How to get pyarrow, named in the error when it is missing."""

_BATCH_ROWS = 50_000  # rows per Parquet row group: bounded memory on a grid's millions of rows

_Row = StepRow | HindsightRow
_READERS: dict[ExportTable, tuple[type[_Row], Callable[[Path], Iterator[Any]]]] = {
    "scores": (StepRow, read_step_rows),
    "hindsight": (HindsightRow, read_hindsight_rows),
}


@dataclass(frozen=True, slots=True)
class ExportResult:
    """What :func:`export_table` wrote; ``texts_missing`` says why some steps have no text, if they do."""

    path: Path
    rows: int
    format: ExportFormat
    texts_missing: str | None = None


def export_table(
    run_dir: str | Path,
    out: str | Path,
    *,
    table: ExportTable = "scores",
    fmt: ExportFormat = "parquet",
    text_chars: int | None = TEXT_CHARS,
) -> ExportResult:
    """Write ``table`` of ``run_dir`` as ``fmt`` into ``out`` (module docstring); an existing file is replaced.

    ``text_chars``: for ``scores``, the characters kept per :data:`TEXT_COLUMNS` column (>= 1); ``None``: no text.

    Raises:
        RunError: ``run_dir`` is no complete run directory with that table, a line before the last is not a row,
            or ``out`` is a directory or under a file.
        OSError: ``out`` cannot be written (naming it); nothing is left.
        ConfigError: pyarrow is missing for ``parquet`` (naming the extra), or ``table`` / ``fmt`` is unknown.
    """
    if table not in _READERS:
        raise ConfigError(f"unknown table {table!r}; choose one of: {', '.join(TABLES)}")
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; choose one of: {', '.join(FORMATS)}")
    run, path = Path(run_dir), Path(out)
    if not run.is_dir():
        problem = "is not a directory" if run.exists() else "does not exist"
        raise RunError(f"{run} {problem}; give a run directory written by `ceb score`")
    source = RunDir(run).table(table)
    if not source.is_file():
        raise RunError(f"{run} has no {source.name}; is it a run directory written by `ceb score`?")
    RunDir(run).require_readable()
    if path.is_dir():
        raise RunError(f"{path} is a directory; name the {fmt} file to write")
    if text_chars is not None and text_chars < 1:
        raise ConfigError(f"text_chars {text_chars}: keep at least 1 character, or None for no text columns")
    texts = table == "scores" and text_chars is not None
    cls, read = _READERS[table]
    schema = arrow_schema(table, texts=texts) if fmt == "parquet" else None  # without pyarrow, fail before the disk
    rows: Iterator[dict[str, Any]] = (asdict(row) for row in read(source))
    missing = None
    if texts:
        assert text_chars is not None
        by_step, missing = _step_texts(RunDir(run), text_chars)
        rows = (row | by_step.get((row["stream"], row["trajectory"], row["step"]), _NO_TEXT) for row in rows)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if schema is not None:
            n = _write_parquet(rows, tmp, schema)
        else:
            n = _write_csv(rows, tmp, [f.name for f in fields(cls)] + (list(TEXT_COLUMNS) if texts else []))
        os.replace(tmp, path)
    except FileExistsError as exc:  # a file where a parent directory should be
        raise RunError(f"cannot write {path}: {exc.filename} is not a directory") from exc
    except OSError as exc:  # a full disk, a permission: one line and its own exit code (ceb.cli._common.fail)
        raise with_path(exc, path) from exc
    finally:
        with suppress(OSError):
            tmp.unlink(missing_ok=True)
    return ExportResult(path, n, fmt, missing)


_NO_TEXT: dict[str, str | None] = dict.fromkeys(TEXT_COLUMNS)


def _step_texts(run: RunDir, chars: int) -> tuple[dict[tuple[str, str, int], dict[str, str]], str | None]:
    """``(stream, trajectory, step)`` -> the step's :data:`TEXT_COLUMNS`, cut; and why some streams have none."""
    streams, missing = run.recorded_trajectories()
    out: dict[tuple[str, str, int], dict[str, str]] = {}
    for stream, trajectories in streams.items():
        for traj in trajectories:
            task = traj.task[:chars]
            for t, step in enumerate(traj.steps):
                out[stream, traj.id, t] = {
                    "task": task,
                    "state": step.state[:chars],
                    "action": step.action[:chars],
                    "observation": step.observation[:chars],
                }
    why = "; ".join(f"{s}: {reason}" if s != "*" else reason for s, reason in missing.items())
    return out, why or None


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ConfigError(f"Parquet export needs pyarrow, which is not installed: {PARQUET_HINT}") from None
    return pyarrow


def arrow_schema(table: ExportTable = "scores", *, texts: bool = False) -> pa.Schema:
    """The fixed Arrow schema of a table (fields never null in the current layout are non-nullable).

    With ``texts`` (``scores`` only) the nullable :data:`TEXT_COLUMNS` follow; the metadata names the table and
    :data:`~ceb.pipeline.results.ROW_SCHEMA`.

    Raises:
        ConfigError: pyarrow is not installed (naming the extra), or ``table`` is unknown.
    """
    pa = _pyarrow()
    string, int64, float64, boolean = pa.string(), pa.int64(), pa.float64(), pa.bool_()

    def required(name: str, kind: Any) -> Any:
        return pa.field(name, kind, nullable=False)

    def list_of(kind: Any) -> Any:
        # Named as Parquet names list items, so a table read back from Parquet has this very schema.
        return pa.list_(required("element", kind))

    lane = [required("stream", string), required("method", string), required("trajectory", string)]
    placement = [required("order", int64), required("position", int64), required("critic", string)]
    usage = [
        required("latency_s", float64),
        *([required("queue_s", float64)] if table == "scores" else []),
        required("requests", int64),
        pa.field("prompt_tokens", int64),
        pa.field("completion_tokens", int64),
    ]
    if table == "scores":
        precedent = pa.struct(
            [
                required("trajectory", string),
                required("step", int64),
                required("pseudo_label", int64),
                required("similarity", float64),
            ]
        )
        alt_label = pa.struct([required("name", string), pa.field("label", int64)])
        columns = [
            *lane,
            required("step", int64),
            pa.field("score", float64),
            pa.field("label", int64),
            pa.field("error", string),
            required("clipped", boolean),
            required("raw", string),
            *usage,
            required("bank_size", int64),
            required("repetition_flag", boolean),
            required("retrieved", list_of(precedent)),
            *placement,
            required("alt_labels", list_of(alt_label)),
            pa.field("input_tokens", int64),
            pa.field("bank_tokens", int64),
            required("status", string),
            pa.field("reused_from", int64),
            required("retries", int64),
            pa.field("retry_reason", string),
            pa.field("readout", string),
            required("schema", int64),
            *([pa.field(name, string) for name in TEXT_COLUMNS] if texts else []),
        ]
    elif table == "hindsight":
        record_types = {"pseudo_label": int64, "soft_vote": float64, "score": float64, "agreement": boolean}
        record_types |= {"step": int64}
        record = pa.struct(
            [
                pa.field(f.name, record_types.get(f.name, string), nullable=f.name in ("score", "agreement"))
                for f in fields(BankRecord)
            ]
        )
        columns = [
            *lane,
            required("votes", list_of(list_of(int64))),
            required("soft_votes", list_of(float64)),
            required("pseudo_labels", list_of(int64)),
            required("failed_votes", int64),
            required("errors", list_of(string)),
            required("records_added", int64),
            *usage,
            *placement,
            required("records", list_of(record)),
            required("abstained", list_of(pa.struct([required("step", int64), required("reason", string)]))),
            required("retries", int64),
            pa.field("retry_reason", string),
            required("schema", int64),
        ]
    else:
        raise ConfigError(f"unknown table {table!r}; choose one of: {', '.join(TABLES)}")
    return pa.schema(columns, metadata={"ceb.table": table, "ceb.row_schema": str(ROW_SCHEMA)})


def _batches(rows: Iterable[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    it = iter(rows)
    while batch := list(islice(it, size)):
        yield batch


def _write_parquet(rows: Iterable[dict[str, Any]], path: Path, schema: pa.Schema) -> int:
    pa = _pyarrow()
    n = 0
    with pa.parquet.ParquetWriter(path, schema, compression="zstd") as writer:
        for batch in _batches(rows, _BATCH_ROWS):
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            n += len(batch)
    return n


def _write_csv(rows: Iterable[dict[str, Any]], path: Path, columns: list[str]) -> int:
    n = 0
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(row[name]) for name in columns])
            n += 1
    return n


def _cell(value: Any) -> str:
    """A CSV cell: as in the JSONL row, empty for null, nested values as JSON text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value).decode()
