"""What ``ceb score`` and ``ceb metrics`` print: a compact table a reader takes in, and machine-readable figures."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import write_stream
from tests.support.builders import step, trajectory

runner = CliRunner()


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A scored run of two streams with the default methods (ceb, static), and what `ceb score` printed."""
    tmp = tmp_path_factory.mktemp("run")
    streams = []
    for name in ("alpha", "beta"):
        trajs = [trajectory(f"{name}{i}", step("ls", "a", label=1), step("rm x", "b", label=i % 2)) for i in range(4)]
        streams.append(str(write_stream(tmp / f"{name}.jsonl", trajs)))
    result = runner.invoke(app, ["score", *streams, "--out", str(tmp / "run")], terminal_width=200)
    assert result.exit_code == 0, result.output
    return tmp / "run", result.stdout


def _rows(output: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│").split("│")] for line in output.splitlines() if line.startswith("│")]


def test_score_prints_a_row_per_stream_and_method_pooled_last_and_the_references_in_one_line(
    run: tuple[Path, str],
) -> None:
    """The README's run printed 40 rows of 10 columns, the reference rules inline: now 16 rows of 7."""
    _, output = run
    header = next(line for line in output.splitlines() if line.startswith("┃"))
    assert [c.strip() for c in header.strip("┃").split("┃")] == [
        "stream", "method", "steps", "pos. rate", "ECE", "Brier", "AUROC",
    ]  # fmt: skip
    keys = [(r[0], r[1]) for r in _rows(output)]
    assert keys == [
        ("alpha", "ceb"), ("alpha", "static"), ("beta", "ceb"), ("beta", "static"),
        ("(pooled)", "ceb"), ("(pooled)", "static"),
    ]  # fmt: skip
    assert "Reference rules, AUROC pooled: base-rate 0.500, step-position" in " ".join(output.split())


def test_metrics_reference_shows_the_reference_rows_per_stream(run: tuple[Path, str]) -> None:
    result = runner.invoke(app, ["metrics", str(run[0]), "--reference"], terminal_width=200)
    assert result.exit_code == 0, result.output
    keys = [(r[0], r[1]) for r in _rows(result.stdout)]
    assert keys[:3] == [("alpha", "ceb"), ("alpha", "static"), ("alpha", "base-rate (reference)")]
    assert keys[-1][0] == "(pooled)" and keys[-1][1].endswith("(reference)")


def test_metrics_json_and_csv_print_every_figure_for_a_program(run: tuple[Path, str]) -> None:
    path, _ = run
    printed = runner.invoke(app, ["metrics", str(path), "--json"])
    assert printed.exit_code == 0, printed.output
    doc = orjson.loads(printed.stdout)
    assert doc == orjson.loads((path / "metrics.json").read_bytes())
    pooled = next(r for r in doc["results"] if r["stream"] == "(pooled)" and r["method"] == "ceb")
    assert pooled["n"] == 16 and {"ece", "ece_equal_mass", "brier", "auroc", "mean_score"} <= set(pooled)

    table = runner.invoke(app, ["metrics", str(path), "--csv"])
    assert table.exit_code == 0, table.output
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    assert len(rows) == len(doc["results"])
    first = next(r for r in rows if r["stream"] == "(pooled)" and r["method"] == "ceb")
    assert float(first["ece"]) == pytest.approx(pooled["ece"]) and int(first["n"]) == 16

    both = runner.invoke(app, ["metrics", str(path), "--json", "--csv"])
    assert both.exit_code == EXIT_ERROR and "--json or --csv" in both.output
