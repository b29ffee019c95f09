"""``/health`` says when the critic is gone: degraded (503, why, since when) after consecutive failures, ok again."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp.test_utils import TestServer

from ceb.config import BackendConfig, GateConfig, RunConfig
from ceb.gate import Gate
from ceb.serve.app import make_app
from tests.serve.test_kill import _start
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

SCORE = {"stream": "agent", "trajectory_id": "run-1", "task": "list the files", "domain": "shell", "action": "ls"}


def _config(base_url: str, model: str = "m", **gate: Any) -> RunConfig:
    backend = BackendConfig(name="openai", base_url=base_url, model=model, max_attempts=1, backoff_s=0)
    return RunConfig(backend=backend, gate=GateConfig(degraded_after=2, **gate))


def _dead_url() -> str:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


async def _get(session: aiohttp.ClientSession, server: TestServer, path: str, body: Any = None) -> tuple[int, Any]:
    method = session.post if body is not None else session.get
    async with method(server.make_url(path), json=body) as r:
        return r.status, await r.json()


async def test_consecutive_critic_failures_make_health_degraded_and_a_passing_check_makes_it_ok(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    up = {"now": False}
    openai_server.answer_preflight = False  # the background check asks the responder too
    openai_server.responder = lambda body, i: Reply('{"score": 0.7, "reason": "ok"}') if up["now"] else Reply.error(500)
    config = _config(openai_server.base_url, openai_server.model, probe_every_s=0.05)
    async with Gate(config, state_dir=tmp_path / "state") as gate:
        server = TestServer(make_app(gate), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                status, health = await _get(session, server, "/health")
                assert status == 200 and health["status"] == "ok" and health["critic"]["status"] == "ok"

                status, c = await _get(session, server, "/v1/score", SCORE)
                assert status == 200 and c["status"] == "failed" and c["decision"] == "review"
                status, health = await _get(session, server, "/health")
                assert status == 200 and health["critic"]["consecutive_failures"] == 1  # one failure is not an outage

                await _get(session, server, "/v1/score", SCORE)
                status, health = await _get(session, server, "/health")
                critic = health["critic"]
                assert status == 503 and health["status"] == "degraded" and health["state"] is None
                assert critic["status"] == "degraded" and critic["consecutive_failures"] == 2
                assert critic["endpoint"] == openai_server.base_url and critic["degraded_after"] == 2
                assert "500" in critic["last_error"] and critic["since"].endswith("Z")
                assert critic["reason"].startswith(f"critic endpoint {openai_server.base_url}: the last 2 scores")

                asked = len(openai_server.requests)
                status, c = await _get(session, server, "/v1/score", SCORE)
                assert status == 200 and c["status"] == "failed" and c["decision"] == "review"
                not_asked = f"critic not asked while degraded: critic endpoint {openai_server.base_url}"
                assert c["error"].startswith(not_asked)
                assert "last error: " in c["error"] and "500" in c["error"]
                assert len(openai_server.requests) - asked <= 2  # the background checks only, never the step

                up["now"] = True
                with anyio.fail_after(30):  # the background check notices
                    while gate.critic_health.degraded:
                        await anyio.sleep(0.02)
                status, health = await _get(session, server, "/health")
                assert status == 200 and health["status"] == "ok"
                status, c = await _get(session, server, "/v1/score", SCORE)
                assert c["status"] == "scored" and c["score"] == pytest.approx(0.7)
                assert health["critic"] | {"endpoint": None} == {
                    "status": "ok",
                    "reason": None,
                    "endpoint": None,
                    "consecutive_failures": 0,
                    "degraded_after": 2,
                    "last_error": None,
                    "since": None,
                }
        finally:
            await server.close()


async def test_the_start_up_check_names_an_unreachable_endpoint_and_the_gate_starts_degraded(tmp_path: Path) -> None:
    url = _dead_url()
    async with Gate(_config(url), state_dir=tmp_path / "state") as gate:
        problem = await gate.check_critic()
        assert problem is not None and url in problem and "connection refused" in problem
        assert gate.critic_health.degraded and gate.critic_health.consecutive_failures == 0
        assert gate.critic_health.reason() == (
            f"critic endpoint {url}: failed its last check, and no step scored since (last_error says why)"
        )
        assert gate.critic_health.last_error == problem


async def test_the_start_up_check_passes_on_a_live_endpoint_and_has_nothing_to_check_offline(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    openai_server.responder = lambda body, i: Reply("ok")
    async with Gate(_config(openai_server.base_url, openai_server.model)) as gate:
        assert await gate.check_critic() is None and not gate.critic_health.degraded
    async with Gate(RunConfig()) as gate:
        assert await gate.check_critic() is None and gate.critic_health.endpoint is None


async def test_ceb_serve_warns_naming_an_unreachable_critic_serves_anyway_and_says_degraded(tmp_path: Path) -> None:
    url = _dead_url()
    log = tmp_path / "serve.log"
    proc, base = _start(tmp_path / "state", log, "--backend", "openai", "--base-url", url, "--model", "m")
    try:
        async with aiohttp.ClientSession() as session, session.get(f"{base}/health") as r:
            status, health = r.status, await r.json()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    (warning,) = [line for line in log.read_text().splitlines() if "critic endpoint cannot be reached" in line]
    assert f"endpoint={url}" in warning and "connection refused" in warning
    assert status == 503 and health["status"] == "degraded" and health["critic"]["endpoint"] == url


async def test_an_endpoint_that_refuses_the_model_fails_the_step_and_counts_never_a_500(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    # Up at start under another model name, say: the check passed, then every request is refused (404).
    openai_server.responder = lambda body, i: Reply.error(404, body={"error": {"message": "no such model"}})
    async with Gate(_config(openai_server.base_url, openai_server.model)) as gate:
        server = TestServer(make_app(gate), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(2):
                    status, c = await _get(session, server, "/v1/score", SCORE)
                    assert status == 200 and c["status"] == "failed" and c["decision"] == "review", c
                    assert c["error"].startswith("endpoint refused the request: 404") and "no such model" in c["error"]
                status, health = await _get(session, server, "/health")
        finally:
            await server.close()
    assert status == 503 and health["critic"]["consecutive_failures"] == 2


async def test_a_stalled_critic_costs_a_score_nothing_while_degraded_and_is_asked_again_once_it_answers(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    up = {"now": False}
    openai_server.answer_preflight = False
    stalled, answer = Reply(delay_s=3600), Reply('{"score": 0.7, "reason": "ok"}')
    openai_server.responder = lambda body, i: answer if up["now"] else stalled
    backend = BackendConfig(
        name="openai", base_url=openai_server.base_url, model=openai_server.model, max_attempts=2, timeout_s=60
    )
    config = RunConfig(backend=backend, gate=GateConfig(check_timeout_s=0.5, probe_every_s=0.1))
    async with Gate(config, state_dir=tmp_path / "state") as gate:
        problem = await gate.check_critic()  # as ceb serve does at start
        assert problem is not None and "did not answer within 0.5 s" in problem
        server = TestServer(make_app(gate), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                with anyio.fail_after(30):  # asking the critic would hold each score 2 x 60 s
                    for _ in range(3):
                        status, c = await _get(session, server, "/v1/score", SCORE)
                        assert status == 200 and c["score"] is None and c["decision"] == "review", c
                        assert c["status"] == "failed" and c["error"].startswith("critic not asked while degraded")
                        assert "failed its last check" in c["error"] and "did not answer within" in c["error"]
                up["now"] = True
                with anyio.fail_after(30):
                    while gate.critic_health.degraded:
                        await anyio.sleep(0.02)
                status, c = await _get(session, server, "/v1/score", SCORE)
                assert c["status"] == "scored" and c["score"] == pytest.approx(0.7)
                status, health = await _get(session, server, "/health")
                assert status == 200 and health["critic"]["status"] == "ok"
        finally:
            await server.close()
