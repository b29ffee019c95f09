"""``ceb bench NAME`` runs from an installed package: every benchmark is registered, parses, and needs no checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import ceb
from ceb.bench.commands import BENCHMARKS, SUMMARIES, run
from ceb.errors import ConfigError
from tests.support.paths import INTERCODE

# The package alone, as pip would install it: no pyproject.toml, tests/ or benchmarks/ beside it.
_PRINT_ONLY = {"readout"}
"""Benchmarks that print their figures and save no results file (so take no ``--out``)."""

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


def test_every_benchmark_is_listed_and_parses_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert BENCHMARKS.names() == list(SUMMARIES)  # declaration order, as `ceb bench --help` lists them
    for name in BENCHMARKS.names():
        assert run(name, ["--help"]) == 0, name
        out = capsys.readouterr().out
        assert out.startswith(f"usage: ceb bench {name}"), out[:200]
        if name not in _PRINT_ONLY:
            assert "--out" in out


def test_bad_arguments_exit_2_and_an_unknown_benchmark_names_the_known_ones() -> None:
    assert run("bank", ["--sizes", "many"]) == 2
    with pytest.raises(ConfigError, match="did you mean 'gate'"):
        run("gates")


def test_help_and_a_tiny_bank_run_from_an_installed_package_outside_the_checkout(
    installed: dict[str, str], tmp_path: Path
) -> None:
    listed = _ceb(["bench", "--help"], tmp_path, installed)
    assert listed.returncode == 0, listed.stderr
    assert all(name in listed.stdout for name in SUMMARIES)
    helped = _ceb(["bench", "gate", "--help"], tmp_path, installed)
    assert helped.returncode == 0, helped.stderr
    assert "usage: ceb bench gate" in helped.stdout and "--sizes" in helped.stdout
    if not INTERCODE.is_dir():
        pytest.skip(f"the shared InterCode data is missing at {INTERCODE}; set CEB_SHARED")

    done = _ceb(
        ["bench", "bank", "--sizes", "200", "--queries", "5", "--updates", "2", "--reference-budget-s", "0.2",
         "--intercode", str(INTERCODE)],
        tmp_path,
        installed,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = (tmp_path / "benchmarks" / "results").glob("bank-*.json")  # the default --out, under the cwd
    doc = orjson.loads(path.read_bytes())
    assert doc["benchmark"] == "bank" and doc["results"][0]["size"] == 200


def test_tiny_needs_the_checkout_and_says_so(installed: dict[str, str], tmp_path: Path) -> None:
    done = _ceb(["bench", "early-score", "--tiny", "--intercode", str(tmp_path)], tmp_path, installed)

    assert done.returncode != 0
    assert "--tiny starts the tests' vLLM server from the checkout" in done.stderr


def test_the_router_benchmark_needs_the_checkout_and_says_so(installed: dict[str, str], tmp_path: Path) -> None:
    args = ["bench", "router", "--replica", "http://127.0.0.1:1", "--replica", "http://127.0.0.1:2", "--model", "m"]
    done = _ceb(args, tmp_path, installed)

    assert done.returncode != 0
    assert "ceb bench router starts vllm-router from the checkout's tests/support" in done.stderr
