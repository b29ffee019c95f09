"""Baselines as methods of a run: scored through the loopback server, or `not available` without an endpoint."""

from __future__ import annotations

import math

import orjson
import pytest

from ceb.config import load_config
from ceb.errors import ConfigError
from ceb.eval import run_metrics
from ceb.pipeline import read_rows, run_scoring
from tests.support.builders import step, trajectory
from tests.support.openai_server import Reply

pytestmark = pytest.mark.anyio


def stream(logprobs: bool) -> list:
    lp = (-0.1, -0.5) if logprobs else None
    return [
        trajectory(f"t{i}", step(f"ls {i}", "x", label=1, actor_logprobs=lp), step("pwd", "/", label=0))
        for i in range(3)
    ]


async def test_offline_backend_refuses_an_llm_only_method_at_start_and_names_the_way_out(tmp_path):
    config = load_config(overrides={"methods": ["ppl", "ptrue", "cot", "static"]})
    with pytest.raises(ConfigError, match=r"ptrue, cot need an LLM endpoint, and backend 'offline' has none"):
        await run_scoring({"s": stream(logprobs=True)}, config, tmp_path / "run")
    assert not (tmp_path / "run").exists()


async def test_offline_backend_scores_ppl_from_logged_logprobs_and_marks_the_rest_not_available(tmp_path):
    config = load_config(
        overrides={"methods": ["ppl", "ptrue", "static"], "fail_on_error": 1, "allow_unavailable": True}
    )
    summary = await run_scoring({"s": stream(logprobs=True)}, config, tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    ppl = [r for r in rows if r["method"] == "ppl"]
    assert [r["score"] for r in ppl if r["step"] == 0] == [pytest.approx(math.exp(-0.3))] * 3
    assert all(r["error"].startswith("not available") for r in ppl if r["step"] == 1)  # no logged log-probs
    ptrue = [r for r in rows if r["method"] == "ptrue"]
    assert all(r["score"] is None and "needs an LLM endpoint" in r["error"] for r in ptrue)
    # `not available` is neither a score nor a failure: it cannot trip fail_on_error.
    assert summary.steps_failed == 0 and summary.steps_unavailable == 3 + 6
    entry = {(e["stream"], e["method"]): e for e in run_metrics(tmp_path)["results"]}
    assert entry[("s", "ptrue")]["n"] == 0 and entry[("s", "ptrue")]["not_available"] == 6


async def test_ptrue_runs_through_an_openai_compatible_endpoint(tmp_path, openai_server):
    top = [("True", -0.2), ("False", -1.0)]
    openai_server.responder = lambda body, i: Reply("True", logprobs=[[("True", -0.2, top)]])
    config = load_config(
        overrides={
            "methods": ["ptrue"],
            "backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model},
            "baselines": {"ptrue_forced": False},  # an OpenAI-style endpoint: first-token top_logprobs
        }
    )
    summary = await run_scoring({"s": stream(logprobs=False)}, config, tmp_path)
    assert summary.steps_scored == 6
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    expected = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.0))
    assert all(r["score"] == pytest.approx(expected) for r in rows)
    assert all(b["logprobs"] is True and b["top_logprobs"] == 20 for b in openai_server.requests)
    assert orjson.loads((tmp_path / "config.json").read_bytes())["config"]["methods"] == ["ptrue"]


async def test_forced_ptrue_reads_both_answers_teacher_forced_through_the_endpoint(tmp_path, openai_server):
    # The default: the question answered "True" and answered "False", each left open, read with the prompt's
    # log-probs; the answer is the last prompt token.
    answer_logprob = {"True": -0.2, "False": -1.0}

    def responder(body, i):
        answer = body["messages"][-1]["content"]
        return Reply("x", prompt_logprobs=[None, {7: ("\n", -0.1, 1)}, {8: (answer, answer_logprob[answer], 1)}])

    openai_server.responder = responder
    config = load_config(
        overrides={
            "methods": ["ptrue"],
            "backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model},
        }
    )
    summary = await run_scoring({"s": stream(logprobs=False)}, config, tmp_path)
    assert summary.steps_scored == 6
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    expected = math.exp(-0.2) / (math.exp(-0.2) + math.exp(-1.0))
    assert all(r["score"] == pytest.approx(expected) and r["requests"] == 2 for r in rows)
    assert all(b["prompt_logprobs"] == 1 and b["continue_final_message"] is True for b in openai_server.requests)
