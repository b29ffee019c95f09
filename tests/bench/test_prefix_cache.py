"""The prefix-cache benchmark's bound and its recording proxy (the measurement itself needs the real server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from ceb.backends.base import ChatRequest, RetryPolicy, TransientError
from ceb.backends.openai import OpenAIBackend
from ceb.bench.prefix_cache import (
    WireRecord,
    hindsight_rounds,
    hit_figures,
    recording_proxy,
    token_bound,
    whole_block_bound,
)
from ceb.config import BackendConfig


def _rec(index: int, ids: list[int], *, stage: str = "critic", n: int = 1, reads: bool = True) -> WireRecord:
    return WireRecord(index, stage, tuple(ids), reads, n, None)


def test_the_bound_counts_whole_blocks_of_the_longest_prefix_seen_before() -> None:
    first = list(range(10))
    records = [
        _rec(0, first),  # nothing seen yet
        _rec(1, first + [50, 51]),  # 12 tokens: two blocks of the first seen, the third is new
        _rec(2, [0, 1, 2, 3, 99, 5, 6, 7, 8]),  # shares the first block only
        _rec(3, [99, 1, 2, 3]),  # same tokens as a seen block, but after another prefix: no hit
    ]

    assert whole_block_bound(records, 4) == [0, 8, 4, 0]


def test_the_last_prompt_token_is_always_computed_so_a_full_repeat_loses_its_last_block() -> None:
    eight = list(range(8))
    # The repeat could reuse both blocks, but vLLM recomputes the last token: at most 7 tokens, so one block.
    assert whole_block_bound([_rec(0, eight), _rec(1, eight)], 4) == [0, 4]


def test_n_choices_are_n_lookups_and_the_later_ones_reuse_the_first() -> None:
    ids = list(range(9))
    bound = whole_block_bound([_rec(0, ids), _rec(1, ids, n=3)], 4)

    # The earlier request gives the first choice 8 tokens; the other two choices get the same cap of 8.
    assert bound == [0, 8 + 2 * 8]
    assert _rec(1, ids, n=3).queried_tokens == 27


def test_a_request_that_does_not_read_the_cache_still_fills_it() -> None:
    ids = list(range(8))
    records = [_rec(0, ids, reads=False), _rec(1, ids + [8])]

    assert whole_block_bound(records, 4) == [0, 8]
    assert records[0].queried_tokens == 0


def test_block_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="block_size"):
        whole_block_bound([], 0)


def test_rounds_group_the_hindsight_votes_by_prompt_and_summary_splits_stages() -> None:
    vote = [7] * 9
    records = [
        WireRecord(0, "critic", tuple(range(9)), True, 1, 0),
        WireRecord(1, "hindsight", tuple(vote), True, 1, 0),
        WireRecord(2, "hindsight", tuple(vote), True, 1, 8),
        WireRecord(3, "hindsight", (7, 7, 7, 7, 1), True, 1, 4),
    ]
    assert [len(r) for r in hindsight_rounds(records)] == [2, 1]

    s = hit_figures(records, 4)
    hind = s.by_stage["hindsight"]
    assert (hind.queried_tokens, hind.bound_tokens, hind.hit_tokens) == (23, 12, 12)
    assert s.hindsight_rounds.computed_prompt_tokens_per_round == (23 - 12) / 2


def test_hits_of_a_stage_with_n_choices_come_from_metrics_minus_the_other_stages() -> None:
    records = [
        WireRecord(0, "critic", tuple(range(9)), True, 1, 0),
        WireRecord(1, "hindsight", (5,) * 9, True, 3, 8),  # vLLM's cached_tokens for n > 1 is one child's
    ]
    s = hit_figures(records, 4, metrics_hits=16)

    assert s.by_stage["hindsight"].hit_tokens == 16
    assert s.by_stage["hindsight"].hit_source == "/metrics minus other stages"
    assert s.by_stage["critic"].hit_source == "usage.cached_tokens"


@asynccontextmanager
async def _upstream() -> AsyncIterator[str]:
    """A stand-in server: prompt token ids are the bytes of the last message, and a 503 for a "fail" message."""

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        text = body["messages"][-1]["content"]
        if text == "fail":
            return web.json_response({"error": {"message": "busy"}}, status=503)
        reply: dict[str, Any] = {
            "id": "x",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
                for i in range(body.get("n", 1))
            ],
            "usage": {
                "prompt_tokens": len(text),
                "completion_tokens": 1,
                "prompt_tokens_details": {"cached_tokens": 3},
            },
        }
        if body.get("return_token_ids"):
            reply["prompt_token_ids"] = list(text.encode())
            for c in reply["choices"]:
                c["token_ids"] = [1]
        return web.json_response(reply)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.anyio
async def test_the_proxy_records_what_the_server_tokenized_and_hands_back_the_reply_unchanged() -> None:
    async with _upstream() as root, recording_proxy(root) as (url, records):
        async with OpenAIBackend(BackendConfig(base_url=url, model="m"), retry=RetryPolicy(max_attempts=1)) as backend:
            a = await backend.complete(ChatRequest(messages=({"role": "user", "content": "abc"},), stage="critic"))
            await backend.complete(
                ChatRequest(
                    messages=({"role": "user", "content": "abcd"},),
                    n=3,
                    stage="hindsight",
                    extra={"prompt_logprobs": 1},
                )
            )
            with pytest.raises(TransientError, match="503"):
                await backend.complete(ChatRequest(messages=({"role": "user", "content": "fail"},)))
        async with aiohttp.ClientSession() as session:  # what the client gets back, as sent
            body = {"model": "m", "messages": [{"role": "user", "content": "xy"}]}
            async with session.post(f"{url}/chat/completions", json=body) as resp:
                plain = await resp.json()
            async with session.post(f"{url}/chat/completions", json=body | {"return_token_ids": True}) as resp:
                asked = await resp.json()

    assert a.completion.texts == ("ok",)
    assert [(r.index, r.stage, r.prompt_token_ids, r.reads_cache, r.n, r.cached_tokens) for r in records] == [
        (0, "critic", (97, 98, 99), True, 1, 3),
        (1, "hindsight", (97, 98, 99, 100), False, 3, 3),
        (3, "", (120, 121), True, 1, 3),
        (4, "", (120, 121), True, 1, 3),
    ]
    # The proxy asked for the token ids; a client that did not gets a reply without them.
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert asked["prompt_token_ids"] == [120, 121] and asked["choices"][0]["token_ids"] == [1]


def test_the_per_token_bound_is_the_longest_shared_prefix_without_block_rounding() -> None:
    records = [
        _rec(0, [1, 2, 3, 4, 5]),
        _rec(1, [1, 2, 3, 9]),  # shares 3 tokens, less than a block of 4
        _rec(2, [1, 2, 3, 4, 5]),  # a full repeat: all but the last token
        _rec(3, [1, 2, 3, 9, 9], n=2),  # 4 shared, then the second choice: all but the last
        _rec(4, [1, 2, 7], reads=False),
    ]

    assert token_bound(records) == [0, 3, 4, 4 + 4, 0]
    assert whole_block_bound(records, 4) == [0, 0, 4, 4 + 4, 0]
