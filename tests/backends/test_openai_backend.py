"""OpenAIBackend through its real aiohttp transport against a loopback OpenAI server (tests/support)."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import socket
import warnings
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
import structlog
from tenacity import AsyncRetrying, RetryCallState

from ceb.backends.base import (
    ChatBackend,
    ChatRequest,
    ChatResponse,
    Completion,
    EndpointLimits,
    RetryPolicy,
    TokenLogprob,
    TransientError,
    Transport,
)
from ceb.backends.openai import OpenAIBackend, StructuredOutput
from ceb.backends.scheduling import lane, lane_tag
from ceb.config import BackendConfig
from ceb.errors import BackendError, ConfigError, FatalBackendError
from ceb.sim import SIMULATOR_ID, SimConfig, serve_sim
from tests.support.openai_server import OpenAITestServer, Reply, serve_openai

KEY_ENV = "CEB_TEST_OPENAI_KEY"
SECRET = "sk-test-5f3a9c0e-never-print-me"
MODEL = "critic-model"
MESSAGES = (
    {"role": "system", "content": "You are a critic."},
    {"role": "user", "content": "Is step 3 correct?"},
)
SCHEMA = {
    "type": "object",
    "properties": {"score": {"type": "number", "minimum": 0, "maximum": 1}},
    "required": ["score"],
}
NO_WAIT = RetryPolicy(max_attempts=3, backoff_s=0, max_backoff_s=0)


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture
def debug_logs() -> Iterator[None]:
    """structlog at debug for one test (the session's is warning)."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    yield
    structlog.configure(**saved)


def _settings(server: OpenAITestServer, **kw: Any) -> BackendConfig:
    return BackendConfig(base_url=server.base_url, model=MODEL, api_key_env=KEY_ENV, **kw)


def _always(reply: Reply) -> Any:
    return lambda body, call_index: reply


def _fail_first(first: Reply, then: Reply) -> Any:
    return lambda body, call_index: first if call_index == 0 else then


async def _complete_all(backends: list[OpenAIBackend], requests_each: int) -> list[ChatResponse]:
    responses: list[ChatResponse] = []

    async def one(backend: OpenAIBackend) -> None:
        responses.append(await backend.complete(ChatRequest(messages=MESSAGES)))

    async with anyio.create_task_group() as tg:
        for backend in backends:
            for _ in range(requests_each):
                tg.start_soon(one, backend)
    return responses


# --- the wire payload ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_minimal_request_sends_exactly_model_messages_temperature_max_tokens(
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = _always(Reply('{"score": 0.5}'))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, temperature=0.7, max_tokens=32))

    assert openai_server.requests == [
        {"model": MODEL, "messages": [dict(m) for m in MESSAGES], "temperature": 0.7, "max_completion_tokens": 32}
    ]


@pytest.mark.anyio
async def test_older_servers_can_get_max_tokens_instead(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server, token_limit_field="max_tokens")) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, max_tokens=32))
    assert openai_server.requests[0]["max_tokens"] == 32
    assert "max_completion_tokens" not in openai_server.requests[0]


@pytest.mark.anyio
async def test_n_and_seed_are_sent_when_asked(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, n=3, seed=11))

    body = openai_server.requests[0]
    assert body["n"] == 3
    assert body["seed"] == 11


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "extra"),
    [
        (
            "json_schema",
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "verdict", "schema": SCHEMA, "strict": True},
                }
            },
        ),
        # vLLM structured outputs are a top-level body field, where vLLM reads them (the SDK's extra_body).
        ("vllm", {"structured_outputs": {"json": SCHEMA}}),
        ("json_object", {"response_format": {"type": "json_object"}}),
        ("none", {}),
    ],
)
async def test_structured_output_mode_shapes_the_body(
    openai_server: OpenAITestServer, mode: StructuredOutput, extra: dict[str, Any]
) -> None:
    openai_server.responder = _always(Reply('{"score": 0.5}'))
    async with OpenAIBackend(_settings(openai_server, structured_output=mode)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA, schema_name="verdict"))

    base = {"model": MODEL, "messages": [dict(m) for m in MESSAGES], "temperature": 0.0, "max_completion_tokens": 256}
    assert openai_server.requests == [base | extra]


def test_payload_is_the_wire_body_with_server_fields_at_the_top_level() -> None:
    backend = OpenAIBackend(BackendConfig(base_url="http://127.0.0.1:9/v1", model=MODEL, structured_output="vllm"))
    body = backend.transport.payload(ChatRequest(messages=MESSAGES, json_schema=SCHEMA, extra={"prompt_logprobs": 1}))

    assert body["structured_outputs"] == {"json": SCHEMA}
    assert body["prompt_logprobs"] == 1
    assert "extra_body" not in body


@pytest.mark.anyio
async def test_body_is_sent_as_json_with_a_json_content_type(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES))

    assert openai_server.headers[0]["content-type"] == "application/json"
    assert openai_server.headers[0]["accept"] == "application/json"


@pytest.mark.anyio
async def test_integer_keys_in_extra_are_sent_as_strings_like_json_dumps(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, extra={"logit_bias": {50256: -100}}))

    assert openai_server.requests[0]["logit_bias"] == {"50256": -100}


# --- the parsed reply ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_choices_and_token_usage_are_recorded(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply(["yes", "no way", "maybe so"]))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES, n=3))

    # The test server counts whitespace-split words: 4 + 4 in the prompt, 1 + 2 + 2 in the choices.
    assert response.completion == Completion(
        texts=("yes", "no way", "maybe so"), prompt_tokens=8, completion_tokens=5, model=MODEL
    )
    assert response.attempts == 1


@pytest.mark.anyio
async def test_texts_follow_choice_index_not_arrival_order(openai_server: OpenAITestServer) -> None:
    choices = [
        {"index": i, "message": {"role": "assistant", "content": f"choice {i}"}, "finish_reason": "stop"}
        for i in (2, 0, 1)
    ]
    body = {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices}
    openai_server.responder = _always(Reply(body=body))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES, n=3))

    assert response.completion.texts == ("choice 0", "choice 1", "choice 2")
    assert response.completion.prompt_tokens is None  # the server sent no usage


@pytest.mark.anyio
async def test_a_200_that_is_not_a_chat_completion_is_transient(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply(body="<html>gateway page</html>"))
    retry = RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0)
    async with OpenAIBackend(_settings(openai_server), retry=retry) as backend:
        with pytest.raises(TransientError, match="unreadable response body"):
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert len(openai_server.requests) == 2


@pytest.mark.anyio
async def test_a_200_with_a_truncated_json_body_is_transient() -> None:
    # The simulator's malformed-body fault: an application/json completion cut in half.
    async with serve_sim(SimConfig(time_scale=0.0, rate_malformed_body=1.0)) as sim:
        settings = BackendConfig(base_url=sim.base_url, model=SIMULATOR_ID, api_key_env=KEY_ENV)
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0)) as b:
            with pytest.raises(TransientError, match="unreadable response body") as info:
                await b.complete(ChatRequest(messages=MESSAGES))

    assert info.value.attempts == 2
    assert sim.stats.faults == {"malformed_body": 2}


# --- retries ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_429_with_retry_after_zero_is_retried(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _fail_first(Reply.error(429, headers={"Retry-After": "0"}), Reply("ok"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES))

    assert response.attempts == 2
    assert response.completion.texts == ("ok",)
    assert len(openai_server.requests) == 2
    assert openai_server.requests[0] == openai_server.requests[1]


@pytest.mark.anyio
async def test_every_attempt_carries_a_new_request_id_naming_its_stage(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _fail_first(Reply.error(503), Reply("ok"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, stage="hindsight"))

    ids = [h["x-request-id"] for h in openai_server.headers]
    assert len(ids) == 2 and ids[0] != ids[1]
    assert all(re.fullmatch(r"ceb-hindsight-[0-9a-f]{32}", i) for i in ids)


@pytest.mark.anyio
async def test_a_lanes_request_ids_carry_its_tag_so_a_server_log_line_names_the_lane(
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        for key in ("bash-1|0|ceb|", "bash-2|0|ceb|", "bash-1|0|ceb|"):
            with lane(key):
                await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))
        await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))

    ids = [h["x-request-id"] for h in openai_server.headers]
    tags = [re.fullmatch(r"ceb-critic-([0-9a-f]{8})-[0-9a-f]{32}", i) for i in ids[:3]]
    one, two = lane_tag("bash-1|0|ceb|"), lane_tag("bash-2|0|ceb|")
    assert all(tags) and [t.group(1) for t in tags if t] == [one, two, one]
    assert lane_tag("bash-1|0|ceb|") != lane_tag("bash-2|0|ceb|")
    assert [h["x-session-id"] for h in openai_server.headers[:3]] == ["bash-1|0|ceb|", "bash-2|0|ceb|", "bash-1|0|ceb|"]
    assert re.fullmatch(r"ceb-critic-[0-9a-f]{32}", ids[3]) and "x-session-id" not in openai_server.headers[3]


@pytest.mark.anyio
@pytest.mark.parametrize("status", [500, 503])
async def test_5xx_is_retried(openai_server: OpenAITestServer, status: int) -> None:
    openai_server.responder = _fail_first(Reply.error(status), Reply("ok"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES))

    assert response.attempts == 2
    assert response.completion.texts == ("ok",)


@pytest.mark.anyio
async def test_a_500_that_is_a_request_validation_error_is_not_retried(openai_server: OpenAITestServer) -> None:
    # llama-cpp-python answers its request model's validation error with a 500; the same body fails the same way.
    message = "1 validation error:\n  {'type': 'missing', 'loc': ('body', 'messages')}"
    openai_server.responder = _always(Reply.error(500, body={"error": {"message": message}}))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with pytest.raises(BackendError, match="500 from server, a request validation error \\(not retried\\)"):
            await backend.complete(ChatRequest(messages=MESSAGES))
    assert len(openai_server.requests) == 1


@pytest.mark.anyio
async def test_400_is_not_retried(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(400, body={"error": {"message": "bad schema"}}))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with pytest.raises(BackendError, match="400 from server: bad schema") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.backend == backend.label
    assert len(openai_server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("status", [401, 403, 404])
async def test_refusals_that_no_retry_can_fix_are_fatal(openai_server: OpenAITestServer, status: int) -> None:
    openai_server.responder = _always(Reply.error(status, body={"error": {"message": "no such model"}}))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with pytest.raises(FatalBackendError, match=f"{status} from server: no such model.*{KEY_ENV}") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))
    assert MODEL in str(info.value)
    assert openai_server.base_url in str(info.value)
    assert len(openai_server.requests) == 1


@pytest.mark.anyio
async def test_a_spent_retry_budget_reports_its_attempts(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(503))
    retry = RetryPolicy(max_attempts=3, backoff_s=0, max_backoff_s=0)
    async with OpenAIBackend(_settings(openai_server), retry=retry) as backend:
        with pytest.raises(TransientError) as info:
            await backend.complete(ChatRequest(messages=MESSAGES))
    assert info.value.attempts == 3 == len(openai_server.requests)


@pytest.mark.anyio
async def test_timeout_is_retried_until_the_budget_is_spent(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("too late", delay_s=1.0))
    retry = RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0)
    async with OpenAIBackend(_settings(openai_server, timeout_s=0.2), retry=retry) as backend:
        with pytest.raises(TransientError, match="timeout"):
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert len(openai_server.requests) == 2


@pytest.mark.anyio
async def test_a_timed_out_request_is_retried_once_not_until_the_budget_is_spent(
    openai_server: OpenAITestServer,
) -> None:
    # A reply that outran the timeout would restart from scratch and most likely outrun it again.
    openai_server.responder = _always(Reply("too late", delay_s=1.0))
    retry = RetryPolicy(max_attempts=6, backoff_s=0, max_backoff_s=0, timeout_attempts=2)
    async with OpenAIBackend(_settings(openai_server, timeout_s=0.2), retry=retry) as backend:
        with pytest.raises(TransientError, match="timeout") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.attempts == 2 == len(openai_server.requests)


@pytest.mark.anyio
async def test_a_timeout_cap_does_not_shorten_retries_of_other_failures(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(503))
    retry = RetryPolicy(max_attempts=4, backoff_s=0, max_backoff_s=0, timeout_attempts=1)
    async with OpenAIBackend(_settings(openai_server), retry=retry) as backend:
        with pytest.raises(TransientError):
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert len(openai_server.requests) == 4


@pytest.mark.anyio
async def test_each_retry_is_a_debug_line_and_the_response_keeps_its_reason(
    openai_server: OpenAITestServer, debug_logs: None
) -> None:
    openai_server.responder = _fail_first(Reply.error(503, body={"error": {"message": "busy"}}), Reply("ok"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with structlog.testing.capture_logs() as logs:
            response = await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))

    assert response.attempts == 2
    assert response.retry_reason is not None and "503" in response.retry_reason and "busy" in response.retry_reason
    retries = [e for e in logs if e["event"] == "retrying request"]
    assert len(retries) == 1
    assert retries[0]["log_level"] == "debug"
    assert retries[0]["stage"] == "critic" and retries[0]["attempt"] == 1
    assert retries[0]["reason"] == response.retry_reason


@pytest.mark.anyio
async def test_retries_are_warned_as_counts_by_cause_not_a_line_each(
    openai_server: OpenAITestServer, debug_logs: None
) -> None:
    """50 requests at a 20% error rate made about 10 warning lines, one per retry (32 in a 50-step run): now the first
    retry is a warning at once and the rest one line per interval, the last at close, with their counts by cause."""
    openai_server.responder = lambda body, i: Reply.error(503 if i % 10 else 429) if i % 5 == 0 else Reply("ok")
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with structlog.testing.capture_logs() as logs:
            for _ in range(50):
                await backend.complete(ChatRequest(messages=MESSAGES, stage="critic"))
            await backend.aclose()

    assert len(openai_server.requests) == 50 + 13  # calls 0, 5, ..., 60 failed and were retried
    assert len([e for e in logs if e["event"] == "retrying request" and e["log_level"] == "debug"]) == 13
    warned = [e for e in logs if e["log_level"] == "warning"]
    assert [e["event"] for e in warned] == ["retries", "retries"]  # the first at once, the rest when closing
    assert warned[0]["by_cause"] == {"HTTP 429": 1} and warned[1]["count"] == 12 and warned[1]["total"] == 13
    assert warned[1]["by_cause"] == {"HTTP 503": 6, "HTTP 429": 6}


@pytest.mark.anyio
async def test_a_first_attempt_success_has_no_retry_reason(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("ok"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES))

    assert response.attempts == 1 and response.retry_reason is None


@pytest.mark.anyio
async def test_retry_after_header_is_carried_on_the_error(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(429, headers={"Retry-After": "7"}))
    retry = RetryPolicy(max_attempts=1)
    async with OpenAIBackend(_settings(openai_server), retry=retry) as backend:
        with pytest.raises(TransientError) as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.retry_after == 7.0


@pytest.mark.anyio
async def test_5xx_retry_after_is_carried_on_the_error(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(503, headers={"Retry-After": "2.5"}))
    async with OpenAIBackend(_settings(openai_server), retry=RetryPolicy(max_attempts=1)) as backend:
        with pytest.raises(TransientError, match="503 from") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.retry_after == 2.5


@pytest.mark.anyio
async def test_an_http_date_retry_after_leaves_the_wait_to_the_backoff(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}))
    async with OpenAIBackend(_settings(openai_server), retry=RetryPolicy(max_attempts=1)) as backend:
        with pytest.raises(TransientError, match="429 from") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.retry_after is None


@pytest.mark.anyio
async def test_a_plain_text_error_body_is_the_message(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply.error(422, body="upstream says no"))
    async with OpenAIBackend(_settings(openai_server), retry=NO_WAIT) as backend:
        with pytest.raises(BackendError, match="422 from server: upstream says no"):
            await backend.complete(ChatRequest(messages=MESSAGES))


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # nothing listens there once the socket is closed


@pytest.mark.anyio
async def test_a_refused_connection_is_transient() -> None:
    settings = BackendConfig(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model=MODEL, api_key_env=KEY_ENV)
    async with OpenAIBackend(settings, retry=NO_WAIT) as backend:
        with pytest.raises(TransientError, match="connection to .* failed") as info:
            await backend.complete(ChatRequest(messages=MESSAGES))

    assert info.value.attempts == NO_WAIT.max_attempts


@pytest.mark.anyio
async def test_a_connection_dropped_before_the_reply_is_transient() -> None:
    accepted = 0

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        settings = BackendConfig(base_url=f"http://127.0.0.1:{port}/v1", model=MODEL, api_key_env=KEY_ENV)
        async with OpenAIBackend(settings, retry=NO_WAIT) as backend:
            with pytest.raises(TransientError, match="connection to .* failed"):
                await backend.complete(ChatRequest(messages=MESSAGES))
    finally:
        server.close()
        await server.wait_closed()

    assert accepted == NO_WAIT.max_attempts


class _Unused(Transport):
    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        raise AssertionError("not called")


def _failed_attempt(exc: BaseException, attempt_number: int) -> RetryCallState:
    state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt_number
    state.set_exception((type(exc), exc, None))
    return state


def test_wait_honours_retry_after_beyond_the_backoff_cap() -> None:
    backend = ChatBackend(_Unused("x"), retry=RetryPolicy(backoff_s=0.5, max_backoff_s=1.0))

    for attempt in (1, 2, 5):
        assert backend._wait(_failed_attempt(TransientError("429", retry_after=7), attempt)) >= 7


def test_wait_without_retry_after_is_capped_jittered_backoff() -> None:
    backend = ChatBackend(_Unused("x"), retry=RetryPolicy(backoff_s=0.5, max_backoff_s=1.0))
    waits = [backend._wait(_failed_attempt(TransientError("503"), 10)) for _ in range(20)]

    assert all(0 <= w <= 1.0 for w in waits)
    assert len(set(waits)) > 1  # jittered


def test_wait_is_zero_with_a_zero_policy() -> None:
    backend = ChatBackend(_Unused("x"), retry=RetryPolicy(backoff_s=0, max_backoff_s=0))

    assert backend._wait(_failed_attempt(TransientError("503"), 3)) == 0


# --- concurrency -----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_max_concurrency_bounds_requests_in_flight(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("ok", delay_s=0.2))
    async with OpenAIBackend(_settings(openai_server, max_concurrency=2)) as backend:
        responses = await _complete_all([backend], requests_each=6)

    assert len(openai_server.requests) == 6
    assert openai_server.max_in_flight == 2
    # Six requests through two slots: four of them waited at least one 0.2 s round for a slot, and that
    # wait is counted apart from the server's time.
    assert sum(r.queue_s > 0.1 for r in responses) >= 4
    assert all(r.latency_s >= 0.2 for r in responses)


@pytest.mark.anyio
@pytest.mark.parametrize(("shared", "expected_in_flight"), [(True, 2), (False, 4)])
async def test_endpoint_limits_shared_between_backends_bound_their_sum(
    openai_server: OpenAITestServer, shared: bool, expected_in_flight: int
) -> None:
    openai_server.responder = _always(Reply("ok", delay_s=0.2))
    settings = _settings(openai_server, max_concurrency=2)
    limits = EndpointLimits()
    async with (
        OpenAIBackend(settings, limits=limits if shared else None) as critic,
        OpenAIBackend(settings, limits=limits if shared else None) as hindsight,
    ):
        await _complete_all([critic, hindsight], requests_each=3)

    assert len(openai_server.requests) == 6
    assert openai_server.max_in_flight == expected_in_flight


# --- sessions ------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_two_endpoints_each_get_their_own_session_and_aclose_closes_both(
    openai_server: OpenAITestServer,
) -> None:
    openai_server.responder = _always(Reply("ok", delay_s=0.1))
    async with serve_openai(_always(Reply("ok", delay_s=0.1))) as second:
        settings = BackendConfig(base_url=(openai_server.base_url, second.base_url), model=MODEL, api_key_env=KEY_ENV)
        backend = OpenAIBackend(settings)
        await _complete_all([backend], requests_each=4)  # least-outstanding balancing: two on each
        sessions = dict(backend.transport._sessions)

        assert len(openai_server.requests) == len(second.requests) == 2
        assert set(sessions) == {openai_server.base_url, second.base_url}
        assert sessions[openai_server.base_url] is not sessions[second.base_url]
        assert not any(s.closed for s in sessions.values())

        await backend.aclose()

    assert all(s.closed for s in sessions.values())
    assert backend.transport._sessions == {}


@pytest.mark.anyio
async def test_aclose_leaves_no_unclosed_session_behind(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("ok"))
    backend = OpenAIBackend(_settings(openai_server))
    await backend.complete(ChatRequest(messages=MESSAGES))
    await backend.aclose()
    await backend.complete(ChatRequest(messages=MESSAGES))  # a closed backend reopens on the next request
    await backend.aclose()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del backend
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert len(openai_server.requests) == 2


def test_a_backend_built_outside_the_event_loop_opens_its_session_inside_it() -> None:
    port = _closed_port()
    backend = OpenAIBackend(
        BackendConfig(base_url=f"http://127.0.0.1:{port}/v1", model=SIMULATOR_ID, api_key_env=KEY_ENV)
    )

    async def main() -> tuple[str, ...]:
        async with serve_sim(SimConfig(time_scale=0.0), port=port), backend:
            response = await backend.complete(ChatRequest(messages=MESSAGES))
        return response.completion.texts

    texts = anyio.run(main)
    assert len(texts) == 1 and texts[0]


@pytest.mark.anyio
async def test_the_environment_proxy_is_used_without_handing_it_the_key(
    openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The loopback test server plays an HTTP proxy: aiohttp's server routes an absolute-form request target.
    for name in ("http_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", openai_server.base_url.removesuffix("/v1"))
    monkeypatch.setenv(KEY_ENV, SECRET)
    openai_server.responder = _always(Reply("via proxy"))
    settings = BackendConfig(base_url="http://10.255.255.1:9/v1", model=MODEL, api_key_env=KEY_ENV)
    async with OpenAIBackend(settings) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES))

    assert response.completion.texts == ("via proxy",)
    assert openai_server.headers[0]["host"] == "10.255.255.1:9"
    assert "proxy-authorization" not in openai_server.headers[0]


# --- the API key -----------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_key_is_read_from_the_named_variable_and_sent_as_bearer(
    openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    openai_server.responder = _always(Reply("ok"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES))

    assert openai_server.headers[0]["authorization"] == f"Bearer {SECRET}"


@pytest.mark.anyio
async def test_loopback_without_key_sends_a_placeholder(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("ok"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES))

    assert openai_server.headers[0]["authorization"] == "Bearer EMPTY"


@pytest.mark.parametrize(
    "url",
    [
        "https://api.openai.com/v1",
        "http://127.0.0.1.example.com/v1",  # looks local, is not
        "https://api.example.com/v1?via=http://127.0.0.1",
    ],
)
def test_remote_url_without_key_is_a_config_error_naming_the_variable(url: str) -> None:
    with pytest.raises(ConfigError, match=KEY_ENV):
        OpenAIBackend(BackendConfig(base_url=url, model=MODEL, api_key_env=KEY_ENV))


@pytest.mark.anyio
@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:8000/v1",
        "http://127.0.0.1:8000/v1",
        "http://[::1]:8000/v1",
        "http://0.0.0.0:8000/v1",
        "http://10.1.2.3:8000/v1",
        "http://192.168.0.7:8000/v1",
    ],
)
async def test_loopback_and_private_urls_need_no_key(url: str) -> None:
    async with OpenAIBackend(BackendConfig(base_url=url, model=MODEL, api_key_env=KEY_ENV)) as backend:
        assert backend.endpoint == url


@pytest.mark.anyio
async def test_key_never_appears_in_repr_or_str(
    openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    async with OpenAIBackend(_settings(openai_server)) as backend:
        http = backend.transport
        shown = [repr(backend), str(backend), repr(http), str(http), repr(http.settings), str(http.settings)]
        shown.append(backend.label)

    assert all(SECRET not in text for text in shown)


def _chain(exc: BaseException | None) -> list[str]:
    shown: list[str] = []
    while exc is not None:
        shown += [str(exc), repr(exc)]
        exc = exc.__cause__ or exc.__context__
    return shown


@pytest.mark.anyio
async def test_key_never_appears_in_any_error_or_log(
    openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    caplog.set_level(logging.DEBUG)
    echo = f"Incorrect API key provided: {SECRET}"
    replies = [
        Reply.error(401, body={"error": {"message": echo}}),
        Reply.error(400, body=f"bad request; Authorization: Bearer {SECRET}"),
        Reply.error(503, body={"message": echo}),
        Reply("late", delay_s=1.0),
    ]
    shown: list[str] = []
    with structlog.testing.capture_logs() as logs:
        for reply in replies:
            openai_server.responder = _always(reply)
            async with OpenAIBackend(_settings(openai_server, timeout_s=0.2), retry=NO_WAIT) as backend:
                with pytest.raises(BackendError if reply.status in (400, 401) else TransientError) as info:
                    await backend.complete(ChatRequest(messages=MESSAGES))
                shown += _chain(info.value)
        refused = BackendConfig(base_url=f"http://127.0.0.1:{_closed_port()}/v1", model=MODEL, api_key_env=KEY_ENV)
        async with OpenAIBackend(refused, retry=NO_WAIT) as backend:
            with pytest.raises(TransientError) as info:
                await backend.complete(ChatRequest(messages=MESSAGES))
            shown += _chain(info.value)

    assert openai_server.headers[0]["authorization"] == f"Bearer {SECRET}"  # it was sent, and only there
    assert any("Incorrect API key provided: ***" in text for text in shown)  # redacted, the message kept
    everything = "\n".join([*shown, caplog.text, *map(repr, logs)])
    assert SECRET not in everything


# --- log-probabilities and server-specific fields ---------------------------------------------------------


VLLM_EXTRA = {"prompt_logprobs": 2, "continue_final_message": True, "add_generation_prompt": False}


@pytest.mark.anyio
async def test_logprob_fields_and_extra_are_sent_at_the_top_of_the_body(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply("x"))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        await backend.complete(
            ChatRequest(messages=MESSAGES, max_tokens=1, logprobs=True, top_logprobs=5, extra=VLLM_EXTRA)
        )

    base = {"model": MODEL, "messages": [dict(m) for m in MESSAGES], "temperature": 0.0, "max_completion_tokens": 1}
    assert openai_server.requests == [base | {"logprobs": True, "top_logprobs": 5} | VLLM_EXTRA]


@pytest.mark.anyio
async def test_extra_is_merged_with_vllm_structured_outputs(openai_server: OpenAITestServer) -> None:
    openai_server.responder = _always(Reply('{"score": 0.5}'))
    async with OpenAIBackend(_settings(openai_server, structured_output="vllm")) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=SCHEMA, extra={"echo": False}))

    assert openai_server.requests[0]["structured_outputs"] == {"json": SCHEMA}
    assert openai_server.requests[0]["echo"] is False


@pytest.mark.anyio
@pytest.mark.parametrize("field", ["temperature", "logprobs"])
async def test_extra_may_not_repeat_a_field_the_request_sets(openai_server: OpenAITestServer, field: str) -> None:
    async with OpenAIBackend(_settings(openai_server)) as backend:
        with pytest.raises(ValueError, match=f"repeats fields the request already sets: {field}"):
            await backend.complete(ChatRequest(messages=MESSAGES, logprobs=True, extra={field: 1}))

    assert openai_server.requests == []


@pytest.mark.anyio
async def test_generated_token_logprobs_are_parsed_per_choice(openai_server: OpenAITestServer) -> None:
    first = [("True", -0.1, [("True", -0.1), ("False", -2.4)])]
    second = [("No", -0.5, [("No", -0.5)]), (".", -0.01, [(".", -0.01)])]
    openai_server.responder = _always(Reply(["True", "No."], logprobs=[first, second]))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES, n=2, logprobs=True, top_logprobs=2))

    assert response.completion.logprobs == (
        (TokenLogprob("True", -0.1, (("True", -0.1), ("False", -2.4))),),
        (TokenLogprob("No", -0.5, (("No", -0.5),)), TokenLogprob(".", -0.01, ((".", -0.01),))),
    )
    assert response.completion.prompt_logprobs is None


@pytest.mark.anyio
async def test_vllm_prompt_logprobs_keep_the_top_k_that_was_asked_for(openai_server: OpenAITestServer) -> None:
    # vLLM lists the prompt's own token first (with its vocabulary rank), then the top K; the own token appears
    # once even when it is among the top K.
    positions = [
        None,
        {7: ("ls", -0.5, 2), 9: ("cd", -0.3, 1)},
        {11: (" -la", -4.0, 5), 12: (" -l", -0.2, 1), 13: (" *", -1.9, 2)},
    ]
    openai_server.responder = _always(Reply("\n", prompt_logprobs=positions))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES, max_tokens=1, extra=VLLM_EXTRA))

    assert response.completion.prompt_logprobs == (
        None,
        TokenLogprob("ls", -0.5, top=(("cd", -0.3), ("ls", -0.5)), rank=2),
        TokenLogprob(" -la", -4.0, top=((" -l", -0.2), (" *", -1.9)), rank=5),  # ranked 5th: not in the top 2
    )
    assert response.completion.logprobs is None


@pytest.mark.anyio
async def test_prompt_token_ids_name_the_own_token_when_sent(openai_server: OpenAITestServer) -> None:
    positions = [None, {9: ("cd", -0.3, 1), 7: ("ls", -0.5, 2)}]
    openai_server.responder = _always(Reply("\n", prompt_logprobs=positions, prompt_token_ids=[1, 7]))
    async with OpenAIBackend(_settings(openai_server)) as backend:
        response = await backend.complete(ChatRequest(messages=MESSAGES, extra={"prompt_logprobs": 2}))

    assert response.completion.prompt_logprobs is not None
    assert response.completion.prompt_logprobs[1] == TokenLogprob("ls", -0.5, (("cd", -0.3), ("ls", -0.5)), 2)


@pytest.mark.anyio
async def test_a_malformed_prompt_logprobs_position_is_unreadable_when_read(openai_server: OpenAITestServer) -> None:
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
        "prompt_logprobs": [None, {"7": {"rank": 1, "decoded_token": "ls"}}, {"8": {"logprob": -1.0}}],  # 1: none
    }
    openai_server.responder = _always(Reply(body=body))
    async with OpenAIBackend(_settings(openai_server), retry=RetryPolicy(max_attempts=1)) as backend:
        positions = (await backend.complete(ChatRequest(messages=MESSAGES))).completion.prompt_logprobs

    assert positions is not None and len(positions) == 3
    assert positions[2] == TokenLogprob("", -1.0, (("", -1.0),), None)
    with pytest.raises(TransientError, match=r"prompt_logprobs\[1\] is unreadable: .*logprob"):
        positions[1]


@pytest.mark.anyio
async def test_prompt_logprobs_that_are_not_a_list_are_an_unreadable_body(openai_server: OpenAITestServer) -> None:
    body = {
        "id": "c",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
        "prompt_logprobs": {"1": None},
    }
    openai_server.responder = _always(Reply(body=body))
    async with OpenAIBackend(_settings(openai_server), retry=RetryPolicy(max_attempts=1)) as backend:
        with pytest.raises(TransientError, match="unreadable response body"):
            await backend.complete(ChatRequest(messages=MESSAGES))


BOUNDED = {
    "type": "object",
    "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "reason": {"type": "string", "maxLength": 240},
        "maxLength": {"type": "string", "minLength": 1},  # a property may be named like a keyword
    },
    "required": ["score", "reason", "maxLength"],
    "additionalProperties": False,
}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "sent"),
    [
        # OpenAI's strict mode refuses string lengths: they are dropped, the number range is kept.
        (
            "json_schema",
            {
                "type": "object",
                "properties": {
                    "score": {"type": "number", "minimum": 0, "maximum": 1},
                    "reason": {"type": "string"},
                    "maxLength": {"type": "string"},
                },
                "required": ["score", "reason", "maxLength"],
                "additionalProperties": False,
            },
        ),
        # vLLM enforces every bound, so it gets the schema whole.
        ("vllm", BOUNDED),
    ],
)
async def test_each_mode_gets_the_schema_keywords_its_server_accepts(
    openai_server: OpenAITestServer, mode: StructuredOutput, sent: dict[str, Any]
) -> None:
    openai_server.responder = _always(Reply('{"score": 0.5}'))
    async with OpenAIBackend(_settings(openai_server, structured_output=mode)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=BOUNDED, schema_name="verdict"))

    body = openai_server.requests[0]
    got = (
        body["response_format"]["json_schema"]["schema"]
        if mode == "json_schema"
        else body["structured_outputs"]["json"]
    )
    assert got == sent
    assert BOUNDED["properties"]["reason"] == {"type": "string", "maxLength": 240}  # the request's own is untouched


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("mode", "field"),
    [("json_schema", "response_format"), ("vllm", "structured_outputs"), ("json_object", None), ("none", None)],
)
async def test_a_reply_that_is_not_an_object_is_guided_only_where_a_schema_can_say_so(
    openai_server: OpenAITestServer, mode: StructuredOutput, field: str | None
) -> None:
    number = {"type": "integer", "minimum": 0, "maximum": 100}
    openai_server.responder = _always(Reply("42"))
    async with OpenAIBackend(_settings(openai_server, structured_output=mode)) as backend:
        await backend.complete(ChatRequest(messages=MESSAGES, json_schema=number))

    body = openai_server.requests[0]
    # JSON mode can only ask for an object, which would forbid the bare number: nothing is sent there.
    assert {k for k in ("response_format", "structured_outputs") if k in body} == ({field} if field else set())
