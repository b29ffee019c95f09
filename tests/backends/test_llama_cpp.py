"""ceb against a llama.cpp-style server: the loopback server's ``llama.cpp`` profile (tests/support/openai_server.py).

The profile reproduces what llama-cpp-python's server (0.3.36) was measured to do: an empty 400 to a request id
that is not a UUID, a 500 to ``response_format`` ``json_schema``, ``max_completion_tokens`` / ``n`` /
``prompt_logprobs`` / ``continue_final_message`` ignored, no ``/metrics``. These tests assert what ceb sends to
it, that ``ceb doctor`` names what it lacks, and that a scoring run has no failed step there.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from ceb.backends.base import ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAIBackend
from ceb.backends.probe import probe_endpoint
from ceb.cli import app
from ceb.config import BackendConfig, load_config
from ceb.errors import UnsupportedFeatureError
from ceb.pipeline import read_rows, run_scoring
from ceb.stages.hindsight import labels_schema
from ceb.stages.methods import resolve_method
from tests.support.builders import step, trajectory
from tests.support.openai_server import OpenAITestServer, Reply, serve_openai

pytestmark = pytest.mark.anyio

MESSAGES = ({"role": "user", "content": "Is step 3 correct?"},)
SCHEMA = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "maxLength": 240},
    },
    "required": ["score", "reason"],
    "additionalProperties": False,
}
ONCE = RetryPolicy(max_attempts=1)


def _settings(server: OpenAITestServer, **kw: Any) -> BackendConfig:
    return BackendConfig(base_url=server.base_url, model=server.model, api_key_env="CEB_TEST_UNSET_KEY", **kw)


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def test_a_refused_request_id_is_sent_again_as_a_uuid_within_one_attempt() -> None:
    async with (
        serve_openai(lambda body, i: Reply("fine"), profile="llama.cpp") as server,
        OpenAIBackend(_settings(server), retry=ONCE) as backend,
    ):
        first = await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))
        await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))

    assert first.completion.texts == ("fine",) and first.attempts == 1
    ((headers, _, status),) = server.refused
    assert status == 400 and re.fullmatch(r"ceb-critic-[0-9a-f]{32}", headers["x-request-id"])
    ids = [h["x-request-id"] for h in server.headers]
    assert len(ids) == 2 and all(_is_uuid(i) for i in ids) and ids[0] != ids[1]
    assert "request_id" in backend.adaptations


async def test_a_refused_json_schema_is_sent_again_as_json_object_carrying_the_whole_schema() -> None:
    async with (
        serve_openai(lambda body, i: Reply('{"score": 0.5, "reason": "ok"}'), profile="llama.cpp") as server,
        OpenAIBackend(_settings(server), retry=ONCE) as backend,
    ):
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA, schema_name="verdict"))
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA, schema_name="verdict"))

    # The first refusal is of the request id; then json_schema is refused once, and never asked for again.
    assert [status for _, _, status in server.refused] == [400, 500]
    assert server.refused[1][1]["response_format"]["type"] == "json_schema"
    # The whole schema, string length included: llama.cpp's grammar enforces maxLength, unlike OpenAI's strict mode.
    assert [b["response_format"] for b in server.requests] == [{"type": "json_object", "schema": SCHEMA}] * 2
    assert backend.transport.structured_output == "json_object_schema"


async def test_the_json_object_schema_mode_sends_it_up_front_and_nothing_else_changes() -> None:
    async with serve_openai(lambda body, i: Reply('{"labels": [1, 0]}'), profile="llama.cpp") as server:
        settings = _settings(server, structured_output="json_object_schema", token_limit_field="max_tokens")
        async with OpenAIBackend(settings, retry=ONCE) as backend:
            backend.transport.uuid_request_ids = True
            await backend.complete(ChatRequest(messages=MESSAGES, json_schema=labels_schema(2), max_tokens=64))

    assert server.refused == []
    assert server.requests == [
        {
            "model": server.model,
            "messages": [dict(m) for m in MESSAGES],
            "temperature": 0.0,
            "max_tokens": 64,
            "response_format": {"type": "json_object", "schema": labels_schema(2)},
        }
    ]


async def test_the_preflight_sees_max_completion_tokens_ignored_and_sends_max_tokens_from_then_on() -> None:
    async with (
        serve_openai(lambda body, i: Reply("one two three four five six"), profile="llama.cpp") as server,
        OpenAIBackend(_settings(server), retry=ONCE) as backend,
    ):
        await backend.preflight()
        reply = await backend.complete(ChatRequest(messages=MESSAGES, max_tokens=3))

    (ping,) = server.preflights  # its one-token budget was not read: the server's reply ran past it
    assert ping["max_completion_tokens"] == 1 and "max_tokens" not in ping
    body = server.requests[0]
    assert body["max_tokens"] == 3 and "max_completion_tokens" not in body
    assert reply.completion.texts == ("one two three",)
    assert backend.transport.token_limit_field == "max_tokens" and "max_tokens" in backend.adaptations


async def test_a_vllm_style_server_keeps_max_completion_tokens_and_stage_named_ids(
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = lambda body, i: Reply("fine")
    async with OpenAIBackend(_settings(openai_server), retry=ONCE) as backend:
        await backend.preflight()
        await backend.complete(ChatRequest(messages=MESSAGES, max_tokens=3, stage="critic"))

    assert len(openai_server.preflights) == 1 and backend.adaptations == {}
    assert openai_server.requests[0]["max_completion_tokens"] == 3
    assert re.fullmatch(r"ceb-critic-[0-9a-f]{32}", openai_server.headers[0]["x-request-id"])


async def test_n_that_the_server_ignores_is_made_up_by_one_request_per_choice_with_its_own_seed() -> None:
    texts = iter(["a", "b", "c", "d", "e", "f"])
    async with (
        serve_openai(lambda body, i: Reply(next(texts)), profile="llama.cpp") as server,
        OpenAIBackend(_settings(server), retry=ONCE) as backend,
    ):
        first = await backend.complete(ChatRequest(messages=MESSAGES, n=3, seed=10, temperature=0.7))
        second = await backend.complete(ChatRequest(messages=MESSAGES, n=3, seed=10, temperature=0.7))

    assert first.completion.texts == ("a", "b", "c") and second.completion.texts == ("d", "e", "f")
    assert first.attempts == 1 and first.completion.completion_tokens == 3
    # The first request still asked for n=3; once that is known to be ignored, each choice is its own request,
    # choice i with seed + i as independent votes are.
    assert [(b.get("n"), b["seed"]) for b in server.requests] == [
        (3, 10),
        (None, 11),
        (None, 12),
        (None, 10),
        (None, 11),
        (None, 12),
    ]
    assert "n" in backend.adaptations


async def test_continue_final_message_is_refused_with_the_reason_where_unknown_fields_go_unread() -> None:
    async with (
        serve_openai(lambda body, i: Reply("x"), profile="llama.cpp") as server,
        OpenAIBackend(_settings(server), retry=ONCE) as backend,
    ):
        await backend.preflight()
        forced = (*MESSAGES, {"role": "assistant", "content": "Confidence:"})
        extra = {"continue_final_message": True, "add_generation_prompt": False}
        with pytest.raises(UnsupportedFeatureError, match="continue_final_message cannot be used here: .* afresh"):
            await backend.complete(ChatRequest(messages=forced, extra=extra))

    assert server.requests == []  # refused here, not sent to be misread


def llama_model(body: dict[str, Any], i: int) -> Reply:
    """A model behind the llama.cpp profile: JSON where a schema asks for it, a little text otherwise."""
    fmt = body.get("response_format") or {}
    if "schema" in fmt:
        props = fmt["schema"].get("properties", {})
        text = '{"labels": [1, 0]}' if "labels" in props else '{"score": 0.75, "reason": "ok"}'
    else:
        text = "fine thanks for asking"  # run past a budget it cannot read
    top = [("fine", -0.1), ("good", -2.0)]
    return Reply(text, logprobs=[[("fine", -0.1, top)]])


async def test_doctor_names_what_a_llama_cpp_server_lacks_and_what_ceb_does_differently() -> None:
    async with serve_openai(llama_model, profile="llama.cpp") as server:
        report = await probe_endpoint(BackendConfig(base_url=server.base_url, model=server.model))

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
        "priority": "ok",
        "prefix_cache": "missing",
    }
    assert report.lacking == ["prompt_logprobs", "continue_final_message", "prefix_cache"]
    assert set(report.adaptations) == {"request_id", "max_tokens", "structured_output", "n"}
    detail = {c.name: c.detail for c in report.checks}
    assert "max_completion_tokens" in detail["token_budget"] and "max_tokens" in detail["token_budget"]
    assert "json_object" in detail["structured_output"]
    assert "request of its own" in detail["n"]
    assert "not continued" in detail["continue_final_message"]
    assert resolve_method("ceb").verdict(report.capabilities) == (True, "")
    assert resolve_method("pro").verdict(report.capabilities) == (
        False,
        "needs prompt_logprobs, continue_final_message",
    )


def test_ceb_doctor_prints_the_lacking_features_and_the_adaptations_as_json() -> None:
    import anyio

    async def main() -> dict[str, Any]:
        async with serve_openai(llama_model, profile="llama.cpp") as server:
            args = ["doctor", "--base-url", server.base_url, "--model", server.model, "--json"]
            result = await anyio.to_thread.run_sync(lambda: CliRunner().invoke(app, args))
        assert result.exit_code == 0, result.output
        doc: dict[str, Any] = orjson.loads(result.stdout)
        return doc

    doc = anyio.run(main)
    assert doc["usable"] is True
    assert doc["lacking"] == ["prompt_logprobs", "continue_final_message", "prefix_cache"]
    assert "UUID" in doc["adaptations"]["request_id"]
    assert doc["methods"]["ceb"]["runs"] is True and doc["methods"]["pro"]["runs"] is False


@pytest.mark.parametrize("sampling", ["requests", "n"])
async def test_ceb_scores_every_step_with_valid_votes_against_the_llama_cpp_profile(tmp_path, sampling: str) -> None:
    stream = [trajectory(f"t{i}", step(f"ls {i}", "x", label=1), step("pwd", "/", label=0)) for i in range(3)]
    async with serve_openai(llama_model, profile="llama.cpp") as server:
        config = load_config(
            overrides={
                "methods": ["ceb"],
                "backend": {"name": "openai", "base_url": server.base_url, "model": server.model},
                "ceb": {"votes": 3},
                "hindsight": {"sampling": sampling, "seed": 7},
            }
        )
        summary = await run_scoring({"s": stream}, config, tmp_path)

    assert summary.steps_scored == 6 and summary.steps_failed == 0
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    assert [r["score"] for r in rows] == [0.75] * 6
    votes = list(read_rows(tmp_path / "hindsight.jsonl"))
    assert len(votes) == 3 and all(v["failed_votes"] == 0 for v in votes)
    bodies = server.requests
    assert all("max_completion_tokens" not in b and "max_tokens" in b for b in bodies)
    assert all(b["response_format"]["type"] == "json_object" for b in bodies)
    hindsight = [b for b in bodies if "labels" in b["response_format"]["schema"]["properties"]]
    assert len(hindsight) == 3 * 3  # three votes per trajectory, each its own request either way
    assert all(_is_uuid(h["x-request-id"]) for h in server.headers)


async def test_methods_that_continue_a_message_are_not_available_there_rather_than_failed_or_misread(tmp_path) -> None:
    stream = [trajectory(f"t{i}", step(f"ls {i}", "x", label=1), step("pwd", "/", label=0)) for i in range(2)]
    async with serve_openai(llama_model, profile="llama.cpp") as server:
        config = load_config(
            overrides={
                "methods": ["verbalized", "ptrue"],  # ptrue teacher-forced, as by default
                "backend": {"name": "openai", "base_url": server.base_url, "model": server.model},
                "fail_on_error": 1,
                "allow_unavailable": True,
            }
        )
        summary = await run_scoring({"s": stream}, config, tmp_path)

    assert summary.steps_failed == 0 and summary.steps_unavailable == 8
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    assert all(r["status"] == "not_available" and "continue_final_message" in r["error"] for r in rows)
    assert all("continue_final_message" not in b for b in server.requests)  # never sent to be misread
