"""Every installed benchmark runs at its smallest size through ``ceb bench NAME``, so none rots unseen.

``ceb bench gate`` failed with every argument for a while (its pre-built bank journal was refused by the gate) and
nothing noticed: only ``--help`` was run. Here each benchmark the registry lists (:data:`ceb.bench.commands.BENCHMARKS`)
runs end to end in a child process, as a user runs it, at the smallest size it takes, and must exit 0 and write its
results file. A benchmark added without a case in :data:`SMALLEST` (or a reason in :data:`NEEDS_VLLM`) fails
:func:`test_every_installed_benchmark_has_a_smallest_run_or_a_reason_it_cannot_run_here`.

The benchmarks that need a real vLLM (its in-process engine, its server's ``/metrics`` counters, ``vllm bench
serve``, ``vllm-router``) are in :data:`NEEDS_VLLM` and skip, saying why; ``early-score`` and ``readout hindsight``
take any OpenAI-compatible server and run against the simulator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import ceb
from ceb.bench.commands import BENCHMARKS
from ceb.bench.processes import sim_process
from ceb.data import write_stream
from ceb.sim import SimConfig
from tests.support.builders import step, trajectory
from tests.support.paths import INTERCODE

pytestmark = pytest.mark.skipif(
    not INTERCODE.is_dir(), reason=f"the shared InterCode data is missing at {INTERCODE}; set CEB_SHARED"
)

SIM_MODEL = SimConfig().model

SMALLEST: dict[str, list[list[str]]] = {
    "bank": [["--sizes", "100", "--queries", "2", "--updates", "1", "--reference-budget-s", "0.1"]],
    "readout": [
        ["table", "{run}"],
        ["results", "{run}", "--boot", "10"],
        ["hindsight", "{stream}", "--base-url", "{sim}", "--model", SIM_MODEL, "--limit", "2"],
    ],
    "bank-policies": [
        [
            "--parts",
            "scale",
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
    "pipeline": [["--trajectories", "1", "--orders", "1"]],
    "client": [["--requests", "10", "--trajectories", "1"]],
    "faults": [["--streams", "1", "--trajectories", "1"]],
    "reuse": [["--trajectories", "1", "--grid", "{grid}"]],
    "gate": [["--sizes", "100", "--calls", "5", "--streams", "2", "--seconds", "0.3"]],
    "long-trajectory": [["--sizes", "20", "--repeats", "1"]],
    "gate-restart": [["--sizes", "10"]],
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
    "early-score": [
        ["--base-url", "{sim}", "--model", SIM_MODEL, "--streams", "1", "--trajectories", "1", "--concurrency", "4"]
    ],
}
"""Benchmark -> the argument lists of its smallest run (each run in turn; ``{placeholders}`` from :func:`place`)."""

NEEDS_VLLM: dict[str, str] = {
    "engine": "vLLM's in-process engine (run it with .venv-vllm's ceb)",
    "prefix-cache": "a real vLLM server's /metrics prefix-cache counters (--tiny starts one from .venv-vllm)",
    "routing": "real vLLM servers, one with --scheduling-policy priority (--tiny starts them from .venv-vllm)",
    "router": "vllm-router in front of real vLLM replicas (--real starts them from .venv-vllm)",
    "vs-vllm": "`vllm bench serve` from .venv-vllm against a real vLLM server",
}
"""Benchmark -> what it needs that this test does not start: the only benchmarks allowed to skip here."""

PRINT_ONLY = {"readout"}
"""Benchmarks that print their figures and write no results file."""

_CLI = "import sys; from ceb.cli import main; sys.argv[0] = 'ceb'; main()"


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """What the smallest runs name: a simulator's API root, a stream, a scored run and a one-stream grid."""
    root = tmp_path_factory.mktemp("installed")
    stream = root / "s.jsonl"
    write_stream(stream, [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "b", label=0)) for i in range(3)])
    run = root / "run"
    scored = _ceb(["score", str(stream), "--out", str(run)], root)
    assert scored.returncode == 0, scored.stderr[-2000:]
    grid = root / "grid.toml"  # read from a copy beside the benchmark's streams (../streams)
    grid.write_text("methods = ['ceb', 'ppl']\norders = 2\n[grid]\n"
                    "streams = ['../streams/intercode-bash-gpt-4.jsonl']\nout = '../runs/tiny'\n")  # fmt: skip
    with sim_process(SimConfig(time_scale=0.0)) as url:
        yield {"sim": url, "stream": str(stream), "run": str(run), "grid": str(grid)}


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


@pytest.mark.parametrize("name", BENCHMARKS.names())
def test_each_installed_benchmark_runs_at_its_smallest_size(name: str, place: dict[str, str], tmp_path: Path) -> None:
    if name in NEEDS_VLLM:
        pytest.skip(f"ceb bench {name} needs {NEEDS_VLLM[name]}")
    out = tmp_path / "results"
    for argv in SMALLEST[name]:
        args = [a.format(**place) for a in argv]
        if name not in PRINT_ONLY:
            args += ["--intercode", str(INTERCODE), "--out", str(out)]
        done = _ceb(["bench", name, *args], tmp_path)
        assert done.returncode == 0, f"ceb bench {name} {' '.join(args)}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"ceb bench {name} printed no figures"
    if name not in PRINT_ONLY:
        (saved,) = out.glob(f"{name}-*.json")
        assert orjson.loads(saved.read_bytes())["benchmark"] == name
