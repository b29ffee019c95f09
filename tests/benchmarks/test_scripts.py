"""Every checkout script in ``benchmarks/`` runs at its smallest size as ``python benchmarks/NAME.py``, so none rots.

These are the proofs and one-off studies that moved out of ``ceb bench`` (issue 35 item 3): each runs in a child
process from another working directory, must exit 0 and print, and (unless it only prints) write its results file.
``tiny_vllm.py`` (starts vLLM) and ``early_score.py`` (a real server) need vLLM and only show their help here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from ceb.bench.processes import sim_process
from ceb.data import write_stream
from ceb.sim import SimConfig
from tests.support.builders import step, trajectory
from tests.support.paths import INTERCODE

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SIM_MODEL = SimConfig().model

SMALLEST: dict[str, tuple[str, list[list[str]]]] = {
    "bank": ("bank", [["--sizes", "100", "--queries", "2", "--updates", "1", "--reference-budget-s", "0.1"]]),
    "bank_quality": ("bank-quality", [["--sets", "bash", "--caps", "250", "--max-trajectories", "1", "--n-boot", "5"]]),
    "pipeline": ("pipeline", [["--trajectories", "1", "--orders", "1"]]),
    "step_pool": ("step-pool", [["--trajectories", "2", "--time-scale", "0.01"]]),
    "long_trajectory": ("long-trajectory", [["--sizes", "20", "--repeats", "1"]]),
    "gate_restart": ("gate-restart", [["--sizes", "10"]]),
    "speculation": ("speculation", [["--trajectories", "2", "--depths", "1", "--time-scale", "0"]]),
    "readout": (
        "",
        [
            ["table", "{run}"],
            ["results", "{run}", "--boot", "10"],
            ["hindsight", "{stream}", "--base-url", "{sim}", "--model", SIM_MODEL, "--limit", "2"],
        ],
    ),
}
"""Script -> its results file's prefix ("": prints only) and the argument lists of its smallest run."""

HELP_ONLY = {"tiny_vllm", "early_score", "repetition_flag", "cli_latency"}
"""Scripts that need vLLM, the whole data set or a second checkout (`cli_latency`), and only show their help here."""


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """What the smallest runs name: a simulator's API root, a stream and a scored run."""
    root = tmp_path_factory.mktemp("scripts")
    stream = root / "s.jsonl"
    write_stream(stream, [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "b", label=0)) for i in range(3)])
    run = root / "run"
    cli = "import sys; from ceb.cli import main; sys.argv[0] = 'ceb'; main()"
    scored = _run([sys.executable, "-c", cli, "score", str(stream), "--out", str(run)], root)
    assert scored.returncode == 0, scored.stderr[-2000:]
    with sim_process(SimConfig(time_scale=0.0)) as url:
        yield {"sim": url, "stream": str(stream), "run": str(run)}


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"CEB_SHARED": str(INTERCODE.parents[1]), "PYTHONPATH": str(BENCHMARKS.parent)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_every_script_has_a_smallest_run_or_shows_its_help() -> None:
    scripts = {p.stem for p in BENCHMARKS.glob("*.py")} - {"__init__", "_cli"}  # _cli: their parser
    assert scripts == set(SMALLEST) | HELP_ONLY


@pytest.mark.parametrize("name", sorted(HELP_ONLY))
def test_a_script_needing_vllm_shows_its_help(name: str, tmp_path: Path) -> None:
    done = _run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--help"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"usage: python benchmarks/{name}.py") or name == "repetition_flag", done.stdout


@pytest.mark.slow  # a child process per script, each a full small run: up to 2 minutes apiece on a loaded machine
@pytest.mark.skipif(not INTERCODE.is_dir(), reason=f"the shared InterCode data is missing at {INTERCODE}")
@pytest.mark.parametrize("name", sorted(SMALLEST))
def test_each_script_runs_at_its_smallest_size(name: str, place: dict[str, str], tmp_path: Path) -> None:
    kind, runs = SMALLEST[name]
    out = tmp_path / "results"
    for argv in runs:
        args = [a.format(**place) for a in argv]
        if kind:
            args += ["--intercode", str(INTERCODE), "--out", str(out)]
        done = _run([sys.executable, str(BENCHMARKS / f"{name}.py"), *args], tmp_path)
        assert done.returncode == 0, f"benchmarks/{name}.py {' '.join(args)}:\n{done.stderr[-3000:]}"
        assert done.stdout.strip(), f"benchmarks/{name}.py printed no figures"
    if kind:
        (saved,) = out.glob(f"{kind}-*.json")
        assert orjson.loads(saved.read_bytes())["benchmark"] == kind
