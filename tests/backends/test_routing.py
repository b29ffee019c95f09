"""Replica affinity (rendezvous homes, overload fallback, session header) and vLLM's server-side priority."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from ceb.backends.base import ChatBackend, ChatRequest, Completion, RetryPolicy, TransientError, Transport
from ceb.backends.openai import SESSION_HEADER, OpenAIBackend, OpenAITransport
from ceb.backends.scheduling import EndpointLimits, home_endpoint, lane, priority, server_priority
from ceb.backends.scripted import ScriptedChat
from ceb.backends.transport import StreamChunk
from ceb.config import BackendConfig, load_config
from ceb.pipeline.runner import run_scoring
from ceb.stages.assembly import Stages
from ceb.stages.critic import LLMCritic
from ceb.stages.hindsight import LLMHindsight
from ceb.stages.templates import PromptSet
from tests.support.builders import default_reply, step, trajectory
from tests.support.openai_server import Reply, serve_openai

pytestmark = pytest.mark.anyio

MESSAGES = ({"role": "user", "content": "score this"},)
EPS = ("http://a:1/v1", "http://b:2/v1", "http://c:3/v1")


# --- the mapping onto vLLM's priority field ---------------------------------------------------------------


def test_server_priority_negates_so_the_longest_remaining_chain_is_lowest_and_served_first():
    # vLLM serves the lowest value first (vllm/v1/request.py Request.__lt__); ceb the highest.
    assert server_priority(50) < server_priority(10) < server_priority(1) < server_priority(0) == 0
    assert server_priority(7.0) == -7 and server_priority(2.4) == -2 and server_priority(-3) == 3


def test_server_priority_stays_in_vllms_int64_range():
    assert server_priority(1e300) == -(2**63)
    assert server_priority(float("inf")) == -(2**63)
    assert server_priority(-1e300) == 2**63 - 1
    with pytest.raises(ValueError, match="NaN"):
        server_priority(float("nan"))


# --- rendezvous homes ----------------------------------------------------------------------------------------


def test_a_lane_has_one_home_whatever_the_endpoint_order():
    for key in ("s|0|ceb|", "s|0|static|", "t|1|ceb|x"):
        assert home_endpoint(key, EPS) == home_endpoint(key, tuple(reversed(EPS)))


def test_homes_spread_over_endpoints_and_removing_one_moves_only_its_lanes():
    keys = [f"stream-{i}|0|ceb|" for i in range(300)]
    homes = {k: home_endpoint(k, EPS) for k in keys}
    counts = {e: sum(h == e for h in homes.values()) for e in EPS}
    assert all(60 <= c <= 140 for c in counts.values()), counts
    gone = EPS[1]
    after = {k: home_endpoint(k, (EPS[0], EPS[2])) for k in keys}
    assert all(after[k] == homes[k] for k in keys if homes[k] != gone)


async def test_affinity_keeps_a_lane_home_until_home_is_full_and_another_has_room():
    limits = EndpointLimits()
    key = "lane-1"
    home = home_endpoint(key, EPS[:2])
    other = EPS[1] if home == EPS[0] else EPS[0]
    pick = lambda: limits.pick(EPS[:2], 2, key=key, routing="affinity")  # noqa: E731
    assert pick() == home
    await limits.slots(other, 2).acquire()  # the other replica is busier: affinity does not care
    assert pick() == home
    await limits.slots(home, 2).acquire()
    assert pick() == home  # one of two slots still free at home
    await limits.slots(home, 2).acquire()
    assert pick() == other  # home full, the other has a free slot
    await limits.slots(other, 2).acquire()
    assert pick() == home  # every replica full: wait at home
    # least_outstanding ignores the lane; no lane means least outstanding too.
    limits.slots(other, 2).release()
    assert limits.pick(EPS[:2], 2, key=key, routing="least_outstanding") == other
    assert limits.pick(EPS[:2], 2, key=None, routing="affinity") == other


async def test_backend_sends_each_lanes_requests_to_its_home_with_the_lane_as_session_header():
    reply = Reply('{"score": 0.5}')
    async with serve_openai(lambda b, i: reply) as one, serve_openai(lambda b, i: reply) as two:
        urls = (one.base_url, two.base_url)
        settings = BackendConfig(base_url=urls, model="m", max_concurrency=8)
        keys = [f"stream-{i}" for i in range(8)]
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1)) as backend:
            for key in keys:
                with lane(key):
                    for _ in range(3):
                        await backend.complete(ChatRequest(messages=MESSAGES))
        by_server = {one.base_url: one, two.base_url: two}
        for key in keys:
            home = by_server[home_endpoint(key, urls)]
            away = two if home is one else one
            assert [h[SESSION_HEADER.lower()] for h in home.headers].count(key) == 3
            assert key not in [h.get(SESSION_HEADER.lower()) for h in away.headers]


async def test_least_outstanding_routing_scatters_a_lane_over_replicas():
    reply = Reply('{"score": 0.5}', delay_s=0.05)
    async with serve_openai(lambda b, i: reply) as one, serve_openai(lambda b, i: reply) as two:
        settings = BackendConfig(
            base_url=(one.base_url, two.base_url), model="m", max_concurrency=4, routing="least_outstanding"
        )
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1)) as backend:
            with lane("only-lane"):
                async with anyio.create_task_group() as tg:
                    for _ in range(6):
                        tg.start_soon(backend.complete, ChatRequest(messages=MESSAGES))
        assert len(one.requests) == 3 and len(two.requests) == 3


async def test_no_session_header_when_it_is_turned_off_or_outside_a_lane():
    async with serve_openai(lambda b, i: Reply("x")) as server:
        on = BackendConfig(base_url=server.base_url, model="m")
        off = BackendConfig(base_url=server.base_url, model="m", session_header=None)
        async with OpenAIBackend(on) as a, OpenAIBackend(off) as b:
            await a.complete(ChatRequest(messages=MESSAGES))
            with lane("k"):
                await b.complete(ChatRequest(messages=MESSAGES))
        assert all(SESSION_HEADER.lower() not in h for h in server.headers)


async def test_lanes_carry_their_key_through_every_stage(tmp_path):
    from ceb.backends.scheduling import current_lane

    seen: list[tuple[str, str | None]] = []

    def responder(request: ChatRequest) -> str:
        seen.append((request.stage, current_lane()))
        return default_reply(request)

    chat = ScriptedChat(responder)
    prompts = PromptSet()
    stages = Stages(critic=LLMCritic(chat, prompts), hindsight=LLMHindsight(chat, prompts), chat=chat)
    streams = {name: [trajectory(f"{name}-t", step("ls", "a", label=1))] for name in ("s1", "s2")}
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 2}})
    await run_scoring(streams, config, tmp_path, stages=stages)
    assert sorted(seen) == sorted(
        [("critic", "s1|0|ceb|"), ("critic", "s2|0|ceb|")]
        + [("hindsight", "s1|0|ceb|")] * 2
        + [("hindsight", "s2|0|ceb|")] * 2
    )


# --- server-side priority on the wire -------------------------------------------------------------------


def _body(settings: BackendConfig, prio: float, **extra: Any) -> dict[str, Any]:
    with priority(prio):
        return OpenAITransport(settings).payload(ChatRequest(messages=MESSAGES, extra=extra))


@pytest.mark.parametrize(("mode", "sent"), [("auto", True), ("on", True), ("off", False)])
def test_priority_is_in_the_body_unless_off(mode: str, sent: bool):
    settings = BackendConfig(base_url="http://127.0.0.1:9/v1", model="m", server_priority=mode)  # type: ignore[arg-type]
    body = _body(settings, 12)
    assert body.get("priority") == (-12 if sent else None)
    assert "priority" not in _body(settings, 0)  # vLLM's default: left out
    assert _body(settings, 12, priority=3)["priority"] == 3  # an explicit extra wins


async def test_auto_drops_priority_when_a_server_refuses_it_and_retries_without():
    def responder(body: dict[str, Any], i: int) -> Reply:
        if "priority" in body:
            return Reply("", status=400, body={"error": {"message": "Unrecognized request argument: priority"}})
        return Reply("ok")

    async with serve_openai(responder) as server:
        settings = BackendConfig(base_url=server.base_url, model="m")
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=2, backoff_s=0)) as backend:
            with priority(5):
                first = await backend.complete(ChatRequest(messages=MESSAGES))
                await backend.complete(ChatRequest(messages=MESSAGES))
        assert first.completion.texts == ("ok",) and first.attempts == 2
        assert ["priority" in b for b in server.requests] == [True, False, False]


async def test_on_keeps_priority_and_a_refusal_is_an_error():
    from ceb.errors import BackendError

    refuse = Reply("", status=400, body={"error": {"message": "priority scheduling is not enabled"}})
    async with serve_openai(lambda b, i: refuse) as server:
        settings = BackendConfig(base_url=server.base_url, model="m", server_priority="on")
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=3, backoff_s=0)) as backend:
            with priority(5), pytest.raises(BackendError, match="priority"):
                await backend.complete(ChatRequest(messages=MESSAGES))
        assert len(server.requests) == 1


class _Replicas(Transport):
    """Three fake replicas that record which endpoint each attempt, plain or streamed, was sent to."""

    def __init__(self) -> None:
        super().__init__(EPS)
        self.sent: list[tuple[str, str]] = []

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        self.sent.append(("complete", endpoint))
        return Completion(texts=('{"score": 0.5}',))

    @asynccontextmanager
    async def open_stream(self, request: ChatRequest, endpoint: str) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        self.sent.append(("stream", endpoint))

        async def events() -> AsyncIterator[StreamChunk]:
            yield StreamChunk(text='{"score": 0.5}')

        yield events()


async def test_streamed_requests_go_to_the_lanes_home_like_plain_ones():
    replicas = _Replicas()
    backend = ChatBackend(replicas, max_concurrency=4)
    for key in (f"stream-{i}" for i in range(6)):
        replicas.sent.clear()
        with lane(key):
            await backend.complete(ChatRequest(messages=MESSAGES))
            async with backend.stream(ChatRequest(messages=MESSAGES)) as reply:
                assert "".join([delta async for delta in reply]) == '{"score": 0.5}'
        assert replicas.sent == [("complete", home_endpoint(key, EPS)), ("stream", home_endpoint(key, EPS))]


async def test_streamed_requests_carry_the_lane_as_session_header():
    # The loopback server answers in one JSON body, not SSE; only the request it received matters here.
    async with serve_openai(lambda b, i: Reply("x")) as server:
        settings = BackendConfig(base_url=server.base_url, model="m")
        async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1)) as backend:
            with lane("lane-k"), contextlib.suppress(TransientError):
                async with backend.stream(ChatRequest(messages=MESSAGES)) as reply:
                    _ = [delta async for delta in reply]
    assert server.headers[0][SESSION_HEADER.lower()] == "lane-k"
    assert server.requests[0]["stream"] is True


class _FailsOnce(_Replicas):
    """A replica set whose first attempt fails with a transient error."""

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        if not self.sent:
            self.sent.append(("failed", endpoint))
            raise TransientError("503 from the fake replica")
        return await super().send(request, endpoint)


async def test_a_request_answered_at_once_leaves_no_reference_cycles_and_a_failed_one_is_still_retried():
    # Cyclic garbage costs a busy client collector time (ChatBackend._send): a plain success makes none.
    backend = ChatBackend(_Replicas(), max_concurrency=4)
    await backend.complete(ChatRequest(messages=MESSAGES))  # first use: caches, lazy state
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            await backend.complete(ChatRequest(messages=MESSAGES))
        assert gc.collect() == 0
    finally:
        gc.enable()
    flaky = _FailsOnce()
    retried = ChatBackend(flaky, max_concurrency=4, retry=RetryPolicy(max_attempts=2, backoff_s=0))
    response = await retried.complete(ChatRequest(messages=MESSAGES))
    assert response.attempts == 2 and response.retry_reason is not None and len(flaky.sent) == 2
