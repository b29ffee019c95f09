"""vLLM's ``priority`` field and the session header against the real server (started FCFS, the default)."""

from __future__ import annotations

import pytest

from ceb.backends.base import ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAIBackend
from ceb.backends.scheduling import lane, priority
from ceb.config import BackendConfig
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(900)]


async def test_an_fcfs_server_accepts_the_priority_field_so_auto_keeps_sending_it(vllm_server: VLLMServer) -> None:
    # vLLM 0.32 validates the field's range only; under FCFS it ignores it rather than refusing it.
    settings = BackendConfig(base_url=vllm_server.base_url, model=vllm_server.model, timeout_s=300)
    async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1)) as backend:
        body = backend.transport.payload(ChatRequest(messages=({"role": "user", "content": "hi"},), max_tokens=1))
        with priority(41), lane("stream|0|ceb|"):
            hi = ChatRequest(messages=({"role": "user", "content": "hi"},))
            assert backend.transport.payload(hi)["priority"] == -41
            reply = await backend.complete(ChatRequest(messages=({"role": "user", "content": "hi"},), max_tokens=1))
        assert "priority" not in body
        assert reply.attempts == 1 and backend.transport.send_priority
