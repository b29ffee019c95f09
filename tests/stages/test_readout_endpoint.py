"""The expected readout end to end: each verbal method against the loopback OpenAI server returning log-probs."""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from typing import Any

import pytest

from ceb.backends.base import RetryPolicy
from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig, CriticConfig
from ceb.stages import CriticInput, LLMCritic, PromptSet
from ceb.stages.baselines import CoTCritic, VerbalizedCritic
from tests.support.openai_server import OpenAITestServer, Reply, TokenSpec

pytestmark = pytest.mark.anyio

KEY_ENV = "CEB_TEST_READOUT_KEY"
EXPECTED = CriticConfig(readout="expected", top_logprobs=5)
L = math.log


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture
async def backend(openai_server: OpenAITestServer) -> AsyncIterator[OpenAIBackend]:
    settings = BackendConfig(base_url=openai_server.base_url, model="critic-model", api_key_env=KEY_ENV)
    async with OpenAIBackend(settings, retry=RetryPolicy(max_attempts=1, backoff_s=0, max_backoff_s=0)) as b:
        yield b


def _input() -> CriticInput:
    return CriticInput(domain="shell", task="list every file", step=0, state="/testbed", action="ls -la")


def _reply(tokens: list[TokenSpec]) -> Reply:
    return Reply("".join(t[0] for t in tokens), logprobs=[tokens])


# SmolLM2's own tokenisation of a critic reply (seen on the real model): `{"`, `score`, `":`, then the digit.
CRITIC_TOKENS: list[TokenSpec] = [
    ('{"', L(0.6)),
    ("score", 0.0),
    ('":', 0.0),
    ("0", L(0.6), [("0", L(0.6)), ("1", L(0.3)), ('"', L(0.1))]),
    (",", L(0.5), [(",", L(0.5)), (',"', L(0.3)), (".", L(0.2))]),
    ('"reason":"ok"}', 0.0),
]


async def test_the_critic_reads_its_score_as_an_expectation(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: _reply(CRITIC_TOKENS)

    result = await LLMCritic(backend, PromptSet(), EXPECTED).score(_input())

    # The first digit: 0 (.6) or 1 (.3), a quote does not read; after the 0 only "," and ',"' end the number.
    assert result.score == pytest.approx(0.3 / 0.9)
    assert result.readout == "expected"
    assert result.raw == '{"score":0,"reason":"ok"}'
    body = openai_server.requests[0]
    assert (body["logprobs"], body["top_logprobs"]) == (True, 5)


async def test_the_text_readout_asks_for_no_logprobs(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    openai_server.responder = lambda body, i: _reply(CRITIC_TOKENS)

    result = await LLMCritic(backend, PromptSet(), CriticConfig()).score(_input())

    assert (result.score, result.readout) == (0.0, "text")
    assert "logprobs" not in openai_server.requests[0] and "top_logprobs" not in openai_server.requests[0]


async def test_a_server_without_logprobs_keeps_the_text_score_and_says_so(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply('{"score": 0.7, "reason": "ok"}')

    result = await LLMCritic(backend, PromptSet(), EXPECTED).score(_input())

    assert (result.score, result.readout) == (0.7, "text_fallback")


async def test_a_reask_reads_the_logprobs_of_the_reply_that_was_read(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    def respond(body: dict[str, Any], i: int) -> Reply:
        return Reply("no idea", logprobs=[[("no idea", 0.0)]]) if i == 0 else _reply(CRITIC_TOKENS)

    openai_server.responder = respond

    result = await LLMCritic(backend, PromptSet(), EXPECTED).score(_input())

    assert result.score == pytest.approx(0.3 / 0.9) and result.readout == "expected"
    assert len(openai_server.requests) == 2 and openai_server.requests[1]["logprobs"] is True


async def test_verbalized_reads_the_continuations_digits(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    tokens: list[TokenSpec] = [(" ", 0.0), ("8", L(0.5), [("8", L(0.5)), ("9", L(0.5))]), ("5", 0.0)]
    openai_server.responder = lambda body, i: _reply(tokens)

    result = await VerbalizedCritic(backend, PromptSet(), readout=EXPECTED).score(_input())

    assert result.score == pytest.approx(0.9)  # 85 and 95 (the same 5 after), half each
    assert result.readout == "expected"
    assert json.loads(result.raw)["confidence"] == pytest.approx(0.85)  # the text score stays in the evidence
    assert openai_server.requests[0]["top_logprobs"] == 5


async def test_cot_reads_the_final_confidence_after_its_reasoning(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    tokens: list[TokenSpec] = [
        ('{"reasoning":"it lists files, confidence: 10","confidence":', 0.0),
        ("7", L(0.5), [("7", L(0.5)), ("9", L(0.25)), ("1", L(0.25))]),
        ("0", 0.0),
        ("}", L(0.8), [("}", L(0.8)), ("0", L(0.2))]),
    ]
    openai_server.responder = lambda body, i: _reply(tokens)

    result = await CoTCritic(backend, PromptSet(), readout=EXPECTED).score(_input())

    # After "70": 70 (.8) or 700 (.2, clipped to 100); the first digit: 7x, 9x or 1x with the same 0 after.
    after = 0.8 * 0.70 + 0.2 * 1.0
    assert result.score == pytest.approx(0.5 * after + 0.25 * 0.90 + 0.25 * 0.10)
    assert result.readout == "expected"
