"""``ceb serve`` over a real loopback socket: the endpoints, hostile input, the token and the size limit."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from aiohttp.test_utils import TestServer

from ceb.config import GateConfig, RunConfig, ServeConfig
from ceb.errors import ConfigError
from ceb.gate import Gate
from ceb.serve.app import check_bind, make_app

pytestmark = pytest.mark.anyio

TOKEN = "s3cret-token"


class Client:
    def __init__(self, server: TestServer, session: aiohttp.ClientSession) -> None:
        self.server, self.session = server, session

    async def post(self, path: str, body: Any = None, *, data: bytes | None = None, **kw: Any) -> tuple[int, Any]:
        async with self.session.post(self.server.make_url(path), json=body, data=data, **kw) as r:
            return r.status, await r.json() if r.content_type == "application/json" else await r.text()

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        async with self.session.get(self.server.make_url(path), **kw) as r:
            return r.status, await r.json() if r.content_type == "application/json" else await r.text()


async def _client(tmp_path: Path, *, max_streams: int = 1024, **app_kw: Any) -> AsyncIterator[Client]:
    config = RunConfig(gate=GateConfig(allow=0.6, block=0.3, max_streams=max_streams))
    async with Gate(config, state_dir=tmp_path / "state") as gate:
        server = TestServer(make_app(gate, **app_kw), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                yield Client(server, session)
        finally:
            await server.close()


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Client]:
    async for c in _client(tmp_path, settings=ServeConfig(max_body_bytes=64 * 1024)):
        yield c


def _score(**over: Any) -> dict[str, Any]:
    return {
        "stream": "agent",
        "trajectory_id": "run-1",
        "task": "list the files",
        "domain": "shell",
        "action": "ls",
    } | over


def _finished(tid: str = "run-1") -> dict[str, Any]:
    steps = [
        {"state": "", "action": "ls", "observation": "a.txt", "label": 1},
        {"state": "a.txt", "action": "cat a.txt", "observation": "hi"},
    ]
    return {"stream": "agent", "trajectory": {"id": tid, "task": "list the files", "domain": "shell", "steps": steps}}


async def test_score_then_finish_then_score_sees_the_new_bank(client: Client) -> None:
    status, first = await client.post("/v1/score", _score())
    assert status == 200 and first["score"] == 0.5 and first["decision"] == "review" and first["bank_version"] == 0
    status, ack = await client.post("/v1/trajectories", _finished())
    assert status == 202 and ack == {"stream": "agent", "trajectory_id": "run-1", "seq": 1, "durable": True}
    for _ in range(200):
        _, stats = await client.get("/v1/streams/agent")
        if stats["streams"]["agent"]["bank_version"] == 1:
            break
    assert stats["streams"]["agent"]["records"] == 2
    status, second = await client.post("/v1/score", _score(trajectory_id="run-2"))
    assert second["bank_version"] == 1 and {p["trajectory"] for p in second["precedents"]} == {"run-1"}
    assert second["decision"] == "allow" and 0 < second["latency_s"] < 5
    # Every field docs/gate.md lists, overhead_s (a property of Confidence) among them.
    assert second["overhead_s"] == pytest.approx(max(0.0, second["latency_s"] - second["critic_s"]))


async def test_a_tool_call_and_openai_messages_are_read_as_actions_and_history(client: Client) -> None:
    messages = [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": "list the files"},
        {
            "role": "assistant",
            "content": "look first",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    ]
    action = {"name": "bash", "arguments": {"command": "ls"}}
    status, c = await client.post("/v1/score", _score(action=action, messages=messages))
    assert status == 200 and c["step"] == 1 and c["repetition_flag"] is True  # the same call as the history's


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"trajectory_id": "r", "task": "t", "domain": "shell", "action": "ls"}, "stream"),
        (_score(stream="../../etc"), "stream"),
        (_score(action=""), "action"),
        (_score(action={"arguments": {}}), "action.name"),
        (_score(action={"name": "bash", "arguments": 5}), "action.arguments"),
        (_score(action={"name": "bash", "arguments": ["ls"]}), "action.arguments"),
        (
            _score(action={"type": "function", "function": {"name": "bash", "arguments": None}}),
            "action.function.arguments",
        ),
        (
            _score(messages=[{"role": "assistant", "tool_calls": [{"function": {"name": "ls", "arguments": 5}}]}]),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (_score(domain="Web Pages"), "domain"),
        (_score(label=1), "label"),
        (_score(history=[{"state": "", "action": "ls"}]), "history[0].observation"),
        (_score(history="ls"), "history"),
        (_score(actor_logprobs=[0.5]), "actor_logprobs[0]"),
        (_score(messages=[{"role": "tool", "tool_call_id": "zz", "content": "x"}]), "messages[0].tool_call_id"),
        (_score(messages=[{"role": "robot"}]), "messages[0].role"),
        ([1, 2], "<body>"),
    ],
)
async def test_hostile_score_requests_get_a_422_naming_the_field(client: Client, body: Any, field: str) -> None:
    status, err = await client.post("/v1/score", body)
    assert status == 422 and err["field"] == field and field in err["error"], err


@pytest.mark.parametrize(
    ("trajectory", "field"),
    [
        ({"id": "x", "task": "t", "domain": "shell", "steps": []}, "trajectory.steps"),
        (
            {"id": "x", "task": "t", "domain": "shell", "steps": [{"state": "", "action": "ls", "observation": 3}]},
            "trajectory.steps[0].observation",
        ),
        (
            {
                "id": "x",
                "task": "t",
                "domain": "shell",
                "steps": [{"state": "", "action": "ls", "observation": "", "label": 7}],
            },
            "trajectory.steps[0].label",
        ),
        (
            {
                "id": "x",
                "task": "t",
                "domain": "shell",
                "steps": [{"state": "", "action": "ls", "observation": ""}],
                "lable": 1,
            },
            "trajectory.lable",
        ),
    ],
)
async def test_hostile_trajectories_get_a_422_naming_the_field(client: Client, trajectory: Any, field: str) -> None:
    status, err = await client.post("/v1/trajectories", {"stream": "agent", "trajectory": trajectory})
    assert status == 422 and err["field"] == field, err


async def test_bad_json_and_oversized_bodies_are_4xx_never_500(client: Client) -> None:
    status, err = await client.post("/v1/score", data=b"{not json", headers={"Content-Type": "application/json"})
    assert status == 400 and err["field"] == "<body>" and "not valid JSON" in err["error"]
    status, err = await client.post("/v1/score", data=b"\xff\xfe", headers={"Content-Type": "application/json"})
    assert status == 400
    big = _score(state="x" * (128 * 1024))
    status, err = await client.post("/v1/score", big)
    assert status == 413 and "bytes" in err["error"]
    status, _ = await client.get("/v1/streams/nobody")
    assert status == 404


async def test_health_metrics_and_openapi(client: Client) -> None:
    await client.post("/v1/score", _score())
    status, health = await client.get("/health")
    assert status == 200 and health["status"] == "ok" and health["durable"] is True
    status, text = await client.get("/metrics")
    assert status == 200 and 'ceb_gate_decisions_total{decision="review"} 1.0' in text
    assert "ceb_gate_overhead_seconds_bucket" in text and "ceb_gate_bank_records 0.0" in text
    status, doc = await client.get("/openapi.json")
    assert status == 200 and doc["openapi"].startswith("3.1") and set(doc["paths"]) >= {"/v1/score", "/v1/trajectories"}
    assert doc["components"]["schemas"]["ScoreRequest"]["required"][:2] == ["stream", "trajectory_id"]
    tool_call = doc["components"]["schemas"]["ScoreRequest"]["properties"]["action"]["oneOf"][1]
    assert tool_call["properties"]["arguments"] == {"type": ["object", "string"]}  # what the service accepts


async def test_a_token_is_required_when_set_except_for_health(tmp_path: Path) -> None:
    async for c in _client(tmp_path, token=TOKEN):
        assert (await c.post("/v1/score", _score()))[0] == 401
        assert (await c.post("/v1/score", _score(), headers={"Authorization": "Bearer wrong"}))[0] == 401
        assert (await c.post("/v1/score", _score(), headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 200
        assert (await c.get("/metrics"))[0] == 401
        assert (await c.get("/health"))[0] == 200


def test_binding_beyond_loopback_needs_a_token() -> None:
    check_bind("127.0.0.1", None)
    check_bind("0.0.0.0", TOKEN)
    with pytest.raises(ConfigError, match="bearer token"):
        check_bind("0.0.0.0", None)


async def test_a_new_stream_beyond_max_streams_gets_a_409_and_the_others_keep_working(tmp_path: Path) -> None:
    async for c in _client(tmp_path, max_streams=2):
        assert (await c.post("/v1/score", _score(stream="a")))[0] == 200
        assert (await c.post("/v1/trajectories", _finished() | {"stream": "b"}))[0] == 202
        status, err = await c.post("/v1/score", _score(stream="c"))
        assert status == 409 and err["field"] == "stream" and "gate.max_streams = 2" in err["error"], err
        status, err = await c.post("/v1/trajectories", _finished() | {"stream": "c"})
        assert status == 409 and err["field"] == "stream"
        assert (await c.post("/v1/score", _score(stream="b")))[0] == 200
        assert (await c.post("/v1/trajectories", _finished() | {"stream": "a"}))[0] == 202
        _, stats = await c.get("/v1/streams")
        assert sorted(stats["streams"]) == ["a", "b"]


async def _post_with_headers(c: Client, body: Any) -> tuple[int, Any, str | None]:
    async with c.session.post(c.server.make_url("/v1/trajectories"), json=body) as r:
        return r.status, await r.json(), r.headers.get("Idempotent-Replayed")


async def _banked(c: Client, version: int) -> dict[str, Any]:
    for _ in range(200):
        _, stats = await c.get("/v1/streams/agent")
        if stats["streams"]["agent"]["bank_version"] == version:
            break
        await anyio.sleep(0.01)
    return dict(stats["streams"]["agent"])


async def test_a_trajectory_sent_twice_gets_the_same_202_and_is_banked_once(tmp_path: Path) -> None:
    async for c in _client(tmp_path):
        first = await _post_with_headers(c, _finished())
        again = await _post_with_headers(c, _finished())
        assert first == (202, {"stream": "agent", "trajectory_id": "run-1", "seq": 1, "durable": True}, None)
        assert again == (*first[:2], "true")
        changed = _finished()
        changed["trajectory"]["steps"][1]["observation"] = "something else"
        status, err = await c.post("/v1/trajectories", changed)
        assert status == 409 and err["field"] == "trajectory.id" and "seq 1" in err["error"], err
        stats = await _banked(c, 1)
        assert (stats["records"], stats["accepted"], stats["replayed"]) == (2, 1, 1)
        _, text = await c.get("/metrics")
        assert "ceb_gate_trajectories_accepted_total 1.0" in text and "ceb_gate_trajectories_replayed_total 1.0" in text
    async for c in _client(tmp_path):  # a restart from the state directory still knows the id
        assert await _post_with_headers(c, _finished()) == (*first[:2], "true")
        assert (await c.post("/v1/trajectories", changed))[0] == 409
        assert (await _post_with_headers(c, _finished("run-2")))[:2] == (
            202,
            first[1] | {"trajectory_id": "run-2", "seq": 2},
        )
        stats = await _banked(c, 2)
        assert (stats["records"], stats["accepted"]) == (4, 2)


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


async def test_a_full_disk_answers_507_acknowledges_nothing_and_a_retry_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async for c in _client(tmp_path):
        with monkeypatch.context() as m:
            m.setattr(os, "fsync", _no_space)
            status, err = await c.post("/v1/trajectories", _finished())
        assert status == 507 and "No space left on device" in err["error"] and "nothing was accepted" in err["error"]
        _, stats = await c.get("/v1/streams")
        assert all(s["accepted"] == 0 for s in stats["streams"].values())
        assert await _post_with_headers(c, _finished()) == (
            202,
            {"stream": "agent", "trajectory_id": "run-1", "seq": 1, "durable": True},
            None,  # the first acknowledgement, not a replay of one never given
        )
        _, text = await c.get("/metrics")
        assert 'status="507"' in text and "ceb_gate_trajectories_accepted_total 1.0" in text


async def test_health_says_when_the_state_cannot_be_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    state.mkdir()
    async for c in _client(tmp_path):
        status, health = await c.get("/health")
        assert status == 200 and health["status"] == "ok" and health["state"] is None
        with monkeypatch.context() as m:
            m.setattr(os, "write", _no_space)
            status, health = await c.get("/health")
        assert status == 503 and health["status"] == "error"
        assert health["state"] == f"cannot write the state directory {state}: No space left on device"
        assert (await c.get("/health"))[0] == 200  # space came back
        shutil.rmtree(state)  # an operator's mistake, for real: a file where the directory was
        state.write_text("")
        status, health = await c.get("/health")
        assert status == 503 and health["state"].endswith("Not a directory"), health
        state.unlink()


@pytest.mark.parametrize("where", ["flag", "config file"])
def test_credentials_in_the_critic_url_are_refused_in_one_line_that_does_not_show_them(
    tmp_path: Path, where: str
) -> None:
    from typer.testing import CliRunner

    from ceb.cli import app

    url = "http://u:pw-s3cret@127.0.0.1:9/v1"
    config = tmp_path / "ceb.toml"
    config.write_text(f'[backend]\nbase_url = "{url}"\nmodel = "m"\n')
    given = ["--base-url", url, "--model", "m"] if where == "flag" else ["--config", str(config)]
    result = CliRunner().invoke(app, ["serve", "--in-memory", "--port", "0", *given])
    assert result.exit_code == 2, result.output
    assert result.output.strip().count("\n") == 0 and "Traceback" not in result.output
    assert "carries credentials" in result.output and "127.0.0.1:9/v1" in result.output
    assert "pw-s3cret" not in result.output and "u:" not in result.output
