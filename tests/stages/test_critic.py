import re

import orjson
import pytest

from ceb.backends._wire import openai_strict_schema
from ceb.backends.base import ChatRequest, RetryPolicy, TransientError
from ceb.backends.scripted import ScriptedChat
from ceb.bank import BankRecord, Hit, Retrieval
from ceb.stages import CRITIC_SCHEMA, CriticInput, HistoryItem, LLMCritic, PromptSet, repetition_flag
from ceb.stages.asking import BOUNDED_TEXT_MAX_CHARS, bounded_text
from tests.support.builders import default_reply

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("previous", "action", "flag"),
    [
        ([], "ls", False),
        (["ls"], "ls", True),
        (["ls   -la"], "LS -la", True),  # white space and case are folded
        (["ls", "pwd", "cat a", "echo b"], "ls", False),  # outside the last 3
        (["ls", "pwd", "cat a"], "ls", True),
        (
            ["ls -la /very/long/path/that/keeps/going/and/going/x"],
            "ls -la /very/long/path/that/keeps/going/and/going/y",
            True,
        ),  # same first 40 characters
        (["ls -la"], "ls", False),  # a shorter action is a different prefix
    ],
)
def test_repetition_flag(previous, action, flag):
    assert repetition_flag(previous, action) is flag


def test_repetition_flag_window_and_prefix_are_settings():
    assert repetition_flag(["ls", "a", "b", "c"], "ls", window=4)
    assert not repetition_flag(["ls -la"], "ls -l", prefix_chars=6)
    assert repetition_flag(["ls -la"], "ls -l", prefix_chars=5)
    assert not repetition_flag(["ls"], "ls", window=0)


def _record(action: str, label: int, score: float, agreement: bool) -> BankRecord:
    return BankRecord(
        task="old task",
        state=f"state of {action}",
        action=action,
        observation=f"after {action}",
        pseudo_label=label,
        soft_vote=float(label),
        score=score,
        agreement=agreement,
        trajectory_id="old",
        step=0,
    )


def _input(**kw) -> CriticInput:
    base = dict(
        domain="shell",
        task="count the python files",
        step=2,
        state="a.py b.py",
        action="ls *.py | wc -l",
        history=(HistoryItem("ls", "a.py b.py", 0.81), HistoryItem("pwd", "/testbed", None)),
        retrieval=Retrieval(
            positives=(Hit(_record("find . -name '*.py' | wc -l", 1, 0.3, False), 0.7),),
            negatives=(Hit(_record("ls *.txt", 0, 0.9, False), 0.4),),
        ),
        repetition_flag=False,
    )
    base.update(kw)
    return CriticInput(**base)


def _critic(responder, retries: int = 2) -> tuple[LLMCritic, ScriptedChat]:
    from ceb.config import CriticConfig

    chat = ScriptedChat(responder, retry=RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0))
    return LLMCritic(chat, PromptSet(), CriticConfig(format_retries=retries)), chat


def test_critic_prompt_holds_every_input_of_eq_2():
    critic, _ = _critic(default_reply)
    system, user = critic.messages(_input())
    assert system["role"] == "system" and user["role"] == "user"
    s, u = system["content"], user["content"]
    for rule in ("(a)", "(b)", "(c)", "(d)", '{"score"', "0.0-0.3", "0.4-0.6", "0.7-1.0"):
        assert rule in s
    assert "command" in s  # shell wording
    assert "Task: count the python files" in u
    assert "ls *.py | wc -l" in u and "a.py b.py" in u
    # history: actions, observations and the critic's own earlier scores (a failed one says so)
    assert "Step 1: ls" in u and "0.81" in u and "/testbed" in u and "none (the critic gave no readable score)" in u
    # precedents: action, state, observation, hindsight outcome, past score and agreement
    assert "hindsight: productive" in u and "hindsight: unproductive" in u
    assert "state of ls *.txt" in u and "after ls *.txt" in u and "its task: old task" in u
    assert "0.90" in u and "DISAGREED" in u
    assert "repeats one of the last few" not in u


def test_repetition_note_appears_only_when_flagged():
    critic, _ = _critic(default_reply)
    assert "repeats one of the last few" in critic.messages(_input(repetition_flag=True))[1]["content"]


def test_static_critic_prompt_has_no_precedent_block_and_empty_bank_says_so():
    critic, _ = _critic(default_reply)
    static = critic.messages(_input(use_bank=False, retrieval=Retrieval()))[1]["content"]
    assert "Precedents" not in static
    empty = critic.messages(_input(retrieval=Retrieval()))[1]["content"]
    assert "the bank has no records yet" in empty


@pytest.mark.parametrize("domain", ["shell", "sql", "web", "mobile", "generic"])
def test_static_critic_system_prompt_mentions_no_precedents(domain: str) -> None:
    """The bank-free critic is never given precedents, so its instructions must not describe any (issue 32.8)."""
    critic, _ = _critic(default_reply)
    static = critic.messages(_input(use_bank=False, retrieval=Retrieval(), domain=domain))[0]["content"]
    assert "precedent" not in static.casefold() and "bank" not in static.casefold()
    assert "(a) If you scored an earlier step" in static and "(b) If you scored an earlier step low" in static
    with_bank = critic.messages(_input(domain=domain))[0]["content"]
    assert "precedents from OTHER" in with_bank and "(d) If you scored an earlier step low" in with_bank


async def test_critic_asks_for_structured_json_at_temperature_zero():
    critic, chat = _critic(default_reply)
    res = await critic.score(_input())
    assert res.score == pytest.approx(0.6) and res.error is None and not res.clipped
    req = chat.requests[0]
    assert req.temperature == 0.0 and req.stage == "critic"
    assert req.json_schema is not None and req.json_schema["required"] == ["score", "reason"]
    assert res.stats.requests == 1 and res.stats.prompt_tokens


@pytest.mark.parametrize(("raw", "z"), [(1.7, 1.0), (-0.3, 0.0), (85, 1.0)])
async def test_scores_outside_unit_interval_are_clipped_and_flagged(raw, z):
    critic, _ = _critic(lambda r: orjson.dumps({"score": raw, "reason": ""}).decode())
    res = await critic.score(_input())
    assert res.score == z and res.clipped


async def test_unreadable_reply_is_re_asked_then_read():
    replies = iter(["no idea", '{"score": "0.3", "reason": "x"}'])
    critic, chat = _critic(lambda r: next(replies))
    res = await critic.score(_input())
    assert res.score == pytest.approx(0.3) and len(chat.requests) == 2 and res.stats.requests == 2
    # the re-ask shows the model its unreadable reply and why it could not be read
    first, second = chat.requests
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[-2] == {"role": "assistant", "content": "no idea"}
    assert "could not be read" in second.messages[-1]["content"] and "no JSON object" in second.messages[-1]["content"]


async def test_unreadable_after_the_budget_is_a_failed_step_not_a_default():
    critic, chat = _critic(lambda r: "I refuse", retries=1)
    res = await critic.score(_input())
    assert res.score is None
    assert "unreadable reply" in res.error
    assert res.raw == "I refuse"
    assert len(chat.requests) == 2


async def test_endpoint_failure_is_a_failed_step_with_the_reason():
    def down(request: ChatRequest) -> str:
        raise TransientError("503 from server")

    critic, chat = _critic(down)
    res = await critic.score(_input())
    assert res.score is None and "503" in res.error
    assert len(chat.requests) == 2  # the backend's retry budget was used first


def test_the_reason_is_bounded_by_a_pattern_that_openai_strict_mode_keeps() -> None:
    # json_schema mode (the default) drops maxLength for OpenAI's strict mode; a pattern survives the cut.
    reason = openai_strict_schema(CRITIC_SCHEMA)["properties"]["reason"]
    assert reason == {"type": "string", "pattern": "^[^\\n]{0,120}$"}
    assert re.fullmatch(reason["pattern"], "x" * 120) and not re.fullmatch(reason["pattern"], "x" * 121)


@pytest.mark.parametrize("chars", [0, BOUNDED_TEXT_MAX_CHARS + 1])
def test_a_text_bound_xgrammar_cannot_compile_is_refused(chars: int) -> None:
    with pytest.raises(ValueError, match="bounded text field"):
        bounded_text(chars)
