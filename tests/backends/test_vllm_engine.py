"""The in-process vLLM backend without vLLM: flags, priority, the request body, and replies through a fake handler.

The real engine runs in tests/vllm/test_engine.py; here a fake chat handler stands in for vLLM's
``OpenAIServingChat`` so the mapping of requests, replies and failures is checked in milliseconds.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import pytest

from ceb.backends.base import ChatBackend, ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAITransport
from ceb.backends.scheduling import priority
from ceb.backends.vllm_engine import (
    VLLMEngineTransport,
    _Engine,
    engine_argv,
    settings_args,
    vllm_priority,
)
from ceb.config import BackendConfig, EngineConfig, load_config
from ceb.errors import BackendError, ConfigError, FatalBackendError
from ceb.stages.assembly import build_stages

pytestmark = pytest.mark.anyio

SCHEMA = {"type": "object", "properties": {"score": {"type": "number"}}, "required": ["score"]}


def test_engine_argv_is_the_serve_flags_of_the_set_fields_only() -> None:
    engine = EngineConfig(
        tensor_parallel_size=2,
        gpu_memory_utilization=0.85,
        max_num_seqs=128,
        enable_prefix_caching=False,
        dtype="bfloat16",
        load_format="dummy",
        args=("--block-size", "16"),
    )
    settings = BackendConfig(name="vllm", model="/models/q", engine=engine)
    assert engine_argv(settings) == [
        "--model", "/models/q", "--served-model-name", "/models/q",
        "--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "128",
        "--dtype", "bfloat16", "--load-format", "dummy", "--no-enable-prefix-caching", "--block-size", "16",
    ]  # fmt: skip


def test_settings_args_from_a_table() -> None:
    words = settings_args({"structured_outputs_config": {"backend": "xgrammar"}, "enforce_eager": True, "x": False})
    assert words == ("--structured-outputs-config", '{"backend": "xgrammar"}', "--enforce-eager", "--no-x")
    assert settings_args(["--max-logprobs", 20]) == ("--max-logprobs", "20")


def test_priority_is_inverted_and_only_sent_under_the_priority_policy() -> None:
    assert vllm_priority(37.0, "priority") == -37  # more work left: served earlier by vLLM (lower first)
    assert vllm_priority(2.4, "priority") > vllm_priority(37.0, "priority")
    assert vllm_priority(37.0, "fcfs") == 0


def test_body_is_the_http_backends_body_plus_id_and_priority() -> None:
    request = ChatRequest(
        messages=({"role": "user", "content": "hi"},),
        n=3,
        seed=7,
        logprobs=True,
        top_logprobs=5,
        json_schema=SCHEMA,
        stage="critic",
        extra={"prompt_logprobs": 2, "continue_final_message": False},
    )
    for mode in ("json_schema", "vllm"):
        engine = VLLMEngineTransport(BackendConfig(name="vllm", model="m", structured_output=mode))  # type: ignore[arg-type]
        http = OpenAITransport(BackendConfig(base_url="http://127.0.0.1:1/v1", model="m", structured_output=mode))  # type: ignore[arg-type]
        with priority(12):
            body = engine.body(request, "priority")
        assert body.pop("priority") == -12
        assert body.pop("request_id").startswith("ceb-critic-")
        assert body == http.payload(request)
    asked = ChatRequest(messages=request.messages, extra={"priority": 3})
    assert engine.body(asked, "priority")["priority"] == 3  # an explicit priority is sent as given


@dataclass
class _Error:
    code: int
    message: str


@dataclass
class _ErrorResponse:
    error: _Error


class _Reply:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        assert mode == "json"  # dict keys (prompt token ids) as strings, as over HTTP
        return self.doc


class _Request:
    @staticmethod
    def model_validate(body: dict[str, Any]) -> dict[str, Any]:
        if "bogus" in body:
            raise ValueError("unknown field bogus")
        return body


class _Handler:
    def __init__(self, outcome: Any) -> None:
        self.outcome = outcome
        self.bodies: list[dict[str, Any]] = []

    async def create_chat_completion(self, request: dict[str, Any], raw_request: None) -> Any:
        self.bodies.append(request)
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


class _Dead(Exception):
    pass


def _backend(outcome: Any, policy: str = "fcfs") -> tuple[ChatBackend, _Handler]:
    engine = VLLMEngineTransport(BackendConfig(name="vllm", model="tiny"))
    handler = _Handler(outcome)
    engine._engine = _Engine(None, handler, _Request, _ErrorResponse, policy, 0.0, dead=(_Dead,))  # type: ignore[arg-type]
    return ChatBackend(engine, retry=RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0)), handler


REPLY = {
    "model": "tiny",
    "choices": [
        {"index": 1, "message": {"content": '{"score": 0.2}'}, "logprobs": None},
        {
            "index": 0,
            "message": {"content": '{"score": 0.9}'},
            "logprobs": {
                "content": [{"token": "{", "logprob": -0.5, "top_logprobs": [{"token": "{", "logprob": -0.5}]}]
            },
        },
    ],
    "usage": {"prompt_tokens": 11, "completion_tokens": 9},
    "prompt_logprobs": [None, {"42": {"logprob": -1.0, "rank": 3, "decoded_token": "hi"}}],
}


async def test_reply_reads_as_over_http() -> None:
    backend, handler = _backend(_Reply(REPLY), policy="priority")
    with priority(5):
        response = await backend.complete(
            ChatRequest(messages=({"role": "user", "content": "x"},), n=2, extra={"prompt_logprobs": 1})
        )
    c = response.completion
    assert c.texts == ('{"score": 0.9}', '{"score": 0.2}')  # by choice index
    assert (c.prompt_tokens, c.completion_tokens, c.model) == (11, 9, "tiny")
    assert c.logprobs is not None and c.logprobs[0] is not None and c.logprobs[0][0].logprob == -0.5
    assert c.prompt_logprobs is not None and c.prompt_logprobs[0] is None
    assert c.prompt_logprobs[1] is not None and c.prompt_logprobs[1].rank == 3
    assert handler.bodies[0]["priority"] == -5 and handler.bodies[0]["n"] == 2


async def test_refusals_are_not_retried_and_engine_errors_are() -> None:
    backend, handler = _backend(_ErrorResponse(_Error(400, "prompt too long")))
    with pytest.raises(BackendError, match="400 from the engine: prompt too long"):
        await backend.complete(ChatRequest(messages=({"role": "user", "content": "x"},)))
    assert len(handler.bodies) == 1
    backend, handler = _backend(_ErrorResponse(_Error(500, "boom")))
    with pytest.raises(Exception, match="500 from the engine: boom"):
        await backend.complete(ChatRequest(messages=({"role": "user", "content": "x"},)))
    assert len(handler.bodies) == 2  # retried once (max_attempts=2)
    backend, handler = _backend(_Dead("engine core gone"))
    with pytest.raises(FatalBackendError, match="engine died"):
        await backend.complete(ChatRequest(messages=({"role": "user", "content": "x"},)))
    backend, handler = _backend(_Reply(REPLY))
    with pytest.raises(BackendError, match="unknown field bogus"):
        await backend.complete(ChatRequest(messages=({"role": "user", "content": "x"},), extra={"bogus": 1}))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_backend_without_vllm_says_how_to_install_it() -> None:
    config = load_config(overrides={"backend": {"name": "vllm", "model": "/models/q"}})
    with pytest.raises(ConfigError, match="needs vLLM in ceb's environment.*install-vllm"):
        build_stages(config)


def test_backend_vllm_needs_a_model() -> None:
    with pytest.raises(ConfigError, match="needs backend.model"):
        build_stages(load_config(overrides={"backend": {"name": "vllm"}}))


def test_engine_settings_come_from_the_config_section(monkeypatch: pytest.MonkeyPatch) -> None:
    import ceb.backends.vllm_engine as mod

    monkeypatch.setattr(mod, "require_vllm", lambda: None)
    config = load_config(
        overrides={
            "backend": {
                "name": "vllm",
                "model": "/models/q",
                "max_concurrency": 32,
                "engine": {"max_num_seqs": 32, "enable_prefix_caching": True, "args": {"max_logprobs": 20}},
            }
        }
    )
    stages = build_stages(config)
    assert stages.chat is not None and isinstance(stages.chat.transport, VLLMEngineTransport)
    argv = engine_argv(stages.chat.transport.settings)
    assert argv[-5:] == ["--max-num-seqs", "32", "--enable-prefix-caching", "--max-logprobs", "20"]
    assert stages.chat.max_concurrency == 32


@pytest.mark.parametrize(
    ("given", "slots", "max_num_seqs"),
    [
        ({"engine": {"max_num_seqs": 16}}, 16, 16),  # ceb's slots follow the engine's batch
        ({"max_concurrency": 24}, 24, None),  # the engine's batch stays vLLM's (one way only)
        ({"max_concurrency": 24, "engine": {"max_num_seqs": 16}}, 24, 16),  # both given: both kept
        ({}, 64, None),  # neither: ceb's default slots, vLLM's own default batch
    ],
)
def test_the_engines_slots_are_derived_from_max_num_seqs_when_not_given(
    given: dict[str, Any], slots: int, max_num_seqs: int | None
) -> None:
    backend = load_config(overrides={"backend": {"name": "vllm", "model": "/m", **given}}).backend
    assert (backend.max_concurrency, backend.engine.max_num_seqs) == (slots, max_num_seqs)
    recorded = load_config(base={"backend": backend.model_dump(mode="json")}).backend  # a resume reads the same
    assert (recorded.max_concurrency, recorded.engine.max_num_seqs) == (slots, max_num_seqs)
    http = load_config(overrides={"backend": {"name": "openai", **given}}).backend
    assert http.engine.max_num_seqs == given.get("engine", {}).get("max_num_seqs")  # only the engine derives


class _Echo:
    """Answers like vLLM: a valid reply to the schema, ``n`` choices, log-probs and prompt log-probs when asked."""

    def __init__(self) -> None:
        self.vllm_config = type("C", (), {"cache_config": type("K", (), {"enable_prefix_caching": True})()})()

    async def create_chat_completion(self, body: dict[str, Any], raw_request: None) -> Any:
        text = '{"score": 0.5, "reason": "ok"}' if "structured_outputs" in body else "fine"
        lp = {"content": [{"token": "f", "logprob": -0.1, "top_logprobs": [{"token": "f", "logprob": -0.1}]}]}
        choices = [
            {"index": i, "message": {"content": text}, "logprobs": lp if body.get("logprobs") else None}
            for i in range(body.get("n", 1))
        ]
        doc: dict[str, Any] = {"model": "tiny", "choices": choices}
        if body.get("prompt_logprobs"):
            doc["prompt_logprobs"] = [None, {"5": {"logprob": -2.0, "rank": 1, "decoded_token": "x"}}]
        return _Reply(doc)

    @property
    def engine_client(self) -> Any:
        return self


async def test_probe_engine_reports_what_the_engine_answers() -> None:
    from ceb.backends.probe import probe_engine

    engine = VLLMEngineTransport(BackendConfig(name="vllm", model="tiny", structured_output="vllm"))
    started: list[bool] = []

    async def start() -> None:
        started.append(True)
        engine._engine = _Engine(None, _Echo(), _Request, _ErrorResponse, "fcfs", 1.5)  # type: ignore[arg-type]

    engine.start = start  # type: ignore[method-assign]
    engine.aclose = _noop  # type: ignore[method-assign]
    report = await probe_engine(ChatBackend(engine))
    outcome = {c.name: c.outcome for c in report.checks}
    assert started == [True] and report.usable and report.base_url == "vllm-engine:tiny"
    for name in ("start", "chat", "structured_output", "n", "logprobs", "prompt_logprobs", "prefix_cache"):
        assert outcome[name] == "ok", report.checks


async def _noop() -> None:
    return None


def test_doctor_backend_vllm_without_vllm_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from ceb.cli import app

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here")
    result = CliRunner().invoke(app, ["doctor", "--backend", "vllm", "--model", "/models/q"])
    assert result.exit_code == 2
    assert "needs vLLM in ceb's environment" in result.output
