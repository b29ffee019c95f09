"""Priority slots, least-outstanding balancing across replicas, and the lanes' critical-path priority."""

from __future__ import annotations

import anyio
import pytest

from ceb.backends.base import ChatBackend, ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAIBackend
from ceb.backends.scheduling import EndpointLimits, PrioritySlots, current_priority, priority
from ceb.backends.scripted import ScriptedChat, ScriptedTransport
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


async def _order_served(slots: PrioritySlots, prios: list[float]) -> list[float]:
    """Hold the only slot, queue one waiter per priority (in list order), release, and record who ran."""
    served: list[float] = []
    await slots.acquire()

    async def waiter(p: float) -> None:
        await slots.acquire(p)
        served.append(p)
        slots.release()

    async with anyio.create_task_group() as tg:
        for p in prios:
            tg.start_soon(waiter, p)
            await anyio.wait_all_tasks_blocked()
        assert slots.waiting == len(prios)
        slots.release()
    return served


async def test_priority_slots_serve_the_highest_priority_first_and_fifo_among_equals():
    served = await _order_served(PrioritySlots(1), [1.0, 5.0, 3.0, 5.0, 0.0])
    assert served == [5.0, 5.0, 3.0, 1.0, 0.0]


async def test_a_cancelled_waiter_leaves_no_trace_and_its_turn_passes_on():
    slots = PrioritySlots(1)
    await slots.acquire()
    got: list[str] = []

    async def waiter(name: str, p: float) -> None:
        await slots.acquire(p)
        got.append(name)
        slots.release()

    async with anyio.create_task_group() as tg:
        with anyio.CancelScope() as doomed:
            tg.start_soon(waiter, "low", 1.0)
            await anyio.wait_all_tasks_blocked()

        async def cancellable() -> None:
            with doomed:
                await waiter("high", 9.0)

        tg.start_soon(cancellable)
        await anyio.wait_all_tasks_blocked()
        assert slots.outstanding == 3
        doomed.cancel()
        await anyio.wait_all_tasks_blocked()
        assert slots.waiting == 1
        slots.release()
    assert got == ["low"]
    assert slots.in_use == 0 and slots.waiting == 0


async def test_pick_takes_the_endpoint_with_fewest_outstanding_requests():
    limits = EndpointLimits()
    await limits.slots("a", 1).acquire()
    assert limits.pick(["a", "b"], 1) == "b"
    await limits.slots("b", 1).acquire()
    assert limits.pick(["a", "b"], 1) == "a"  # a tie goes to the first
    limits.slots("a", 1).release()
    limits.slots("b", 1).release()
    with pytest.raises(ValueError, match="no endpoint"):
        limits.pick([], 1)


async def test_replicas_share_the_load_and_each_keeps_its_own_limit():
    reply = Reply('{"score": 0.5}', delay_s=0.02)
    async with serve_openai(lambda b, i: reply) as one, serve_openai(lambda b, i: reply) as two:
        settings = BackendConfig(base_url=(one.base_url, two.base_url), model="m", max_concurrency=3)
        backend = OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1))
        async with backend, anyio.create_task_group() as tg:
            for _ in range(24):
                tg.start_soon(backend.complete, ChatRequest(messages=MESSAGES))
        assert len(one.requests) + len(two.requests) == 24
        assert 8 <= len(one.requests) <= 16 and 8 <= len(two.requests) <= 16
        assert one.max_in_flight <= 3 and two.max_in_flight <= 3


async def test_a_contended_endpoint_serves_requests_in_priority_order():
    order: list[str] = []
    gate = anyio.Event()

    def responder(request: ChatRequest) -> str:
        order.append(request.messages[0]["content"])
        return "ok"

    class Gated(ScriptedTransport):
        async def send(self, request, endpoint):
            if request.messages[0]["content"] == "first":
                await gate.wait()
            return await super().send(request, endpoint)

    chat = ChatBackend(Gated(responder), max_concurrency=1)

    async def send(name: str, p: float) -> None:
        with priority(p):
            await chat.complete(ChatRequest(messages=({"role": "user", "content": name},)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(send, "first", 0.0)
        await anyio.wait_all_tasks_blocked()
        for name, p in (("slack", 1.0), ("critical", 50.0), ("middle", 10.0)):
            tg.start_soon(send, name, p)
            await anyio.wait_all_tasks_blocked()
        gate.set()
    assert order == ["first", "critical", "middle", "slack"]


async def test_lanes_send_their_remaining_critical_path_as_priority(tmp_path):
    seen: list[tuple[str, float]] = []

    def responder(request: ChatRequest) -> str:
        seen.append((request.stage, current_priority()))
        return default_reply(request)

    chat = ScriptedChat(responder)
    prompts = PromptSet()
    stages = Stages(critic=LLMCritic(chat, prompts), hindsight=LLMHindsight(chat, prompts), chat=chat)
    long = [trajectory(f"t{i}", step("ls", "a", label=1), step("pwd", "/", label=0)) for i in range(2)]
    # The strict order (speculation 0): one request chain, whose remaining length each request carries.
    config = load_config(overrides={"methods": ["ceb"], "ceb": {"votes": 3}, "speculation": 0})
    await run_scoring({"long": long}, config, tmp_path, stages=stages)
    # 2 trajectories x (2 steps + 1 hindsight round) = 6 sequential requests, counted down.
    assert (
        seen
        == [("critic", 6), ("critic", 5)]
        + [("hindsight", 4)] * 3
        + [("critic", 3), ("critic", 2)]
        + [("hindsight", 1)] * 3
    )


async def test_observers_see_every_attempt_with_its_queue_time_and_priority():
    from ceb.backends.base import TransientError

    calls = iter([TransientError("503"), "ok"])

    def responder(request: ChatRequest) -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    chat = ScriptedChat(responder)
    seen = []
    chat.observers.append(seen.append)
    with priority(7):
        await chat.complete(ChatRequest(messages=MESSAGES, stage="critic"))
    assert [(r.ok, r.stage, r.priority) for r in seen] == [(False, "critic", 7), (True, "critic", 7)]
    assert "503" in seen[0].error and seen[1].prompt_tokens == 2 and seen[1].queue_s >= 0
