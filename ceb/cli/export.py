"""``ceb export``: a front over :func:`ceb.eval.export.export_table`, which loads (with pyarrow) only when used."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ceb.cli._common import err, fail
from ceb.errors import CEBError

__all__ = ["Format", "Table", "export"]

# The choices of ceb.eval.export.FORMATS and TABLES, spelled out here: importing that module loads the pipeline
# (and scikit-learn through the bank), which the command line must not do just to start.
Format = Literal["parquet", "csv"]
Table = Literal["scores", "hindsight"]
_SUFFIXES: dict[str, Format] = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv"}


def export(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `ceb score`.", show_default=False)],
    fmt: Annotated[
        Format | None,
        typer.Option(
            "--format",
            "-f",
            help="parquet or csv (default: from the --out suffix, .parquet or .csv; else parquet).",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="The file to write (default: RUN_DIR/TABLE.parquet or .csv).", show_default=False
        ),
    ] = None,
    table: Annotated[
        Table, typer.Option("--table", "-t", help="scores (one row per step and method) or hindsight.")
    ] = "scores",
    text_chars: Annotated[
        int,
        typer.Option(
            "--text-chars",
            min=1,
            help="scores: keep the first N characters of each step's task, state, action and "
            "observation (default: 500).",
            show_default=False,
        ),
    ] = 500,  # ceb.eval.export.TEXT_CHARS, spelled out as Format is (tests/eval/test_export.py checks)
    no_text: Annotated[
        bool, typer.Option("--no-text", help="scores: leave the task, state, action and observation columns out.")
    ] = False,
) -> None:
    """Export a run's scores or hindsight rows as one Parquet or CSV table.

    One column per row field, the stream order in its own column; a scores table also carries each step's task, state,
    action and observation from the run's stream files, cut to --text-chars. Parquet keeps nested fields nested
    (retrieved precedents as a list of structs) under a fixed schema and needs pyarrow
    (pip install -e '.[parquet]'); CSV writes each nested field as one cell of JSON text and an empty cell for
    null. Rows of older layouts are upgraded as they are read.
    """
    if fmt is None:
        fmt = _SUFFIXES.get(out.suffix.lower(), "parquet") if out is not None else "parquet"
    elif out is not None and _SUFFIXES.get(out.suffix.lower(), fmt) != fmt:
        raise typer.BadParameter(f"{out} has the suffix of {_SUFFIXES[out.suffix.lower()]}, not {fmt}")
    if out is None:
        out = run_dir / f"{table}.{fmt}"
    try:
        from ceb.eval.export import export_table
        from ceb.pipeline.rundir import RunDir

        if RunDir(run_dir).table(table).is_file() and (note := RunDir(run_dir).require_readable()) is not None:
            err.print(f"note: {note}", soft_wrap=True)
        result = export_table(run_dir, out, table=table, fmt=fmt, text_chars=None if no_text else text_chars)
    except CEBError as exc:
        raise fail(exc) from exc
    if result.texts_missing is not None:
        err.print(f"note: some steps have no text (their stream files cannot be read): {result.texts_missing}")
    typer.echo(f"{result.rows} rows written to {result.path}")
