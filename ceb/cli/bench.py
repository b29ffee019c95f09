"""``ceb bench <name>``: run a benchmark of :mod:`ceb.bench.commands` with its own options; no checkout needed."""

from __future__ import annotations

import typer

from ceb.bench.commands import SUMMARIES
from ceb.cli._common import Command, CommandGroup, fail
from ceb.errors import CEBError

__all__ = ["bench_app"]

bench_app = typer.Typer(
    cls=CommandGroup,
    no_args_is_help=True,
    help="Run a benchmark. Each prints its figures and writes a JSON file of results (by default into "
    "./benchmarks/results); `ceb bench <name> --help` shows its own options.",
)


def _bench_command(name: str, summary: str) -> None:
    def run(ctx: typer.Context) -> None:
        from ceb.bench.commands import run as run_benchmark

        try:
            code = run_benchmark(name, list(ctx.args))
        except CEBError as exc:
            raise fail(exc) from exc
        if code:
            raise typer.Exit(code)

    bench_app.command(
        name,
        cls=Command,
        help=summary,
        add_help_option=False,  # --help goes to the benchmark, which lists its own options
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(run)


for _name, _summary in SUMMARIES.items():
    _bench_command(_name, _summary)
