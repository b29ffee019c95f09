"""Options made from the settings they set (ceb.cli._options): each field is one option, nothing restated."""

from __future__ import annotations

import importlib.util
import sys
from typing import Literal

import pytest
import typer
import typer.main
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from ceb.bench.commands import BENCHMARKS
from ceb.cli import app
from ceb.cli._options import settings_command


class Knobs(BaseModel):
    """Measure something."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    sizes: tuple[int, ...] = (10, 20)
    """Bank sizes (records)."""
    calls: int = Field(3, ge=1, le=9)
    """Calls per size."""
    model: str
    """The served model."""
    mode: Literal["fast", "slow"] = "fast"
    """How to run."""
    engine: dict[str, int] = {}
    """Engine flags."""
    sim: bool = True
    """Use the simulator."""


def _app(seen: list[Knobs]) -> typer.Typer:
    def run(settings: Knobs) -> int:
        seen.append(settings)
        return 0

    one = typer.Typer(add_completion=False, rich_markup_mode=None)
    one.command("knobs")(settings_command(run))
    return one


def test_each_field_is_one_option_with_its_type_default_range_and_help() -> None:
    seen: list[Knobs] = []
    command = typer.main.get_command(_app(seen))
    options = {p.name: p for p in command.params if p.name != "help"}
    assert set(options) == set(Knobs.model_fields)
    assert options["calls"].default == 3 and options["model"].required
    assert "--no-sim" in options["sim"].secondary_opts
    text = CliRunner().invoke(_app(seen), ["--help"], terminal_width=200).output
    assert "Calls per size." in text and "x<=9" in text and "Bank sizes (records) (comma-separated)." in text

    done = CliRunner().invoke(_app(seen), ["--model", "m", "--sizes", "1, 2,3", "--engine", '{"seed": 4}', "--no-sim"])
    assert done.exit_code == 0, done.output
    assert seen == [Knobs(model="m", sizes=(1, 2, 3), engine={"seed": 4}, sim=False)]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--model", "m", "--calls", "10"], "--calls"),  # the field's range
        (["--model", "m", "--sizes", "1,x"], "--sizes"),  # an item the field's type refuses
        (["--model", "m", "--mode", "warp"], "--mode"),
        (["--model", "m", "--engine", "{"], "--engine"),  # not JSON
        (["--calls", "2"], "--model"),  # required
    ],
)
def test_a_value_the_settings_refuse_is_a_usage_error_naming_its_option(args: list[str], named: str) -> None:
    seen: list[Knobs] = []
    done = CliRunner().invoke(_app(seen), args)
    assert done.exit_code == 2 and named in done.output, done.output
    assert seen == []


def test_a_benchmark_shows_its_help_without_its_extra_and_names_the_install_when_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n in ("psutil", "openai") else real(n, *a))
    monkeypatch.setitem(sys.modules, "psutil", None)  # importing it raises ImportError
    monkeypatch.setitem(sys.modules, "openai", None)
    assert BENCHMARKS.missing("client") == ["openai", "psutil"]
    helped = CliRunner().invoke(app, ["bench", "client", "-h"])
    assert helped.exit_code == 0 and "--requests" in helped.output, helped.output
    ran = CliRunner().invoke(app, ["bench", "client", "--requests", "1"])
    assert ran.exit_code == 2 and "needs openai, psutil" in ran.output and "install" in ran.output, ran.output
