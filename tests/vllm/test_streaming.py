"""Early critic scores against the real vLLM server: a streamed reply's score is the unstreamed reply's."""

from __future__ import annotations

import pytest

from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig, CriticConfig
from ceb.stages import CriticInput, HistoryItem, LLMCritic, PromptSet
from ceb.stages.parsing import score_prefix
from tests.support.vllm_server import VLLMServer

pytestmark = [pytest.mark.vllm, pytest.mark.anyio, pytest.mark.timeout(300)]

INPUTS = [
    CriticInput(domain="shell", task="count the python files", step=0, state="", action="ls *.py | wc -l"),
    CriticInput(
        domain="sql",
        task="how many singers are there?",
        step=1,
        state="Error: no such table: singers",
        action="SELECT count(*) FROM singer",
        history=(HistoryItem("SELECT count(*) FROM singers", "Error: no such table: singers", 0.4),),
    ),
]


async def test_streamed_early_score_equals_the_unstreamed_score(vllm_server: VLLMServer) -> None:
    settings = BackendConfig(
        base_url=vllm_server.base_url, model=vllm_server.model, structured_output="vllm", timeout_s=120
    )
    async with OpenAIBackend(settings) as chat:
        plain = LLMCritic(chat, PromptSet(), CriticConfig())
        early = LLMCritic(chat, PromptSet(), CriticConfig(early_score=True))
        for inp in INPUTS:
            a = await plain.score(inp)
            b = await early.score(inp)
            assert a.score is not None and a.error is None, a
            assert b.score == a.score, (a.raw, b.raw)
            # xgrammar writes the schema's properties in order: the score comes first, and the stream was cut
            # right after it, so the stored reply is a prefix of the whole one.
            assert score_prefix(b.raw) is not None and a.raw.startswith(b.raw) and len(b.raw) < len(a.raw)
