"""The converter registry behind ``ceb convert``: a converter added in one file becomes a command."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data import read_stream
from ceb.data.converters import CONVERTERS, OUT_DIR, REQUIRED, Converter, ConverterOption, SummaryColumn
from ceb.data.trajectory import Step, Trajectory
from ceb.data.writer import ConvertedStream, write_converted
from ceb.errors import ConfigError
from ceb.registry import Registry

runner = CliRunner()


# --- a toy converter, defined here and nowhere else ---------------------------------------------------


def convert_toy(out_dir: Path, words: str, mode: str = "upper") -> list[ConvertedStream]:
    """One stream, ``toy-echo.jsonl``: a trajectory per word whose one step echoes it, labelled 1."""
    if words == "fail":
        raise ConfigError("the toy refuses the word 'fail'")
    trajectories = [
        Trajectory(
            id=f"toy/{i}",
            task="echo the word",
            domain="shell",
            steps=(Step(state="", action=word.upper() if mode == "upper" else word, observation=word, label=1),),
            actor="echo",
        )
        for i, word in enumerate(words.split(","))
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_converted(out_dir / "toy-echo.jsonl", trajectories, dataset="toy", actor="echo", sources=())]


TOY = Converter(
    help="Echo comma-separated words as one stream.\n\nEach word is one trajectory of one positive step.",
    convert=convert_toy,
    options=(
        ConverterOption("words", str, "Comma-separated words."),
        OUT_DIR,
        ConverterOption("mode", str, "upper or plain.", default="upper", choices=("upper", "plain")),
    ),
    columns=(SummaryColumn("dataset", lambda c: c.dataset),),
)


@pytest.fixture
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Registry[Converter]:
    """The converter registry holding only the toy, by a lazy entry as the real ones are registered."""
    registry: Registry[Converter] = Registry("converter")
    registry.register("toy", "tests.data.test_converters:TOY")
    monkeypatch.setattr("ceb.data.converters.CONVERTERS", registry)
    return registry


def test_a_registered_converter_is_a_convert_command(toy_registered: Registry[Converter], tmp_path: Path) -> None:
    listing = runner.invoke(app, ["convert", "--help"])
    assert listing.exit_code == 0, listing.output
    assert "toy" in listing.output and "Echo comma-separated words as one stream." in listing.output

    result = runner.invoke(app, ["convert", "toy", "--words", "ls,pwd", "--out", str(tmp_path)])

    assert result.exit_code == 0, result.output
    trajectories = read_stream([tmp_path / "toy-echo.jsonl"])
    assert [t.steps[0].action for t in trajectories] == ["LS", "PWD"]
    # the printed table: the standard columns, then the converter's own
    assert "toy-echo.jsonl" in result.output and "positive rate" in result.output
    assert "dataset" in result.output and "1.000" in result.output


def test_the_toy_command_has_its_options_defaults_and_help(toy_registered: Registry[Converter], tmp_path: Path) -> None:
    shown = runner.invoke(app, ["convert", "toy", "--help"])
    assert shown.exit_code == 0, shown.output
    for text in ("--words", "--out", "--mode", "Each word is one trajectory of one positive step.", "[required]"):
        assert text in shown.output

    missing = runner.invoke(app, ["convert", "toy", "--out", str(tmp_path)])
    assert missing.exit_code == 2 and "--words" in missing.output

    plain = runner.invoke(app, ["convert", "toy", "--words", "ls", "--mode", "plain", "--out", str(tmp_path)])
    assert plain.exit_code == 0, plain.output
    assert read_stream([tmp_path / "toy-echo.jsonl"])[0].steps[0].action == "ls"


def test_a_value_outside_the_choices_is_refused_before_the_converter_runs(
    toy_registered: Registry[Converter], tmp_path: Path
) -> None:
    result = runner.invoke(app, ["convert", "toy", "--words", "ls", "--mode", "shout", "--out", str(tmp_path)])

    assert result.exit_code == 2
    assert "--mode must be upper or plain" in result.output
    assert not (tmp_path / "toy-echo.jsonl").exists()


def test_a_converter_error_is_printed_with_exit_code_2(toy_registered: Registry[Converter], tmp_path: Path) -> None:
    result = runner.invoke(app, ["convert", "toy", "--words", "fail", "--out", str(tmp_path)])

    assert result.exit_code == 2
    assert "error:" in result.output and "the toy refuses the word 'fail'" in result.output


def test_an_unknown_converter_is_named(toy_registered: Registry[Converter]) -> None:
    result = runner.invoke(app, ["convert", "tyo"])

    assert result.exit_code == 2
    assert "No such command 'tyo'" in result.output and "'toy'" in result.output


# --- the real converters ------------------------------------------------------------------------------


def test_the_five_converters_are_registered() -> None:
    assert CONVERTERS.names() == ["intercode", "mind2web", "amex", "chat", "inspect"]  # declaration order


@pytest.mark.parametrize("name", ["amex", "intercode", "mind2web", "chat", "inspect"])
def test_each_converter_takes_exactly_the_options_it_declares(name: str) -> None:
    converter = CONVERTERS.get(name)
    parameters = inspect.signature(converter.convert).parameters
    declared = [option.name for option in converter.options]

    assert OUT_DIR in converter.options
    assert len(set(declared)) == len(declared)
    assert set(declared) <= set(parameters)
    # every parameter the function needs has an option, and required options are the function's required ones
    needed = {p for p, info in parameters.items() if info.default is inspect.Parameter.empty}
    assert needed <= set(declared)
    assert {o.name for o in converter.options if o.default is REQUIRED} <= needed
    assert converter.help.split("\n", 1)[0].startswith("Write one")
