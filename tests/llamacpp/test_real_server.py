"""``ceb doctor`` and a small ``ceb score`` against llama-cpp-python's real server, on real InterCode-Bash steps.

Opt in: ``CEB_LLAMA_PYTHON=/work/llama-venv/bin/python`` (see ``tests/llamacpp/conftest.py``). The server serves the
real SmolLM2-135M-Instruct (its GGUF file), and ceb is pointed at it with nothing but its URL and model name, as a
user would: the doctor must name what the server lacks and what ceb sends differently there, and the run must score
every step with no failed one. The figures (steps, failures, re-asks, hindsight votes valid) are printed; ``-s``
or ``-rP`` shows them.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data import convert_intercode
from ceb.pipeline import read_rows
from tests.support.llama_server import LlamaServer
from tests.support.paths import INTERCODE

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(5400)]

STREAM = "intercode-bash-gpt-4"
TRAJECTORIES = 3
"""The first trajectories of the stream that are scored: few, as one CPU server answers one request at a time."""


def test_doctor_names_what_llama_cpp_lacks_and_what_ceb_changes(llama_server: LlamaServer) -> None:
    args = ["doctor", "--base-url", llama_server.base_url, "--model", llama_server.model, "--timeout", "300"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = orjson.loads(result.stdout)
    print("\n" + "\n".join(f"{c['name']:24} {c['outcome']:8} {c['detail']}" for c in doc["checks"]))
    outcome = {c["name"]: c["outcome"] for c in doc["checks"]}
    assert doc["usable"] and outcome["chat"] == "ok" and outcome["structured_output"] == "ok"
    assert {"prompt_logprobs", "continue_final_message", "prefix_cache"} <= set(doc["lacking"])
    assert {"request_id", "max_tokens", "structured_output", "n"} <= set(doc["adaptations"])
    assert outcome["token_budget"] == "ok" and outcome["n"] == "ok"
    assert doc["methods"]["ceb"]["runs"] and not doc["methods"]["pro"]["runs"]


def test_a_small_ceb_run_scores_every_step_with_no_failure(llama_server: LlamaServer, tmp_path: Path) -> None:
    convert_intercode(INTERCODE, tmp_path / "streams", datasets=("bash",))
    out = tmp_path / "run"
    # One CPU server answering one request at a time: a ~900-token critic prompt took 15 s to 98 s on two loaded
    # cores, close to the default 120 s per attempt.
    (tmp_path / "slow.toml").write_text("[backend]\ntimeout_s = 900\n", encoding="utf-8")
    args = [
        "score",
        "--config",
        str(tmp_path / "slow.toml"),
        str(tmp_path / "streams" / f"{STREAM}.jsonl"),
        "--out",
        str(out),
        "--backend",
        "openai",
        "--base-url",
        llama_server.base_url,
        "--model",
        llama_server.model,
        "--methods",
        "ceb",
        "--limit",
        str(TRAJECTORIES),
        "--max-concurrency",
        "1",  # the server answers one request at a time: the rest wait in ceb's queue, not in its timeout
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = list(read_rows(out / "scores.jsonl"))
    votes = list(read_rows(out / "hindsight.jsonl"))
    failed = [r for r in rows if r["score"] is None]
    valid = sum(len(v["votes"]) for v in votes)
    asked = valid + sum(v["failed_votes"] for v in votes)
    reasks = sum(r["requests"] - 1 for r in rows)
    print(
        f"\nsteps scored {len(rows) - len(failed)} of {len(rows)}, failed {len(failed)}, critic re-asks {reasks}; "
        f"hindsight votes valid {valid} of {asked} over {len(votes)} trajectories; "
        f"vote errors: {sorted({e[:80] for v in votes for e in v['errors']})}"
    )
    assert rows and not failed, [r["error"] for r in failed][:3]
    assert len(votes) == TRAJECTORIES and valid > 0
