"""The plain HTTP client against ``ceb serve`` started on loopback in the test (offline backend)."""

from __future__ import annotations

import socket
import urllib.error
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from aiohttp.test_utils import TestServer

from ceb import Gate
from ceb.data.chat import tool_action
from ceb.serve.app import make_app
from tests.examples import load_example

ex = load_example("gate_http")
pytestmark = pytest.mark.anyio


async def _serve(tmp_path: Path, token: str | None = None) -> AsyncIterator[tuple[Gate, str]]:
    async with Gate(state_dir=tmp_path / "state") as gate:
        server = TestServer(make_app(gate, token=token), host="127.0.0.1")
        await server.start_server()
        try:
            yield gate, str(server.make_url("")).rstrip("/")
        finally:
            await server.close()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[Gate, str]]:
    async for s in _serve(tmp_path):
        yield s


async def test_the_client_gets_scores_a_lower_one_for_a_repeat_and_an_acknowledged_seq(
    served: tuple[Gate, str],
) -> None:
    gate, url = served
    # urllib blocks: it runs in a worker thread while this event loop serves the request.
    answers, ack = await anyio.to_thread.run_sync(ex.main, url)
    assert [c["decision"] for c in answers] == ["allow", "allow", "review"]
    assert answers[2]["repetition_flag"] is True and answers[2]["score"] < answers[1]["score"]
    assert [c["step"] for c in answers] == [0, 1, 2]  # the history it sent
    assert ack == {"stream": "http-agent", "trajectory_id": "run-1", "seq": 1, "durable": True}
    await gate.flush("http-agent")
    assert gate.stats("http-agent")["streams"]["http-agent"]["records"] == 2


async def test_the_bearer_token_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async for _, url in _serve(tmp_path, token="s3cret"):
        call = {"name": "bash", "arguments": {"command": "ls"}}
        with pytest.raises(urllib.error.HTTPError) as refused:
            await anyio.to_thread.run_sync(ex.score, url, "run-1", call, [])
        refused.value.close()  # an HTTPError holds the response (and its socket) open
        assert refused.value.code == 401
        monkeypatch.setenv("CEB_SERVE_TOKEN", "s3cret")
        assert (await anyio.to_thread.run_sync(ex.score, url, "run-1", call, []))["decision"] == "allow"


@pytest.mark.parametrize(
    "call",
    [
        {"name": "bash", "arguments": {"command": "ls"}},
        {"name": "search", "arguments": {"q": "café ☕", "filters": {"z": [1, 2.5, None], "a": True}}},
        {"name": "noop", "arguments": {}},
    ],
)
def test_the_clients_action_text_is_the_services_reading_of_a_tool_call(call: dict[str, object]) -> None:
    assert ex.action_text(call) == tool_action(call, "action")


async def test_the_client_waits_for_a_service_that_is_still_starting(tmp_path: Path) -> None:
    # Start the client first, then the service on the port it was told: it must wait, not fail.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    async with Gate(state_dir=tmp_path / "state") as gate, anyio.create_task_group() as tg:
        result: dict[str, Any] = {}

        async def client() -> None:
            result["answers"], result["ack"] = await anyio.to_thread.run_sync(ex.main, url)

        tg.start_soon(client)
        await anyio.sleep(0.5)  # the client is polling /health by now
        server = TestServer(make_app(gate), host="127.0.0.1", port=port)
        await server.start_server()
        try:
            with anyio.fail_after(60):
                while "ack" not in result:
                    await anyio.sleep(0.05)
        finally:
            await server.close()
    assert result["ack"]["seq"] == 1 and len(result["answers"]) == 3


def test_no_service_is_one_clear_error_naming_the_url() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"no ceb serve at http://127.0.0.1:{port} after 0 s"):
        ex.wait_until_ready(f"http://127.0.0.1:{port}", timeout_s=0.3)
