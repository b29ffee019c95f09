"""Every installed benchmark runs at its smallest size through ``ceb bench NAME``, so none rots unseen.

``ceb bench gate`` failed with every argument for a while (its pre-built bank journal was refused by the gate) and
nothing noticed: only ``--help`` was run. Here each benchmark the registry lists (:data:`ceb.bench.commands.BENCHMARKS`)
runs end to end in a child process, as a user runs it, at the smallest size it takes, and must exit 0 and write its
results file. A benchmark added without a case in :data:`SMALLEST` (or a reason in :data:`NEEDS_VLLM`) fails
:func:`test_every_installed_benchmark_has_a_smallest_run_or_a_reason_it_cannot_run_here`.

The benchmarks that need a real vLLM (its in-process engine, its server's ``/metrics`` counters, ``vllm bench
serve``) are in :data:`NEEDS_VLLM` and skip, saying why. The checkout's scripts (``benchmarks/``) are run by
``tests/benchmarks/test_scripts.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

import ceb
from ceb.bench.commands import BENCHMARKS
from ceb.sim import SimConfig
from tests.support.paths import INTERCODE

pytestmark = pytest.mark.skipif(
    not INTERCODE.is_dir(), reason=f"the shared InterCode data is missing at {INTERCODE}; set CEB_SHARED"
)

SIM_MODEL = SimConfig().model

SMALLEST: dict[str, list[list[str]]] = {
    "bank-policies": [
        [
            "--sizes",
            "100",
            "--scale-settings",
            "none",
            "--queries",
            "2",
            "--updates",
            "1",
            "--chunk",
            "100",
        ]
    ],  # fmt: skip
    "client": [["--requests", "10", "--trajectories", "1"]],
    "gate": [["--sizes", "100", "--calls", "5", "--streams", "2", "--seconds", "0.3"]],
    "scale": [
        [
            "--replicas",
            "1",
            "--warmup-s",
            "0.2",
            "--window-s",
            "0.5",
            "--max-trajectories",
            "1",
            "--sim-processes",
            "1",
            "--no-pin",
        ]
    ],  # fmt: skip
}
"""Benchmark -> the argument lists of its smallest run (each run in turn)."""

NEEDS_VLLM: dict[str, str] = {
    "engine": "vLLM's in-process engine (run it with .venv-vllm's ceb)",
    "prefix-cache": "a real vLLM server's /metrics prefix-cache counters (benchmarks/tiny_vllm.py starts one)",
    "routing": "real vLLM servers, one with --scheduling-policy priority (benchmarks/tiny_vllm.py starts them)",
    "vs-vllm": "`vllm bench serve` from .venv-vllm against a real vLLM server",
}
"""Benchmark -> what it needs that this test does not start: the only benchmarks allowed to skip here."""

_CLI = "import sys; from ceb.cli import main; sys.argv[0] = 'ceb'; main()"


def _ceb(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``ceb ARGS`` in a child process importing this ``ceb`` (not another checkout's install) from ``cwd``."""
    here = str(Path(ceb.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)
    env = os.environ | {"CEB_SHARED": str(INTERCODE.parents[1]), "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, "-c", _CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_every_installed_benchmark_has_a_smallest_run_or_a_reason_it_cannot_run_here() -> None:
    names = set(BENCHMARKS.names())
    assert not set(SMALLEST) & set(NEEDS_VLLM)
    assert set(SMALLEST) | set(NEEDS_VLLM) == names, (
        f"no smallest run for {sorted(names - set(SMALLEST) - set(NEEDS_VLLM))}; "
        f"listed but not installed: {sorted((set(SMALLEST) | set(NEEDS_VLLM)) - names)}"
    )
    assert len(NEEDS_VLLM) <= 5  # a short list: a new benchmark runs here unless it truly needs vLLM


@pytest.mark.slow  # a child process per benchmark, each a full small run: 1-2 minutes apiece on a loaded machine
@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_each_installed_benchmark_runs_at_its_smallest_size(name: str, tmp_path: Path) -> None:
    if name in NEEDS_VLLM:
        pytest.skip(f"ceb bench {name} needs {NEEDS_VLLM[name]}")
    out = tmp_path / "results"
    for argv in SMALLEST[name]:
        args = [*argv, "--intercode", str(INTERCODE), "--out", str(out)]
        done = _ceb(["bench", name, *args], tmp_path)
        assert done.returncode == 0, f"ceb bench {name} {' '.join(args)}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"ceb bench {name} printed no figures"
    (saved,) = out.glob(f"{name}-*.json")
    assert orjson.loads(saved.read_bytes())["benchmark"] == name
