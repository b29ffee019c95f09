"""Early critic scores (``critic.early_score``): the score is taken from the streamed reply's prefix."""

import anyio
import orjson
import pytest

from ceb.backends.base import ChatRequest, RetryPolicy, TransientError
from ceb.backends.scripted import ScriptedChat
from ceb.config import CriticConfig
from ceb.stages import CriticInput, LLMCritic, PromptSet
from ceb.stages.critic import reply_tails
from ceb.stages.parsing import parse_score, score_prefix

pytestmark = pytest.mark.anyio

REASON = "the command counts the files the task asks about, and nothing in the history says it failed"
REPLY = orjson.dumps({"score": 0.73, "reason": REASON}).decode()


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"score": 0.7', None),  # the number may still grow
        ('{"score": 0.73,', 0.73),
        ('{"score":1}', 1.0),
        (' {\n "score" : 2.5e-1 ,', 0.25),
        ('{"score": -0.0,', -0.0),
        ('{"reason": "x", "score": 0.5}', None),  # not score-first: read whole
        ('{"score": "0.5",', None),  # a string score: read whole
        ('Sure! {"score": 0.5,', None),
        ('{"score": 01,', None),  # not a JSON number
        ('{"score": 1e999,', None),  # not finite
    ],
)
def test_score_prefix_reads_a_complete_leading_score_only(text, value):
    assert score_prefix(text) == value


@pytest.mark.parametrize("score", [0, 1, 0.5, 0.123456789, 1e-7, 0.99999999999999999, 17, -3.25])
def test_score_prefix_equals_the_whole_reply_score(score):
    reply = orjson.dumps({"score": score, "reason": "r"}).decode()
    for cut in range(len(reply) + 1):
        early = score_prefix(reply[:cut])
        assert early is None or early == parse_score(reply)
    assert score_prefix(reply) == parse_score(reply)


def _input() -> CriticInput:
    return CriticInput(domain="shell", task="count the python files", step=0, state="a.py b.py", action="ls | wc -l")


def _critic(responder, **settings) -> tuple[LLMCritic, ScriptedChat]:
    chat = ScriptedChat(
        responder, retry=RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0), chunk_chars=3, chunk_delay_s=0.001
    )
    return LLMCritic(chat, PromptSet(), CriticConfig(**settings)), chat


async def test_early_score_equals_the_whole_reply_and_cuts_the_stream():
    plain, _ = _critic(lambda r: REPLY)
    early, chat = _critic(lambda r: REPLY, early_score=True, reason_tokens_after_score=0)
    a, b = await plain.score(_input()), await early.score(_input())
    assert b.score == a.score == pytest.approx(0.73) and b.error is None
    assert REPLY.startswith(b.raw) and len(b.raw) < len(REPLY) and '"score":0.73,' in b.raw
    # 3 characters per piece: the reader stopped at the piece that completed the number
    assert chat.streamed == [-(-len(b.raw) // 3)]


async def test_a_cap_reads_that_many_pieces_after_the_score():
    early, chat = _critic(lambda r: REPLY, early_score=True, reason_tokens_after_score=5)
    res = await early.score(_input())
    assert res.score == pytest.approx(0.73)
    assert chat.streamed == [-(-len(score_first_prefix()) // 3) + 5]
    assert REPLY.startswith(res.raw)


def score_first_prefix() -> str:
    return next(REPLY[:i] for i in range(len(REPLY) + 1) if score_prefix(REPLY[:i]) is not None)


async def test_background_tail_finishes_in_the_owners_group_after_the_score_returns():
    early, chat = _critic(lambda r: REPLY, early_score=True, reason_tokens_after_score=None)
    async with anyio.create_task_group() as tails:
        with reply_tails(tails):
            res = await early.score(_input())
            assert res.score == pytest.approx(0.73)
            assert chat.streamed[0] < -(-len(REPLY) // 3)  # returned before the reply was complete
    assert chat.streamed == [-(-len(REPLY) // 3)]  # the owner's group waited for the whole reply


async def test_background_without_an_owner_reads_the_whole_reply():
    early, chat = _critic(lambda r: REPLY, early_score=True, reason_tokens_after_score=None)
    res = await early.score(_input())
    assert res.score == pytest.approx(0.73) and res.raw == REPLY


async def test_a_reply_not_score_first_is_read_whole_and_parsed():
    reply = orjson.dumps({"reason": "first", "score": 0.2}).decode()
    early, chat = _critic(lambda r: reply, early_score=True)
    res = await early.score(_input())
    assert res.score == pytest.approx(0.2) and res.raw == reply


async def test_an_unreadable_streamed_reply_is_re_asked_like_the_plain_path():
    replies = iter(["no idea", '{"score": 0.3, "reason": "x"}'])
    early, chat = _critic(lambda r: next(replies), early_score=True, format_retries=1)
    res = await early.score(_input())
    assert res.score == pytest.approx(0.3) and res.stats.requests == 2
    assert chat.requests[1].messages[-2] == {"role": "assistant", "content": "no idea"}


async def test_a_stream_that_cannot_open_falls_back_to_the_plain_call():
    calls: list[ChatRequest] = []

    def flaky(request: ChatRequest) -> str:
        calls.append(request)
        if len(calls) <= 2:  # both attempts at opening the stream
            raise TransientError("503 from server")
        return REPLY

    early, _ = _critic(flaky, early_score=True)
    res = await early.score(_input())
    assert res.score == pytest.approx(0.73) and res.raw == REPLY and res.stats.requests == 3
