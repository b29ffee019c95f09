"""The ``ceb`` command line (also ``python run.py``): one module per command, the app and :func:`main` here.

:mod:`._common` holds the consoles, the error printer, the exit codes and the option helpers. Each command imports
what it runs inside its function, so ``ceb --help`` loads none of numpy, scikit-learn, pandas, matplotlib or aiohttp
(``tests/cli/test_startup.py``).
"""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from ceb.cli import (
    batch,
    bench,
    convert,
    doctor,
    export,
    grid,
    label,
    merge,
    metrics,
    prompts,
    regenerate,
    relabel,
    report,
    score,
    serve,
    sim_server,
)
from ceb.cli._common import Command, CommandGroup, setup_logging

__all__ = ["WORKFLOW", "app", "main"]

WORKFLOW = (
    "convert",
    "doctor",
    "prompts",
    "score",
    "grid",
    "batch",
    "merge",
    "metrics",
    "report",
    "export",
    "relabel",
    "label",
    "regenerate",
    "serve",
    "bench",
    "sim-server",
)
"""The order ``ceb --help`` lists the commands in: data in, endpoint checks, scoring, results, the LLM judge and
regeneration, the live gate, then the tools."""


class _Workflow(CommandGroup):
    """``ceb --help``: the commands in :data:`WORKFLOW` order."""

    order = WORKFLOW


app = typer.Typer(
    cls=_Workflow,
    add_completion=False,
    rich_markup_mode=None,  # help texts are plain: "[grid]" stays "[grid]"
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Critic Experience Bank: calibrated step-level confidence for LLM agents.\n\n"
    "Typical use: `ceb convert intercode --root ../shared/data/intercode` writes the real InterCode streams to "
    "./streams, then `ceb score streams/intercode-bash-*.jsonl --out runs/intercode-bash` scores them and prints "
    "ECE, Brier and AUROC.\n\n"
    "--log-level, --log-format, --progress and --progress-interval may also follow the command's name.",
)


def _print_version(value: bool) -> None:
    if value:
        from ceb.version import __version__

        print(f"ceb {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    log_level: Annotated[
        str, typer.Option("--log-level", help="debug, info, warning or error (logs go to stderr).")
    ] = "warning",
    log_format: Annotated[
        Literal["console", "json"],
        typer.Option("--log-format", help="console (readable lines) or json (one JSON object per line)."),
    ] = "console",
    progress: Annotated[
        str,
        typer.Option(
            "--progress",
            help="auto (a bar on a terminal, else a log line every --progress-interval seconds), bar, log or off.",
        ),
    ] = "auto",
    progress_interval: Annotated[
        float, typer.Option("--progress-interval", help="Seconds between progress log lines.", min=0.1)
    ] = 30.0,
    version: Annotated[
        bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    setup_logging(log_level, log_format, progress, progress_interval)


app.command("score", cls=Command)(score.score)
app.command("grid", cls=Command)(grid.grid)
app.command("merge", cls=Command)(merge.merge)
app.command("metrics", cls=Command)(metrics.metrics)
app.command("doctor", cls=Command)(doctor.doctor)
app.command("prompts", cls=Command)(prompts.prompts)
app.command("relabel", cls=Command)(relabel.relabel)
app.command("label", cls=Command)(label.label)
app.command("regenerate", cls=Command)(regenerate.regenerate)
app.add_typer(convert.convert_app, name="convert")
app.add_typer(bench.bench_app, name="bench")
app.add_typer(batch.batch_app, name="batch")
app.command(
    "sim-server",
    cls=Command,
    help="Start the SIMULATED OpenAI-compatible server (not a model) on 127.0.0.1, for benchmarks and tests.",
)(sim_server.sim_server)
app.command(
    "report",
    cls=Command,
    help="Write the paper's tables (Markdown, LaTeX) and figures (PNG, PDF or SVG) for a run directory into "
    "RUN_DIR/report.",
)(report.report)
app.command("export", cls=Command)(export.export)
app.command("serve", cls=Command)(serve.serve)


def main() -> None:
    """Entry point of the ``ceb`` console script."""
    app()
