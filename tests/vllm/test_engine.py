"""``ceb score --backend vllm``: the engine inside ceb's process, run from ``.venv-vllm`` on the tiny model.

One real command, as a user types it, in a subprocess with ``.venv-vllm``'s Python (where ``.ci/install-vllm``
installs ceb beside vLLM): two InterCode-Bash trajectories scored by ``ceb``, ``static`` and ``pro``. The model
has random weights, so formats hold only because the engine enforces them: every step gets a score in [0, 1]
from its first reply, the hindsight votes come back as ``n`` choices of one request, and PRO (which needs ``n``,
``logprobs``, ``prompt_logprobs`` and ``continue_final_message``) scores every step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from ceb.data import convert_intercode, read_stream
from ceb.pipeline import read_rows
from tests.support.paths import INTERCODE, REPO
from tests.support.tiny_model import tiny_model_dir
from tests.support.vllm_server import VLLM_PYTHON
from tests.vllm.conftest import REQUIRE_ENV

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

ENGINE_ENV = {
    "VLLM_TARGET_DEVICE": "cpu",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PYTHONPATH": str(REPO),  # this checkout's ceb, whichever one .ci/install-vllm installed
}
"""The environment the tests' vLLM server gets (tests/support/vllm_server.py), for the engine in ceb's process."""

CONFIG = """
methods = ["ceb", "static", "pro"]
[ceb]
votes = 3
[hindsight]
sampling = "n"
[baselines]
pro_samples = 3
[backend]
structured_output = "vllm"
max_concurrency = 16
[backend.engine]
load_format = "dummy"
dtype = "bfloat16"
max_model_len = 8192
max_logprobs = 20
enable_prefix_caching = true
seed = 0
[backend.engine.args]
structured_outputs_config = {backend = "xgrammar", disable_any_whitespace = true}
"""
"""The tests' server flags (xgrammar without free white space, 20 log-probs, bf16, seed 0) as engine settings."""


def _ceb_imports() -> bool:
    probe = [str(VLLM_PYTHON), "-c", "import ceb.cli, structlog, orjson, tenacity, sklearn"]
    env = os.environ | ENGINE_ENV
    return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


def test_score_with_the_engine_in_process(tmp_path: Path) -> None:
    if not VLLM_PYTHON.is_file() or not _ceb_imports():
        why = f"{VLLM_PYTHON} cannot import ceb's dependencies: run .ci/install-vllm"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    streams = tmp_path / "streams"
    convert_intercode(INTERCODE, streams, datasets=("bash",))
    stream = streams / "intercode-bash-gpt-4.jsonl"
    n_steps = sum(len(t.steps) for t in read_stream([stream])[:2])
    (tmp_path / "ceb.toml").write_text(CONFIG, encoding="utf-8")
    run = tmp_path / "run"
    cmd = [str(VLLM_PYTHON), str(REPO / "run.py"), "score", str(stream), "--config", str(tmp_path / "ceb.toml")]
    cmd += ["--backend", "vllm", "--model", str(tiny_model_dir()), "--limit", "2", "--out", str(run)]
    done = subprocess.run(cmd, env=os.environ | ENGINE_ENV, capture_output=True, text=True, check=False, cwd=tmp_path)
    sys.stdout.write(done.stdout[-3000:])
    assert done.returncode == 0, done.stderr[-4000:]

    rows = list(read_rows(run / "scores.jsonl"))
    assert Counter(r["method"] for r in rows) == dict.fromkeys(("ceb", "static", "pro"), n_steps)
    bad = [(r["method"], r["error"]) for r in rows if r["score"] is None or not 0.0 <= r["score"] <= 1.0]
    assert bad == []
    assert all(r["requests"] == (2 if r["method"] == "pro" else 1) for r in rows)  # no re-ask, no retry
    rounds = [h for h in read_rows(run / "hindsight.jsonl") if h["method"] == "ceb"]
    assert len(rounds) == 2  # one per trajectory
    assert all(len(h["votes"]) == 3 and h["requests"] == 1 and h["failed_votes"] == 0 for h in rounds)  # n=3
