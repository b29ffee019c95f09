"""A new provider is one module: a :class:`Transport` and a registered factory, and nothing of the policy.

The transport below only answers one attempt (failing the first one transiently); opened the one way every backend
is (:func:`open_backend`), it gets the run's retries, endpoint slots and reply cache from the client around it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from ceb.backends.base import (
    BACKENDS,
    ChatRequest,
    Completion,
    TransientError,
    Transport,
    open_backend,
    register_backend,
)
from ceb.backends.cache import ReplyCache
from ceb.config import BackendConfig, CacheConfig

pytestmark = pytest.mark.anyio


class Flaky(Transport):
    """Echoes the prompt after a short wait; its very first attempt fails with a transient error."""

    name = "flaky"

    def __init__(self) -> None:
        super().__init__("flaky://one")
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0

    async def send(self, request: ChatRequest, endpoint: str) -> Completion:
        self.calls += 1
        first = self.calls == 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await anyio.sleep(0.01)  # long enough for every other request to queue for a slot
            if first:
                raise TransientError("503 busy")
            return Completion(texts=(f"echo {request.messages[0]['content']}",), prompt_tokens=1, completion_tokens=2)
        finally:
            self.in_flight -= 1


@pytest.fixture
def flaky() -> Iterator[list[Flaky]]:
    """The provider registered under ``flaky`` for the test; the transports it built."""
    built: list[Flaky] = []

    @register_backend("flaky")
    def open_flaky(settings: BackendConfig) -> Flaky:
        built.append(Flaky())
        return built[-1]

    yield built
    BACKENDS.unregister("flaky")


def _ask(text: str) -> ChatRequest:
    return ChatRequest(messages=({"role": "user", "content": text},), stage="critic")


async def test_a_new_provider_gets_retries_slots_and_the_cache_without_code_of_its_own(
    flaky: list[Flaky], tmp_path: Path
) -> None:
    settings = BackendConfig(name="flaky", max_concurrency=2, max_attempts=3, backoff_s=0.0, max_backoff_s=0.0)
    cache = ReplyCache.open(CacheConfig(mode="read-write", path=tmp_path / "replies.sqlite"))
    assert cache is not None
    chat = open_backend(settings, cache=cache)
    assert chat is not None
    [transport] = flaky
    replies: dict[str, str] = {}
    attempts: list[int] = []

    async def one(text: str) -> None:
        response = await chat.complete(_ask(text))
        replies[text] = response.completion.texts[0]
        attempts.append(response.attempts)

    async with anyio.create_task_group() as tg:
        for i in range(8):
            tg.start_soon(one, f"q{i}")

    assert replies == {f"q{i}": f"echo q{i}" for i in range(8)}
    assert sorted(attempts) == [1] * 7 + [2]  # the failed first attempt was retried, by the client
    assert transport.calls == 9
    assert transport.most_in_flight == 2  # backend.max_concurrency, held by the client's slots

    again = await chat.complete(_ask("q3"))  # a deterministic request asked before: from the cache
    assert again.completion.texts == ("echo q3",) and transport.calls == 9
    assert (cache.counts.hits, cache.counts.stored, cache.counts.sent) == (1, 8, 9)

    async with chat.stream(_ask("streamed")) as reply:  # no streaming of its own: the reply comes whole
        assert await reply.read_all() == "echo streamed"
    assert transport.calls == 10 and cache.counts.hits == 1  # streams pass the cache by
    await chat.aclose()
    cache.close()
