"""The command line answers at once: ``--help`` and an error on a missing input load none of the heavy libraries.

What a command imports is checked, not how long it takes (the timings are ``benchmarks/cli_latency.py``'s): each
command runs in a fresh interpreter, which then reports its exit code and the top-level packages in ``sys.modules``.
The packages that re-export their public API lazily (PEP 562) still give every name of their ``__all__``, and
importing one light submodule does not load what its package's other modules need.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import ceb

CHECKOUT = Path(ceb.__file__).parents[1]

PROBE = """
import json, sys
from ceb.cli import main
sys.argv = ["ceb", *sys.argv[1:]]
code = 0
try:
    main()
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "loaded": sorted({m.split(".")[0] for m in sys.modules})}), file=sys.stderr)
"""
"""Runs ``ceb ARGS`` as the console script does, then prints its exit code and loaded packages as stderr's last line."""

HEAVY = {"numpy", "scipy", "sklearn", "pandas", "pyarrow", "matplotlib", "aiohttp", "jinja2"}
"""What a command must not import before it needs it: each costs ``ceb`` from 0.03 to 0.7 s to start."""


def _ceb(*args: str, cwd: Path) -> tuple[int, str, set[str]]:
    """Run ``ceb ARGS`` in a fresh interpreter on this checkout: exit code, stderr (less the probe's line), packages."""
    env = os.environ | {"PYTHONPATH": str(CHECKOUT), "COLUMNS": "100"}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )
    *lines, last = proc.stderr.rstrip("\n").splitlines()
    probe = json.loads(last)
    return probe["code"], "\n".join(lines), set(probe["loaded"])


@pytest.mark.parametrize("args", [("--help",), ("score", "--help"), ("sim-server", "--help")])
def test_help_loads_no_heavy_library(args: tuple[str, ...], tmp_path: Path) -> None:
    code, errors, loaded = _ceb(*args, cwd=tmp_path)
    assert (code, errors) == (0, "")
    assert loaded & HEAVY == set()
    if args == ("--help",):  # nor the logging set-up a command runs first
        assert "structlog" not in loaded


NO_STREAM = "error: 1 problem in the stream, nothing was scored:\n  nope.jsonl:0: field <file>: cannot read the file"
NO_RUN = "error: nope has no scores.jsonl; is it a run directory written by `ceb score`?"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("score", "nope.jsonl", "--out", "run"), NO_STREAM),
        (("prompts", "nope.jsonl"), NO_STREAM),
        (("relabel", "nope.jsonl", "--out", "labelled.jsonl", "--backend", "openai"), NO_STREAM),
        (("batch", "export", "nope.jsonl", "--out", "batch"), NO_STREAM),
        (("report", "nope"), NO_RUN),
        (("metrics", "nope"), NO_RUN),
    ],
    ids=["score", "prompts", "relabel", "batch-export", "report", "metrics"],
)
def test_a_missing_input_is_refused_before_the_heavy_libraries_load(
    args: tuple[str, ...], said: str, tmp_path: Path
) -> None:
    code, errors, loaded = _ceb(*args, cwd=tmp_path)
    assert code == 2
    assert errors.startswith(said), errors
    assert loaded & HEAVY == set()
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize(
    "package",
    ["ceb", "ceb.bank", "ceb.data", "ceb.eval", "ceb.gate", "ceb.pipeline", "ceb.serve", "ceb.sim", "ceb.stages"],
)
def test_a_lazy_package_gives_every_name_it_exports(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        exec(f"from {package} import {name}", {})  # raises ImportError for a name it cannot give


@pytest.mark.parametrize(
    ("module", "heavy"),
    [
        ("ceb.sim.settings", {"aiohttp"}),  # sim-server's options
        ("ceb.bank.record", {"sklearn", "scipy"}),
        ("ceb.stages.templates", {"sklearn", "aiohttp"}),
        ("ceb.pipeline.rundir", {"sklearn", "jinja2"}),  # what ceb report and ceb metrics check a run with
    ],
)
def test_a_light_submodule_does_not_load_its_package_s_heavy_ones(module: str, heavy: set[str], tmp_path: Path) -> None:
    probe = f"import json, sys, {module}; print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    env = os.environ | {"PYTHONPATH": str(CHECKOUT)}
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env, check=True
    )
    assert set(json.loads(out.stdout)) & heavy == set()
