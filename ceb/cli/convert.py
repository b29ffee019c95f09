"""``ceb convert <name>``: one subcommand per registered converter, its options read from the converter."""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args, get_origin

import typer
import typer.core
import typer.main
from rich.table import Table

from ceb.cli._common import Command, CommandGroup, out

if TYPE_CHECKING:
    from ceb.data.converters import Converter, SummaryColumn
    from ceb.data.writer import ConvertedStream

__all__ = ["convert_app"]


def _print_converted(converted: list[ConvertedStream], out_dir: Path, columns: tuple[SummaryColumn, ...]) -> None:
    titles = ("stream", "trajectories", "steps", "positive rate", *(c.title for c in columns))
    table = Table(*titles, title=f"streams in {out_dir}")
    for c in converted:
        extra = (column.value(c) for column in columns)
        rate = "— (no labelled step)" if math.isnan(c.positive_rate) else f"{c.positive_rate:.3f}"
        table.add_row(c.path.name, str(c.trajectories), str(c.steps), rate, *extra)
    out.print(table)


def _convert_command(name: str, converter: Converter) -> Any:
    """The ``ceb convert <name>`` command of one converter: its options become flags, its help the command's."""
    from ceb.data.converters import OUT_DIR, REQUIRED

    def run(**values: Any) -> None:
        for option in converter.options:
            if option.choices is not None and values[option.name] not in option.choices:
                *head, last = option.choices
                allowed = f"{', '.join(head)} or {last}" if head else last
                flag = option.flag or "--" + option.name.replace("_", "-")
                raise typer.BadParameter(f"{flag} must be {allowed}")
        converted = converter.convert(**values)
        _print_converted(converted, values[OUT_DIR.name], converter.columns)

    parameters = [
        inspect.Parameter(
            option.name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=option.type,
            default=typer.Option(
                ... if option.default is REQUIRED else option.default,
                *([option.flag] if option.flag else []),
                help=option.help,
                metavar=_metavar(option.type),
            ),
        )
        for option in converter.options
    ]
    run.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    single = typer.Typer(add_completion=False, rich_markup_mode=None)
    single.command(name, cls=Command, help=converter.help)(run)
    return typer.main.get_command(single)


def _metavar(kind: Any) -> str | None:
    """``<path>`` for a repeatable ``list[Path]`` option (typer would print ``<list[Path]>``); else typer's own."""
    if get_origin(kind) is list:
        (item,) = get_args(kind)
        return f"<{item.__name__.lower()}>"
    return None


class _ConvertGroup(CommandGroup):
    """``ceb convert``: one command per entry of :data:`ceb.data.converters.CONVERTERS`, read when first needed."""

    def _add_converters(self) -> None:
        from ceb.data.converters import CONVERTERS

        for name in CONVERTERS.names():
            if name not in self.commands:
                self.commands[name] = _convert_command(name, CONVERTERS.get(name))

    def list_commands(self, ctx: Any) -> list[str]:
        self._add_converters()
        return super().list_commands(ctx)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        self._add_converters()
        return super().get_command(ctx, cmd_name)


convert_app = typer.Typer(
    cls=_ConvertGroup, no_args_is_help=True, help="Convert other data layouts to the trajectory JSONL format."
)
