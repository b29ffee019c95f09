"""``ceb doctor``'s probe against the loopback OpenAI server scripted as a plain (non-vLLM) endpoint, and a dead one."""

from __future__ import annotations

import socket
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from ceb.backends.probe import probe_endpoint
from ceb.cli import app
from ceb.config import BackendConfig
from ceb.stages.methods import resolve_method
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

VLLM_ONLY = ("prompt_logprobs", "continue_final_message", "priority")


def plain_openai(body: dict[str, Any], i: int) -> Reply:
    """An endpoint with schemas, n and logprobs, that refuses vLLM's extensions as OpenAI does (400)."""
    extra = [k for k in VLLM_ONLY if k in body]
    if extra:
        return Reply(status=400, body={"error": {"message": f"Unrecognized request argument: {extra[0]}"}})
    n = body.get("n", 1)
    text = '{"score": 0.5, "reason": "ok"}' if "response_format" in body else "fine"
    logprobs = [[("fine", -0.1, [("fine", -0.1), ("good", -2.0)])]] * n if body.get("logprobs") else None
    return Reply([text] * n, logprobs=logprobs)


async def test_a_plain_endpoint_lacks_the_vllm_extensions_and_says_which_methods_run(
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = plain_openai
    report = await probe_endpoint(BackendConfig(base_url=openai_server.base_url, model=openai_server.model))

    outcome = {c.name: c.outcome for c in report.checks}
    assert outcome == {
        "models": "ok",
        "chat": "ok",
        "token_budget": "ok",
        "structured_output": "ok",
        "schema_bounds": "ok",
        "n": "ok",
        "logprobs": "ok",
        "prompt_logprobs": "missing",
        "continue_final_message": "missing",
        "priority": "missing",
        "prefix_cache": "missing",
    }
    assert report.usable
    assert resolve_method("ceb").verdict(report.capabilities) == (True, "")
    assert resolve_method("ptrue").verdict(report.capabilities)[0]
    assert resolve_method("pro").verdict(report.capabilities) == (
        False,
        "needs prompt_logprobs, continue_final_message",
    )
    runs, note = resolve_method("ppl").verdict(report.capabilities)
    assert runs and "actor_logprobs" in note


async def test_a_model_the_server_does_not_list_is_named(openai_server: OpenAITestServer) -> None:
    openai_server.responder = plain_openai
    report = await probe_endpoint(BackendConfig(base_url=openai_server.base_url, model="no-such-model"))
    (models,) = (c for c in report.checks if c.name == "models")
    assert models.outcome == "missing" and "'no-such-model' is not listed" in models.detail


def _dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on once this socket closes
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def test_a_dead_endpoint_fails_every_check_in_one_attempt_each() -> None:
    report = await probe_endpoint(BackendConfig(base_url=_dead_url(), model="m", timeout_s=5))
    assert not report.usable
    assert {c.outcome for c in report.checks} == {"failed"}
    (chat,) = (c for c in report.checks if c.name == "chat")
    assert "connection to" in chat.detail


def test_doctor_exits_non_zero_where_ceb_cannot_run_and_prints_json() -> None:
    args = ["doctor", "--base-url", _dead_url(), "--model", "m", "--timeout", "5", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    doc = orjson.loads(result.stdout)
    assert doc["usable"] is False
    assert doc["methods"]["ceb"] == {"runs": False, "note": "needs chat"}


async def test_the_length_bound_the_probe_reports_is_sent_in_json_schema_mode(openai_server: OpenAITestServer) -> None:
    # OpenAI's strict mode refuses maxLength (json_schema mode drops it): the bound is a pattern, which stays.
    openai_server.responder = plain_openai
    report = await probe_endpoint(BackendConfig(base_url=openai_server.base_url, model=openai_server.model))

    bounds = next(c for c in report.checks if c.name == "schema_bounds")
    assert bounds.outcome == "ok" and "length pattern held" in bounds.detail and "maxLength" not in bounds.detail
    sent = [b["response_format"]["json_schema"] for b in openai_server.requests if "response_format" in b]
    assert sent and all(s["strict"] is True for s in sent)
    assert all(s["schema"]["properties"]["reason"] == {"type": "string", "pattern": "^[^\\n]{0,12}$"} for s in sent)
