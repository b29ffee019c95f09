"""``ceb bench <name>``: a benchmark of :mod:`ceb.bench.commands`, its options made from its settings' fields.

A benchmark's module is imported only when it is run or asked for its ``--help``; ``ceb bench --help`` lists them
from their one-line summaries. A benchmark whose extra is missing still shows its help and says what to install
when run.
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

import typer

from ceb.bench.commands import BENCHMARKS, SUMMARIES
from ceb.cli._common import Command, CommandGroup
from ceb.cli._options import settings_command
from ceb.registry import did_you_mean

__all__ = ["bench_app"]


class _Benchmarks(CommandGroup):
    """The registered benchmarks, in declaration order, each loaded when it is named."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(SUMMARIES)

    def get_command(self, ctx: Any, name: str) -> Any:
        if name not in SUMMARIES:
            ctx.fail(
                f"unknown benchmark {name!r}{did_you_mean(name, SUMMARIES)}; choose one of: {', '.join(SUMMARIES)}"
            )
        return _command(name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl(list(SUMMARIES.items()))


def _command(name: str) -> Any:
    """The click command of benchmark ``name``: its ``main(settings)`` with one option per settings field."""
    main = BENCHMARKS.get(name, check=False)
    (param,) = inspect.signature(main).parameters
    model = typing.get_type_hints(main)[param]

    def run(settings: Any) -> int:
        BENCHMARKS.get(name)  # its extra: a ConfigError naming the install, printed as one line
        return main(settings)

    run.__annotations__ = {"settings": model, "return": int}
    one = typer.Typer(add_completion=False, rich_markup_mode=None)
    one.command(name, cls=Command, help=model.__doc__, short_help=SUMMARIES[name])(settings_command(run))
    return typer.main.get_command(one)


bench_app = typer.Typer(
    cls=_Benchmarks,
    no_args_is_help=True,
    help="Benchmarks to run on your own deployment or data: the client, bank, gate, serving and routing. Each prints "
    "its figures and writes a JSON file of results (by default into ./benchmarks/results); `ceb bench <name> --help` "
    "shows its own options.",
)
