"""Who may call ``ceb serve`` and how long a client may hold it: hosts, origins, content type, timeouts, connections.

Each test sends what a hostile web page or a stalled client sends, over a real loopback socket.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import orjson
import pytest
from aiohttp.test_utils import TestServer

from ceb.config import RunConfig, ServeConfig
from ceb.gate import Gate
from ceb.serve.app import make_app, run_server

pytestmark = pytest.mark.anyio

FINISHED = {
    "stream": "agent",
    "trajectory": {
        "id": "run-1",
        "task": "list the files",
        "domain": "shell",
        "steps": [{"state": "", "action": "ls", "observation": "a.txt"}],
    },
}


@asynccontextmanager
async def _app(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Gate, str]]:
    async with Gate(RunConfig(), state_dir=tmp_path / "state") as gate:
        server = TestServer(make_app(gate, settings=ServeConfig(**settings)), host="127.0.0.1")
        await server.start_server()
        try:
            yield gate, str(server.make_url("")).rstrip("/")
        finally:
            await server.close()


async def _send(method: str, url: str, **kw: Any) -> tuple[int, Any, Any]:
    async with aiohttp.ClientSession() as session, session.request(method, url, **kw) as r:
        body = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, body, r.headers


async def test_a_cross_site_simple_post_and_a_rebound_host_are_refused_and_nothing_is_banked(tmp_path: Path) -> None:
    async with _app(tmp_path) as (gate, url):
        simple = {"Origin": "http://evil.example", "Content-Type": "text/plain"}
        status, err, _ = await _send("POST", f"{url}/v1/trajectories", data=orjson.dumps(FINISHED), headers=simple)
        assert status == 403 and err["field"] == "Origin" and "serve.allowed_origins" in err["error"]
        status, err, _ = await _send(
            "POST", f"{url}/v1/trajectories", data=orjson.dumps(FINISHED), headers={"Content-Type": "text/plain"}
        )
        assert status == 415 and "application/json" in err["error"]
        status, err, _ = await _send("GET", f"{url}/v1/streams", headers={"Host": "evil.example"})
        assert status == 421 and err["field"] == "Host"
        status, err, _ = await _send("GET", f"{url}/health", headers={"Host": "evil.example:80"})
        assert status == 421
        assert gate.stats()["streams"] == {}  # nothing was banked

        port = url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
            assert (await _send("GET", f"{url}/v1/streams", headers={"Host": host}))[0] == 200, host
        assert (await _send("GET", f"{url}/v1/streams", headers={"Host": f"localhost:{int(port) + 1}"}))[0] == 421
        assert (await _send("POST", f"{url}/v1/trajectories", json=FINISHED))[0] == 202  # the agent's own client


async def test_configured_hosts_and_origins_are_answered_with_cors_headers(tmp_path: Path) -> None:
    origin = "https://app.example.com"
    async with _app(tmp_path, allowed_hosts=("Gate.example.com",), allowed_origins=(origin,)) as (_, url):
        status, _, headers = await _send("GET", f"{url}/v1/streams", headers={"Host": "gate.example.com:8377"})
        assert status == 200 and "Access-Control-Allow-Origin" not in headers
        asks = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        status, _, headers = await _send("OPTIONS", f"{url}/v1/trajectories", headers=asks)
        assert status == 204 and headers["Access-Control-Allow-Origin"] == origin
        assert "Content-Type" in headers["Access-Control-Allow-Headers"]
        status, _, headers = await _send("POST", f"{url}/v1/trajectories", json=FINISHED, headers={"Origin": origin})
        assert status == 202 and headers["Access-Control-Allow-Origin"] == origin
        evil = {"Origin": origin + ".evil"}
        assert (await _send("POST", f"{url}/v1/trajectories", json=FINISHED, headers=evil))[0] == 403


@asynccontextmanager
async def _served(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[str, int]]:
    """``run_server`` (the server ``ceb serve`` runs) on a free loopback port: ``(host, port)``."""
    urls: list[str] = []
    listening = anyio.Event()

    def ready(url: str) -> None:
        urls.append(url)
        listening.set()

    config = RunConfig(serve=ServeConfig(**settings))
    async with Gate(config, state_dir=tmp_path / "state") as gate, anyio.create_task_group() as tg:
        tg.start_soon(lambda: run_server(gate, "127.0.0.1", 0, ready=ready))
        await listening.wait()
        yield "127.0.0.1", int(urls[0].rsplit(":", 1)[1])
        tg.cancel_scope.cancel()


async def _closed_after(stream: anyio.abc.SocketStream, bound_s: float) -> tuple[float, bytes]:
    """Seconds until the server closes ``stream`` (within ``bound_s``, else the test fails) and what it sent."""
    began, got = time.monotonic(), b""
    with anyio.fail_after(bound_s):
        while True:
            try:
                chunk = await stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return time.monotonic() - began, got
            got += chunk


async def test_a_stalled_client_is_dropped_in_time_and_others_are_answered_meanwhile(tmp_path: Path) -> None:
    async with _served(tmp_path, header_timeout_s=0.5, body_timeout_s=0.5) as (host, port):
        head = f"POST /v1/score HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
        async with await anyio.connect_tcp(host, port) as headers_stalled:
            await headers_stalled.send(head)  # the headers never end
            async with await anyio.connect_tcp(host, port) as body_stalled:
                await body_stalled.send(head + b"Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{")
                status, _, _ = await _send("GET", f"http://{host}:{port}/health")
                assert status == 200  # answered while both stall
                _, sent = await _closed_after(body_stalled, bound_s=20)
                assert sent.startswith(b"HTTP/1.1 408") and b"serve.body_timeout_s" in sent
            _, sent = await _closed_after(headers_stalled, bound_s=20)
            assert sent == b""
        async with await anyio.connect_tcp(host, port) as idle:  # never sends a byte
            await _closed_after(idle, bound_s=20)


async def test_a_stalled_body_holds_its_connection_for_the_body_timeout_and_a_second_more(tmp_path: Path) -> None:
    # With the body timeout as aiohttp's lingering time, the connection was held twice the timeout (8 s here).
    async with _served(tmp_path, header_timeout_s=60, body_timeout_s=4) as (host, port):
        head = f"POST /v1/score HTTP/1.1\r\nHost: {host}:{port}\r\n".encode()
        async with await anyio.connect_tcp(host, port) as body_stalled:
            await body_stalled.send(head + b"Content-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{")
            held_s, sent = await _closed_after(body_stalled, bound_s=20)
    assert sent.startswith(b"HTTP/1.1 408") and 4 <= held_s < 6.5, held_s


async def test_connections_beyond_the_cap_get_a_503_saying_so(tmp_path: Path) -> None:
    async with _served(tmp_path, max_connections=1, header_timeout_s=60) as (host, port):
        async with await anyio.connect_tcp(host, port) as holder:
            await holder.send(f"GET /health HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())  # holds its connection
            await anyio.sleep(0.2)
            status, err, headers = await _send("GET", f"http://{host}:{port}/v1/streams")
            assert status == 503 and "serve.max_connections (1)" in err["error"] and headers["Connection"] == "close"
        for _ in range(50):  # the holder's connection is gone once the server sees it closed
            await anyio.sleep(0.1)
            if (await _send("GET", f"http://{host}:{port}/v1/streams"))[0] == 200:
                break
        else:
            pytest.fail("the gate kept refusing after the connection over the cap closed")
