"""Reading chat-completion bodies, error bodies and Retry-After values, without a server."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ceb.backends._wire import error_message, parse_completion, retry_after
from ceb.backends.base import Completion, TokenLogprob


def _choice(index: int, content: Any, logprobs: Any = None) -> dict[str, Any]:
    return {
        "index": index,
        "message": {"role": "assistant", "content": content},
        "finish_reason": "stop",
        "logprobs": logprobs,
    }


# --- parse_completion ------------------------------------------------------------------------------------


def test_choices_are_read_in_index_order_with_usage_and_model() -> None:
    body = {
        "model": "served-name",
        "choices": [_choice(1, "second"), _choice(0, "first")],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }

    assert parse_completion(body, default_model="asked") == Completion(
        texts=("first", "second"), prompt_tokens=12, completion_tokens=3, model="served-name"
    )


def test_null_content_is_empty_text_and_missing_fields_fall_back() -> None:
    completion = parse_completion({"choices": [_choice(0, None)]}, default_model="asked")

    assert completion == Completion(texts=("",), model="asked")


def test_generated_token_logprobs_keep_their_alternatives() -> None:
    content = [{"token": "Yes", "logprob": -0.1, "top_logprobs": [{"token": "Yes", "logprob": -0.1}]}]
    body = {"choices": [_choice(0, "Yes", {"content": content}), _choice(1, "No", None)]}

    assert parse_completion(body, default_model="m").logprobs == (
        (TokenLogprob("Yes", -0.1, (("Yes", -0.1),)),),
        None,
    )


def test_prompt_logprobs_are_read_with_the_k_that_was_asked() -> None:
    positions = [
        None,
        {
            "7": {"logprob": -3.0, "rank": 4, "decoded_token": "ls"},
            "9": {"logprob": -0.1, "rank": 1, "decoded_token": "cd"},
        },
    ]
    body = {"choices": [_choice(0, "x")], "prompt_logprobs": positions}

    assert parse_completion(body, default_model="m", asked_prompt_logprobs=1).prompt_logprobs == (
        None,
        TokenLogprob("ls", -3.0, top=(("cd", -0.1),), rank=4),
    )


@pytest.mark.parametrize(
    "body",
    [
        ["not", "an", "object"],
        {"object": "error"},  # no choices
        {"choices": {"0": _choice(0, "x")}},
        {"choices": [{"index": 0}]},  # no message
        {"choices": [{"message": {"content": "x"}}]},  # no index
        {"choices": [_choice(0, ["a", "list"])]},
        {"choices": [_choice(0, "x", {"content": [{"token": "x"}]})]},  # no logprob
        {"choices": [_choice(0, "x")], "usage": "12 tokens"},
    ],
)
def test_a_body_that_is_not_a_chat_completion_raises(body: Any) -> None:
    with pytest.raises((TypeError, ValueError, KeyError)):
        parse_completion(body, default_model="m")


# --- error_message ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (orjson.dumps({"error": {"message": "bad schema", "type": "invalid_request_error"}}), "bad schema"),
        (orjson.dumps({"error": "model not loaded"}), "model not loaded"),
        (orjson.dumps({"object": "error", "message": "too long", "code": 400}), "too long"),  # older vLLM
        (b"<html>\n  <body>502 Bad   Gateway</body>\n</html>", "<html> <body>502 Bad Gateway</body> </html>"),
        (orjson.dumps({"detail": "Not Found"}), '{"detail":"Not Found"}'),
        (b"", "(empty body)"),
    ],
)
def test_error_message_reads_openai_vllm_and_plain_bodies(body: bytes, expected: str) -> None:
    assert error_message(body) == expected


def test_error_message_is_bounded() -> None:
    text = error_message(b"x" * 10_000)

    assert len(text) == 500
    assert text.endswith("...")


# --- retry_after -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("7", 7.0),
        ("0.25", 0.25),
        ("-3", 0.0),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),  # an HTTP date: the backoff decides
        ("inf", None),
        ("nan", None),
        (None, None),
    ],
)
def test_retry_after_reads_seconds_only(value: str | None, seconds: float | None) -> None:
    assert retry_after(value) == seconds


def test_stream_events_read_content_usage_and_the_end_marker() -> None:
    from ceb.backends._wire import parse_stream_event

    role = parse_stream_event(b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n')
    assert role is not None and role.has_choice and role.text == ""
    tok = parse_stream_event(b'data: {"choices":[{"index":0,"delta":{"content":"{\\"sc"},"finish_reason":null}]}')
    assert tok is not None and tok.text == '{"sc' and tok.finish_reason is None
    last = parse_stream_event(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}')
    assert last is not None and last.text == "" and last.finish_reason == "length"
    usage = parse_stream_event(b'data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}}')
    assert usage is not None and not usage.has_choice and (usage.prompt_tokens, usage.completion_tokens) == (12, 3)
    assert parse_stream_event(b"data: [DONE]") is None
    assert parse_stream_event(b"\n") is None and parse_stream_event(b": ping") is None


def test_a_stream_event_that_is_not_a_chunk_is_refused() -> None:
    from ceb.backends._wire import parse_stream_event

    with pytest.raises(ValueError):
        parse_stream_event(b'data: {"error": {"message": "boom"}}')
    with pytest.raises(TypeError):
        parse_stream_event(b'data: {"choices":[{"index":0,"delta":{"content":3}}]}')
    with pytest.raises(ValueError):
        parse_stream_event(b"data: {not json")
