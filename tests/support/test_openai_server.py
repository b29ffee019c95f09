"""The loopback OpenAI server itself: what other tests rely on."""

from __future__ import annotations

import contextlib

import pytest
from openai import AsyncOpenAI

from ceb.backends.base import ChatRequest
from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig
from ceb.errors import BackendError
from tests.support.openai_server import serve_openai

pytestmark = pytest.mark.anyio


async def test_models_lists_the_served_model() -> None:
    async with serve_openai(model="critic-model") as server:
        assert server.base_url.startswith("http://127.0.0.1:")
        assert server.base_url.endswith("/v1")
        async with AsyncOpenAI(api_key="EMPTY", base_url=server.base_url, max_retries=0) as client:
            page = await client.models.list()

    assert [m.id for m in page.data] == ["critic-model"]


async def test_a_request_without_a_responder_fails_loudly() -> None:
    with pytest.raises(BackendError, match="no responder is set"):
        async with serve_openai() as server:
            settings = BackendConfig(base_url=server.base_url, model="m", api_key_env="CEB_UNSET_KEY")
            async with OpenAIBackend(settings) as backend:
                await backend.complete(ChatRequest(messages=({"role": "user", "content": "hi"},)))
    # Had the client swallowed the 400, leaving the block would still raise, naming the cause.
    with pytest.raises(AssertionError, match="no responder is set"):
        async with serve_openai() as server:
            settings = BackendConfig(base_url=server.base_url, model="m", api_key_env="CEB_UNSET_KEY")
            async with OpenAIBackend(settings) as backend:
                with contextlib.suppress(BackendError):
                    await backend.complete(ChatRequest(messages=({"role": "user", "content": "hi"},)))
