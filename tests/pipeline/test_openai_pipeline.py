"""The whole pipeline through the real ``openai`` client against a loopback OpenAI-compatible server."""

import re

import orjson
import pytest

from ceb.config import load_config
from ceb.eval import run_metrics
from ceb.pipeline import read_rows, run_scoring
from tests.support.builders import step, trajectory
from tests.support.openai_server import Reply

pytestmark = pytest.mark.anyio

N_STEPS = re.compile(r"The whole trajectory \((\d+) steps\)")


def respond(body: dict, i: int) -> Reply:
    user = body["messages"][-1]["content"]
    m = N_STEPS.search(user)
    if m:  # hindsight: steps whose output mentions "error" are unproductive
        n = int(m.group(1))
        outs = re.findall(r"what happened: (.*)", user)
        return Reply(orjson.dumps({"labels": [0 if "error" in o else 1 for o in outs[:n]]}).decode())
    score = 0.2 if "rm " in user.split("Proposed command")[1] else 0.8
    return Reply(f'```json\n{{"score": {score}, "reason": "scripted"}}\n```')


def stream():
    return [
        trajectory(
            f"t{i}",
            step("ls /testbed", "a b", label=1),
            step("rm -rf /x", "error: denied", "a b", label=0),
            step("cat a", "hello", "error: denied", label=1),
        )
        for i in range(4)
    ]


async def test_ceb_and_static_score_every_step_through_the_openai_backend(openai_server, tmp_path):
    openai_server.responder = respond
    config = load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": openai_server.base_url,
                "model": openai_server.model,
                "max_concurrency": 4,
                "backoff_s": 0.0,
            },
            "ceb": {"votes": 3},
        }
    )
    summary = await run_scoring({"bash": stream(), "bash2": stream()[:2]}, config, tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    # One one-token preflight request before any lane started (kept apart by the server), then the run's own.
    assert [b["max_completion_tokens"] for b in openai_server.preflights] == [1]
    run_requests = openai_server.requests
    assert len(rows) == (4 + 2) * 3 * 2
    assert summary.steps_scored == len(rows) and summary.steps_failed == 0
    assert {r["score"] for r in rows} == {0.2, 0.8}
    assert all(r["prompt_tokens"] > 0 and r["completion_tokens"] > 0 and r["requests"] == 1 for r in rows)
    # V hindsight requests per trajectory, for the ceb lanes only, at tau with the labels schema
    hindsight = [b for b in run_requests if "labels" in orjson.dumps(b.get("response_format", {})).decode()]
    assert len(hindsight) == (4 + 2) * 3
    assert {b["temperature"] for b in hindsight} == {0.7}
    critic = [b for b in run_requests if b not in hindsight]
    assert {b["temperature"] for b in critic} == {0.0}
    assert all(b["model"] == openai_server.model and b["response_format"]["type"] == "json_schema" for b in critic)
    assert len(critic) == len(rows) + summary.discarded_requests  # speculation's discarded calls are counted apart
    hrows = list(read_rows(tmp_path / "hindsight.jsonl"))
    assert len(hrows) == 6 and all(h["pseudo_labels"] == [1, 0, 1] for h in hrows)
    assert openai_server.max_in_flight <= 4
    # the bank of a ceb lane grew a trajectory at a time, and later steps saw precedents
    ceb_rows = [r for r in rows if r["method"] == "ceb" and r["stream"] == "bash"]
    assert [r["bank_size"] for r in ceb_rows] == [0, 0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9]
    assert ceb_rows[-1]["retrieved"] and all(r["retrieved"] == [] for r in rows if r["method"] == "static")
    m = run_metrics(tmp_path)
    pooled = {r["method"]: r for r in m["results"] if r["stream"] == "(pooled)"}
    assert pooled["ceb"]["auroc"] == pytest.approx(1.0) and pooled["ceb"]["n"] == 18


async def test_server_failures_are_recorded_per_step_not_raised(openai_server, tmp_path):
    def flaky(body, i):
        if "labels" in orjson.dumps(body.get("response_format", {})).decode():
            return Reply("not json at all")
        return Reply.error(400, body={"error": {"message": "prompt too long"}})

    openai_server.responder = flaky
    config = load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": openai_server.base_url,
                "model": openai_server.model,
                "backoff_s": 0.0,
            },
            "ceb": {"votes": 2},
            "hindsight": {"format_retries": 0},
            "methods": ["ceb"],
        }
    )
    summary = await run_scoring({"s": stream()[:2]}, config, tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    assert all(r["score"] is None and "prompt too long" in r["error"] for r in rows)
    assert summary.steps_failed == 6 and summary.votes_failed == 4 and summary.trajectories_not_banked == 2
    m = run_metrics(tmp_path)
    assert m["results"][0]["failed"] == 6 and m["results"][0]["n"] == 0


async def test_a_retried_request_is_counted_in_its_row_with_the_reason(openai_server, tmp_path):
    def first_busy(body, i):
        return Reply.error(503, body={"error": {"message": "busy"}}) if i == 0 else respond(body, i)

    openai_server.responder = first_busy
    config = load_config(
        overrides={
            "backend": {
                "name": "openai",
                "base_url": openai_server.base_url,
                "model": openai_server.model,
                "backoff_s": 0.0,
                "max_concurrency": 1,
                "preflight": False,
            },
            "methods": ["static"],
        }
    )
    await run_scoring({"s": stream()[:1]}, config, tmp_path)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    retried = [r for r in rows if r["retries"]]
    assert len(retried) == 1 and retried[0]["requests"] == 2 and retried[0]["score"] is not None
    assert "503" in retried[0]["retry_reason"] and "busy" in retried[0]["retry_reason"]
    assert all(r["retries"] == 0 and r["retry_reason"] is None and r["requests"] == 1 for r in rows if r not in retried)
