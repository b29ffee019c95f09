"""``ceb report``: a front over :func:`ceb.eval.report.build_report`, which loads only when a report is built."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast, get_args

import typer

from ceb.cli._common import err, fail
from ceb.errors import CEBError

__all__ = ["FigureFormat", "report"]

# ceb.eval.plots.FIGURE_FORMATS, spelled out: importing the plots module loads matplotlib, which the command line
# must not do just to start.
FigureFormat = Literal["png", "pdf", "svg"]


def report(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `ceb score`.", show_default=False)],
    out: Annotated[Path | None, typer.Option("--out", help="Report directory (default: RUN_DIR/report).")] = None,
    bins: Annotated[
        int | None,
        typer.Option(
            help="Equal-width ECE bins, 1 to 10,000 (default: the run's ece_bins, else 10).", min=1, max=10_000
        ),
    ] = None,
    boot: Annotated[
        int,
        typer.Option(
            "--boot",
            help="Bootstrap replicates over trajectories, at most 100,000 (0: no intervals).",
            min=0,
            max=100_000,
        ),
    ] = 1000,
    seed: Annotated[int, typer.Option(help="Bootstrap seed (>= 0, as numpy takes it).", min=0)] = 0,
    figure_format: Annotated[
        list[str] | None,
        typer.Option(
            "--figure-format",
            metavar="png|pdf|svg[,...]",
            help="png, pdf or svg; repeat it or give a comma list for several (--figure-format png,pdf). Default: png.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Write the paper's tables (Markdown and LaTeX), figures (PNG, PDF or SVG) and report.json for a run directory.

    Covers the run's warnings, Table 1 with bootstrap intervals and reference rows (base rate, step position,
    repetition flag alone), paired differences against Static and the best reference, multi-order stream
    averaging, calibration by depth, reliability diagrams, selective execution, task success under a review
    budget, when the run has alternative labels the label shift and Table 1 against them, and the appendix
    tables the run's methods allow: component ablation, GT-oracle gap, V and k sweeps, token cost and retrieval
    mechanism. Writes RUN_DIR/report/report.md linking everything.
    """
    from ceb.pipeline.rundir import RunDir

    formats = _figure_formats(figure_format or ["png"])
    if bins is None:
        bins = RunDir(run_dir).recorded_or_default()[0].ece_bins  # the run's ece_bins, else 10
    try:
        RunDir(run_dir).require_scores()  # before the report's imports (scikit-learn, matplotlib): refused at once
        if (note := RunDir(run_dir).require_readable()) is not None:
            err.print(f"note: {note}", soft_wrap=True)
        from ceb.eval.report import build_report

        path = build_report(run_dir, out, n_bins=bins, n_boot=boot, seed=seed, figure_formats=formats)
    except CEBError as exc:
        raise fail(exc) from exc
    except OSError as exc:  # --out names a file, or a directory that cannot be written (a full disk, say)
        where = exc.filename or out or RunDir(run_dir).report_dir
        raise fail(exc, doing=f"cannot write the report to {where}") from exc
    typer.echo(f"report written to {path}")


def _figure_formats(values: list[str]) -> list[FigureFormat]:
    """The formats of repeated and comma-separated ``--figure-format`` values, in order, each once."""
    formats = list(dict.fromkeys(v.strip().lower() for value in values for v in value.split(",") if v.strip()))
    allowed = get_args(FigureFormat)
    unknown = [f for f in formats if f not in allowed]
    if unknown or not formats:
        shown = ", ".join(repr(f) for f in unknown) or "nothing"
        raise typer.BadParameter(f"{shown}: choose png, pdf or svg", param_hint="'--figure-format'")
    return cast(list[FigureFormat], formats)
