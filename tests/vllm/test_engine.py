"""The engine inside ceb's process (backend ``vllm``), run from ``.venv-vllm`` on the tests' real model.

One subprocess with ``.venv-vllm``'s Python (where ``.ci/install-vllm`` installs ceb beside vLLM) builds the
stages from a run configuration as ``ceb score`` does, and starts the engine once (:mod:`tests.vllm.engine_replies`):

* greedy requests (a schema, log-probs, prompt log-probs, a continued message) must come back as the HTTP
  server's (``vllm_server``, the same weights: SmolLM2-135M-Instruct) do: the same model name, prompt tokens,
  reply length, first token and prompt tokens' identities, with log-probs within ``LOGPROB_TOL``. Not bit for
  bit: on real weights two engines' bf16 numerics differ by about 0.02 nats (measured in CI on this model, server
  and engine both eager), enough to flip a near-tie later in a greedy reply; with random weights they matched
  exactly;
* one InterCode-Bash trajectory scored by ``ceb``, ``static`` and ``pro``. Every step gets a score in [0, 1],
  the hindsight votes come back as ``n`` choices of one request, and PRO (which needs ``n``, ``logprobs``,
  ``prompt_logprobs`` and ``continue_final_message``) scores every step.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import pytest

from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig
from ceb.data import convert_intercode, read_stream
from ceb.pipeline import read_rows
from tests.support.paths import INTERCODE, REPO
from tests.support.real_model import real_model_dir
from tests.support.vllm_server import DTYPE, VLLM_PYTHON, VLLMServer, cpu_env
from tests.vllm.conftest import REQUIRE_ENV
from tests.vllm.engine_replies import REQUESTS, as_json

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

ENGINE_ENV = cpu_env() | {"PYTHONPATH": str(REPO)}  # this checkout's ceb, whichever one .ci/install-vllm installed
"""The environment the tests' vLLM server gets (tests/support/vllm_server.py), for the engine in ceb's process."""

CONFIG = """
methods = ["ceb", "static", "pro"]
max_trajectories = 1
[ceb]
votes = 3
[hindsight]
sampling = "n"
[baselines]
pro_samples = 3
[backend]
name = "vllm"
model = "{model}"
structured_output = "vllm"
max_concurrency = 16
[backend.engine]
served_model_name = "{served}"
load_format = "auto"
dtype = "{dtype}"
max_model_len = 8192
max_logprobs = 20
enable_prefix_caching = true
seed = 0
[backend.engine.args]
structured_outputs_config = {{backend = "xgrammar", disable_any_whitespace = true}}
enforce_eager = true
"""
"""The run: the tests' server flags (xgrammar without free white space, 20 log-probs, the dtype
:data:`~tests.support.vllm_server.DTYPE`, seed 0, eager) as engine settings, and the server's model name, so that
replies name the same model."""

LOGPROB_TOL = 0.1
"""Largest difference in a log-prob (nats) between the engine's and the server's replies to the same request."""


def _same_replies(got: list[dict[str, Any]], expected: list[dict[str, Any]]) -> None:
    """The engine's completions against the server's: equal where the chat handling decides, close where the
    numerics do (module docstring)."""
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g["model"], g["prompt_tokens"], g["completion_tokens"]) == (
            e["model"],
            e["prompt_tokens"],
            e["completion_tokens"],
        )
        assert [text[:1] for text in g["texts"]] == [text[:1] for text in e["texts"]]
        for gl, el in zip(g["logprobs"] or [], e["logprobs"] or [], strict=True):
            assert bool(gl) == bool(el)
            if not gl or not el:
                continue
            assert gl[0]["token"] == el[0]["token"]
            assert abs(gl[0]["logprob"] - el[0]["logprob"]) <= LOGPROB_TOL
        gp, ep = g["prompt_logprobs"] or [], e["prompt_logprobs"] or []
        assert len(gp) == len(ep)
        for a, b in zip(gp, ep, strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert a["token"] == b["token"] and abs(a["logprob"] - b["logprob"]) <= LOGPROB_TOL


def _ceb_imports() -> bool:
    probe = [str(VLLM_PYTHON), "-c", "import ceb.cli, structlog, orjson, tenacity, sklearn"]
    env = os.environ | ENGINE_ENV
    return subprocess.run(probe, env=env, capture_output=True, check=False).returncode == 0


def _need_ceb_in_vllm_venv() -> None:
    if not VLLM_PYTHON.is_file() or not _ceb_imports():
        why = f"{VLLM_PYTHON} cannot import ceb's dependencies: run .ci/install-vllm"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)


def test_engine_in_process(vllm_server: VLLMServer, tmp_path: Path) -> None:
    _need_ceb_in_vllm_venv()
    settings = BackendConfig(
        base_url=vllm_server.base_url, model=vllm_server.model, structured_output="vllm", timeout_s=300
    )

    async def over_http() -> str:
        async with OpenAIBackend(settings) as http:
            return as_json([(await http.complete(r)).completion for r in REQUESTS])

    expected = anyio.run(over_http)
    streams = tmp_path / "streams"
    convert_intercode(INTERCODE, streams, datasets=("bash",))
    stream = streams / "intercode-bash-gpt-4.jsonl"
    n_steps = sum(len(t.steps) for t in read_stream([stream])[:1])
    config = CONFIG.format(model=real_model_dir(), served=vllm_server.model, dtype=DTYPE)
    (tmp_path / "ceb.toml").write_text(config, encoding="utf-8")
    run = tmp_path / "run"
    cmd = [str(VLLM_PYTHON), "-m", "tests.vllm.engine_replies", str(tmp_path / "ceb.toml"), str(stream), str(run)]
    done = subprocess.run(cmd, env=os.environ | ENGINE_ENV, capture_output=True, text=True, check=False, cwd=REPO)
    assert done.returncode == 0, done.stderr[-4000:]
    got = next(line for line in done.stdout.splitlines() if line.startswith("REPLIES ")).removeprefix("REPLIES ")
    _same_replies(json.loads(got), json.loads(expected))

    rows = list(read_rows(run / "scores.jsonl"))
    assert Counter(r["method"] for r in rows) == dict.fromkeys(("ceb", "static", "pro"), n_steps)
    bad = [(r["method"], r["error"]) for r in rows if r["score"] is None or not 0.0 <= r["score"] <= 1.0]
    assert bad == []
    assert all(r["requests"] == (2 if r["method"] == "pro" else 1) for r in rows)  # no re-ask, no retry
    rounds = [h for h in read_rows(run / "hindsight.jsonl") if h["method"] == "ceb"]
    assert len(rounds) == 1  # one per trajectory
    assert all(len(h["votes"]) == 3 and h["requests"] == 1 and h["failed_votes"] == 0 for h in rounds)  # n=3
