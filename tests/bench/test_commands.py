"""``ceb bench NAME`` runs from an installed package: every benchmark is registered, parses, and needs no checkout."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

import ceb
from ceb.bench.commands import BENCHMARKS, SUMMARIES
from ceb.cli import app
from tests.support.paths import INTERCODE

# The package alone, as pip would install it: no pyproject.toml, tests/ or benchmarks/ beside it.

_CLI = "import sys; from ceb.cli import main; sys.argv[0] = 'ceb'; main()"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("site")
    shutil.copytree(Path(ceb.__file__).parent, site / "ceb", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CEB_SHARED")}
    return env | {"PYTHONPATH": str(site)}


def _ceb(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_every_benchmark_is_listed_and_parses_its_own_help() -> None:
    assert BENCHMARKS.names() == list(SUMMARIES)  # declaration order, as `ceb bench --help` lists them
    for name in BENCHMARKS.names():
        for flag in ("--help", "-h"):
            done = CliRunner().invoke(app, ["bench", name, flag], prog_name="ceb")
            assert done.exit_code == 0, (name, done.output)
            assert done.output.startswith(f"Usage: ceb bench {name}"), done.output[:200]
            assert "--out" in done.output


def test_bad_arguments_exit_2_and_an_unknown_benchmark_names_the_known_ones() -> None:
    bad = CliRunner().invoke(app, ["bench", "gate", "--sizes", "many"])
    assert bad.exit_code == 2 and "--sizes" in bad.output
    unknown = CliRunner().invoke(app, ["bench", "gates"])
    assert unknown.exit_code == 2 and "did you mean 'gate'" in unknown.output


def test_help_from_an_installed_package_outside_the_checkout(installed: dict[str, str], tmp_path: Path) -> None:
    listed = _ceb(["bench", "--help"], tmp_path, installed)
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in SUMMARIES)
    helped = _ceb(["bench", "gate", "--help"], tmp_path, installed)
    assert helped.returncode == 0, helped.stderr
    assert "Usage: ceb bench gate" in helped.stdout and "--sizes" in helped.stdout


@pytest.mark.slow  # a gate run on the real data in a child process: minutes on a loaded machine
def test_a_small_gate_run_from_an_installed_package_outside_the_checkout(
    installed: dict[str, str], tmp_path: Path
) -> None:
    if not INTERCODE.is_dir():
        pytest.skip(f"the shared InterCode data is missing at {INTERCODE}; set CEB_SHARED")

    done = _ceb(
        ["bench", "gate", "--sizes", "100", "--calls", "5", "--streams", "2", "--seconds", "0.3",
         "--intercode", str(INTERCODE)],
        tmp_path,
        installed,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = (tmp_path / "benchmarks" / "results").glob("gate-*.json")  # the default --out, under the cwd
    assert orjson.loads(path.read_bytes())["benchmark"] == "gate"


def test_no_installed_benchmark_imports_the_checkouts_tests_or_benchmarks() -> None:
    # An installed ceb has neither: the tests' vLLM server is started by benchmarks/tiny_vllm.py, in the checkout.
    for path in Path(ceb.__file__).parent.joinpath("bench").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not {m for m in imported if m.split(".")[0] in ("tests", "benchmarks")}, path.name
