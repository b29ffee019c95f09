"""The section 4.1 baselines end to end: the real OpenAI client against the loopback server, hand-computed scores."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from ceb.backends.base import RetryPolicy, TokenLogprob
from ceb.backends.openai import OpenAIBackend
from ceb.config import BackendConfig, BaselineConfig, CriticConfig, load_config
from ceb.errors import ConfigError
from ceb.stages import CriticInput, HistoryItem, PromptSet
from ceb.stages.asking import REASK_PREFIX
from ceb.stages.assembly import Stages, UnavailableCritic, build_critic
from ceb.stages.base import NOT_AVAILABLE
from ceb.stages.baselines import (
    CoTCritic,
    MeanEntropyCritic,
    PerplexityCritic,
    PROCritic,
    PTrueCritic,
    VerbalizedCritic,
    action_span,
    answer_class,
    parse_confidence_line,
    parse_stated_confidence,
    softmax_weight,
    top_k_entropy,
)
from ceb.stages.baselines.pro import SAMPLE_SLACK_TOKENS, sample_budget
from ceb.stages.baselines.ptrue import forced_p_true
from ceb.stages.methods import all_methods, resolve_method
from ceb.stages.statistics import cot_request, ptrue_first_token_request
from tests.support.openai_server import OpenAITestServer, PromptPosition, Reply

pytestmark = pytest.mark.anyio

KEY_ENV = "CEB_TEST_BASELINES_KEY"
FIRST_TOKEN = BaselineConfig(ptrue_forced=False)
NO_WAIT = RetryPolicy(max_attempts=2, backoff_s=0, max_backoff_s=0)
ACTOR_PROMPT = "You are ShellBot. Answer with one bash command."
E = math.exp


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)


@pytest.fixture
async def backend(openai_server: OpenAITestServer) -> AsyncIterator[OpenAIBackend]:
    settings = BackendConfig(base_url=openai_server.base_url, model="actor-model", api_key_env=KEY_ENV)
    async with OpenAIBackend(settings, retry=NO_WAIT) as b:
        yield b


def _input(**kw: Any) -> CriticInput:
    base: dict[str, Any] = dict(
        domain="shell",
        task="list every file with its permissions",
        step=1,
        state="/testbed",
        action="ls -la",
        history=(HistoryItem("pwd", "/testbed", 0.9),),
    )
    base.update(kw)
    return CriticInput(**base)


_ids = itertools.count(100)


def _pos(token: str, logprob: float, top: Sequence[tuple[str, float]] = (), rank: int | None = None) -> PromptPosition:
    """One prompt position as vLLM sends it: the own token first (with its vocabulary rank), then the top K."""
    listed = [t for t, _ in top]
    own_rank = rank if rank is not None else (listed.index(token) + 1 if token in listed else len(top) + 1)
    entries = {next(_ids): (token, logprob, own_rank)}
    for r, (t, lp) in enumerate(top, start=1):
        if t != token:
            entries[next(_ids)] = (t, lp, r)
    return entries


# What a chat template puts before the open assistant reply; ends in white space, which is not the action.
PREFIX: list[PromptPosition] = [None, _pos("<|im_start|>", -0.01), _pos("assistant", -0.02), _pos("\n", -0.03)]


def _tokens(*pairs: tuple[str, float]) -> tuple[TokenLogprob | None, ...]:
    return (None, *(TokenLogprob(t, lp) for t, lp in pairs))


def _not_available(result: Any) -> bool:
    return result.score is None and result.error.startswith(f"{NOT_AVAILABLE}: ")


# --- the action span of teacher forcing ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("positions", "expected"),
    [
        # The span is the tokens that spell the action at the end; the template's tokens before it are not.
        (_tokens(("assistant", -0.1), ("\n", -0.1), ("ls", -0.2), (" -", -0.5), ("la", -0.3)), ["ls", " -", "la"]),
        # A token straddling the start (the template's quote glued to the action) is counted in the span;
        # trailing white space after the action is not.
        (_tokens(("say", -0.1), (':"ls', -0.4), (" -la", -0.6), ("\n", -0.9)), [':"ls', " -la"]),
        # Tokenizers that decode a lone token without its leading space: white space is not compared.
        (_tokens(("x", -0.1), ("ls", -0.2), ("-", -0.5), ("la", -0.3)), ["ls", "-", "la"]),
    ],
)
def test_action_span_is_found_at_the_end_of_the_prompt(
    positions: tuple[TokenLogprob | None, ...], expected: list[str]
) -> None:
    assert [t.token for t in action_span(positions, "ls -la")] == expected


def test_pieces_of_a_split_first_character_belong_to_the_span() -> None:
    # vLLM decodes the leading pieces of a multi-token character as "" and the character on its last piece.
    positions = _tokens(("say", -0.1), ("", -1.0), ("", -0.7), ("é", -0.5), (" ok", -0.1))
    assert [t.logprob for t in action_span(positions, "é ok")] == [-1.0, -0.7, -0.5, -0.1]


@pytest.mark.parametrize(
    ("positions", "action", "message"),
    [
        (_tokens(("say", -0.1), ("cd", -0.2), (" /", -0.3)), "ls -la", "does not end with the action"),
        (_tokens(("la", -0.3)), "ls -la", "first prompt token"),
        (_tokens(("ls", -0.3)), "  \n", "no visible characters"),
    ],
)
def test_action_span_refuses_what_it_cannot_match(
    positions: tuple[TokenLogprob | None, ...], action: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        action_span(positions, action)


# --- PPL -------------------------------------------------------------------------------------------------


async def test_ppl_from_actor_logprobs_needs_no_endpoint() -> None:
    result = await PerplexityCritic(None, PromptSet()).score(_input(actor_logprobs=(-0.1, -0.2, -0.6)))

    assert result.score == pytest.approx(E(-0.3)) == pytest.approx(0.7408182206817179)
    assert result.error is None
    assert result.stats.requests == 0


async def test_ppl_prefers_logged_logprobs_over_teacher_forcing(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    result = await PerplexityCritic(backend, PromptSet()).score(_input(actor_logprobs=(-1.0,)))

    assert result.score == pytest.approx(E(-1.0))
    assert openai_server.requests == []


async def test_ppl_by_teacher_forcing_sends_the_action_as_an_open_reply(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    positions = [*PREFIX, _pos("ls", -0.2), _pos(" -", -0.5), _pos("la", -0.3)]
    openai_server.responder = lambda body, i: Reply("\n", prompt_logprobs=positions)

    result = await PerplexityCritic(backend, PromptSet()).score(_input())

    # 1/PPL = exp(mean(-0.2, -0.5, -0.3)) = exp(-1/3)
    assert result.score == pytest.approx(0.7165313105737893)
    assert result.stats.requests == 1
    body = openai_server.requests[0]
    assert body["prompt_logprobs"] == 20
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False
    assert body["max_completion_tokens"] == 1
    assert body["temperature"] == 0.0
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant"]
    assert body["messages"][-1] == {"role": "assistant", "content": "ls -la"}
    # No actor prompt in the stream: the generic agent prompt, with the task, history and state in the user turn.
    assert "choose the single next action" in body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    assert "list every file with its permissions" in user and "Step 1: pwd" in user and "/testbed" in user


async def test_the_streams_actor_prompt_is_the_system_message(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    positions = [*PREFIX, _pos("ls -la", -0.4)]
    openai_server.responder = lambda body, i: Reply("\n", prompt_logprobs=positions)

    result = await PerplexityCritic(backend, PromptSet()).score(_input(actor_prompt=ACTOR_PROMPT))

    assert result.score == pytest.approx(E(-0.4))
    assert openai_server.requests[0]["messages"][0] == {"role": "system", "content": ACTOR_PROMPT}


async def test_ppl_without_endpoint_or_logged_logprobs_is_not_available() -> None:
    result = await PerplexityCritic(None, PromptSet()).score(_input())

    assert _not_available(result)
    assert "no actor_logprobs" in result.error


async def test_ppl_on_a_server_without_prompt_logprobs_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply("x")  # an OpenAI-like server ignores the vLLM fields

    result = await PerplexityCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "no prompt_logprobs" in result.error
    assert result.stats.requests == 1


async def test_ppl_when_the_template_changed_the_action_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    positions = [*PREFIX, _pos("ls", -0.2), _pos(" -l", -0.5)]
    openai_server.responder = lambda body, i: Reply("\n", prompt_logprobs=positions)

    result = await PerplexityCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "does not end with the action" in result.error


async def test_ppl_on_a_server_known_to_ignore_continuation_is_not_available_and_sends_nothing(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    backend.transport.unsupported["continue_final_message"] = why = "llama-cpp-python answers afresh"

    result = await PerplexityCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert result.error == f"{NOT_AVAILABLE}: continue_final_message cannot be used here: {why}"
    assert result.stats.requests == 0 and openai_server.requests == []


async def test_ppl_endpoint_failure_is_an_error_not_a_crash(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply.error(400, body={"error": {"message": "unknown field"}})

    result = await PerplexityCritic(backend, PromptSet()).score(_input())

    assert result.score is None
    assert result.error.startswith("endpoint failed: 400")
    assert result.stats.requests == 1


# --- ME --------------------------------------------------------------------------------------------------


def test_top_k_entropy_is_renormalised_over_the_listed_tokens() -> None:
    assert top_k_entropy([("a", math.log(0.5)), ("b", math.log(0.5))]) == pytest.approx(math.log(2))
    # 0.6 and 0.2 renormalise to 0.75 and 0.25.
    assert top_k_entropy([("a", math.log(0.6)), ("b", math.log(0.2))]) == pytest.approx(0.5623351446188083)
    assert top_k_entropy([("a", 0.0)]) == 0.0
    with pytest.raises(ValueError, match="no top alternatives"):
        top_k_entropy([])


async def test_me_by_teacher_forcing_uses_the_top_k_of_each_action_token(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    positions = [
        *PREFIX,
        _pos("ls", math.log(0.5), [("ls", math.log(0.5)), ("cd", math.log(0.5))]),
        _pos(" -", math.log(0.6), [(" -", math.log(0.6)), (" |", math.log(0.2))]),
        # Ranked 3rd, below K = 2: vLLM still lists it first, but it is not one of the top 2.
        _pos("la", -3.0, [("l", -0.1), ("a", -0.5)], rank=3),
    ]
    openai_server.responder = lambda body, i: Reply("\n", prompt_logprobs=positions)
    critic = MeanEntropyCritic(backend, PromptSet(), BaselineConfig(prompt_logprobs=2))

    result = await critic.score(_input(actor_logprobs=(-9.0, -9.0, -9.0)))  # not used: no alternatives there

    # H = ln 2 = 0.693147, -(0.75 ln 0.75 + 0.25 ln 0.25) = 0.562335, and for (e^-0.1, e^-0.5) renormalised
    # 0.673540; exp(-mean H) = exp(-0.643007)
    assert result.score == pytest.approx(0.5257089720120964)
    assert openai_server.requests[0]["prompt_logprobs"] == 2
    assert "truncated to the top 2" in result.raw


async def test_me_with_a_token_without_alternatives_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    positions = [*PREFIX, _pos("ls -la", -5.0, rank=40)]  # outside the top 20 and nothing else listed
    openai_server.responder = lambda body, i: Reply("\n", prompt_logprobs=positions)

    result = await MeanEntropyCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "no top alternatives" in result.error


async def test_me_from_logged_logprobs_alone_is_not_available_by_default() -> None:
    result = await MeanEntropyCritic(None, PromptSet()).score(_input(actor_logprobs=(-0.1, -0.5)))

    assert _not_available(result)
    assert "me_surprisal" in result.error


async def test_me_surprisal_estimate_from_logged_logprobs_needs_no_endpoint() -> None:
    critic = MeanEntropyCritic(None, PromptSet(), BaselineConfig(me_surprisal=True))

    result = await critic.score(_input(actor_logprobs=(-0.1, -0.5)))

    # H_i ~ -log p(x_i): exp(-mean H) = exp(mean log p) = exp(-0.3), PPL's number.
    assert result.score == pytest.approx(0.7408182206817179)
    assert "surprisal" in result.raw
    assert result.stats.requests == 0


async def test_me_without_anything_is_not_available() -> None:
    assert _not_available(await MeanEntropyCritic(None, PromptSet()).score(_input()))


# --- P(True) ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("token", "cls"),
    [
        ("True", "true"),
        (" true", "true"),
        ("TRUE", "true"),
        ("True.", "true"),
        ("\nTrue", "true"),
        ("**False", "false"),
        (" false,", "false"),
        ("Tr", None),
        ("Yes", None),
        ("untrue", None),
    ],
)
def test_answer_class_accepts_case_and_punctuation_variants_only(token: str, cls: str | None) -> None:
    assert answer_class(token) == cls


async def test_ptrue_is_the_true_mass_against_the_false_mass(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    top = [("True", -0.2), ("False", -1.0), ("true", -2.0), ("Yes", -3.0)]
    openai_server.responder = lambda body, i: Reply("True", logprobs=[[("True", -0.2, top)]])

    result = await PTrueCritic(backend, PromptSet(), FIRST_TOKEN).score(_input(reasoning="show permissions"))

    # (e^-0.2 + e^-2) / (e^-0.2 + e^-2 + e^-1); "Yes" is not a variant.
    assert result.score == pytest.approx(0.7217136051094603)
    body = openai_server.requests[0]
    assert body["logprobs"] is True
    assert body["top_logprobs"] == 20
    assert body["max_completion_tokens"] == 1
    assert body["temperature"] == 0.0
    assert "True or False" in body["messages"][0]["content"]
    user = body["messages"][1]["content"]
    assert "ls -la" in user and "show permissions" in user and "Step 1: pwd" in user


async def test_ptrue_with_only_true_listed_is_one(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    openai_server.responder = lambda body, i: Reply(" TRUE", logprobs=[[(" TRUE", -0.01, [(" TRUE", -0.01)])]])

    result = await PTrueCritic(backend, PromptSet(), FIRST_TOKEN).score(_input())

    assert result.score == 1.0


async def test_ptrue_reads_the_chosen_token_when_no_alternatives_came(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply("False", logprobs=[[("False", -0.1)]])

    result = await PTrueCritic(backend, PromptSet(), FIRST_TOKEN).score(_input())

    assert result.score == 0.0


async def test_ptrue_without_true_or_false_tokens_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    top = [("Sure", -0.1), ("The", -2.5)]
    openai_server.responder = lambda body, i: Reply("Sure", logprobs=[[("Sure", -0.1, top)]])

    result = await PTrueCritic(backend, PromptSet(), FIRST_TOKEN).score(_input())

    assert _not_available(result)
    assert "no True or False token" in result.error and "'Sure'" in result.error


async def test_ptrue_without_logprobs_is_not_available(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    openai_server.responder = lambda body, i: Reply("True")

    result = await PTrueCritic(backend, PromptSet(), FIRST_TOKEN).score(_input())

    assert _not_available(result)
    assert "no log-probs" in result.error
    assert result.raw == "True"


def _forced_replies(true: list[PromptPosition], false: list[PromptPosition]) -> Any:
    """A responder giving the prompt log-probs of the question answered "True" or "False" (its last message)."""
    return lambda body, i: Reply("x", prompt_logprobs=true if body["messages"][-1]["content"] == "True" else false)


async def test_ptrue_forced_compares_both_whole_answers(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    # "True" as two tokens, "False" as one: whole-answer probabilities, whatever their tokens or ranks.
    true = [*PREFIX, _pos("Tr", -0.5, rank=4000), _pos("ue", -0.5)]
    false = [*PREFIX, _pos("False", -2.0, rank=7000)]
    openai_server.responder = _forced_replies(true, false)

    result = await PTrueCritic(backend, PromptSet()).score(_input(reasoning="show permissions"))

    # p_T / (p_T + p_F) = e^-1 / (e^-1 + e^-2)
    assert result.score == pytest.approx(E(-1.0) / (E(-1.0) + E(-2.0)))
    assert result.stats.requests == 2
    assert json.loads(result.raw) == {"method": "forced", "logprob_true": -1.0, "logprob_false": -2.0}
    answers = sorted(body["messages"][-1]["content"] for body in openai_server.requests)
    assert answers == ["False", "True"]
    for body in openai_server.requests:
        assert body["prompt_logprobs"] == 1
        assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
        assert body["max_completion_tokens"] == 1 and body["temperature"] == 0.0
        assert "logprobs" not in body and "top_logprobs" not in body
        assert "True or False" in body["messages"][0]["content"]
        assert "show permissions" in body["messages"][1]["content"]


def test_forced_p_true_does_not_underflow() -> None:
    assert forced_p_true(-2000.0, -2001.0) == pytest.approx(1 / (1 + E(-1.0)))
    assert forced_p_true(-1.0, -1.0) == 0.5
    assert forced_p_true(-1000.0, 0.0) == 0.0


async def test_ptrue_forced_without_prompt_logprobs_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply("True")

    result = await PTrueCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "no prompt_logprobs" in result.error
    assert result.stats.requests == 2


async def test_ptrue_forced_when_the_template_changed_the_answer_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = _forced_replies(
        [*PREFIX, _pos("Tr", -0.5), _pos("ux", -0.5)], [*PREFIX, _pos("False", -2.0)]
    )

    result = await PTrueCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "True: the prompt does not end with the action" in result.error


# --- CoT -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("It lists the files.\nConfidence: 73", 73.0),
        ("My confidence: moderate at first.\n**Confidence:** 85%", 85.0),
        ("Confidence (0-100): 62", 62.0),
        ('{"confidence": 55}', 55.0),
        ("Confidence: 0.7", 0.7),  # the asked scale is 0-100: no guessing that 0.7 meant 70
        ("confidence = 100", 100.0),
    ],
)
def test_parse_confidence_line_reads_the_last_confidence(text: str, value: float) -> None:
    assert parse_confidence_line(text) == value


@pytest.mark.parametrize(
    ("text", "message"),
    [("I am fairly sure.", "no final line"), ("Confidence: 140", "outside 0-100"), ("Confidence: -5", "outside")],
)
def test_parse_confidence_line_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_confidence_line(text)


async def test_cot_rescales_the_stated_confidence(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    reply = "The task needs permissions; `ls -la` shows them.\nConfidence: 73"
    openai_server.responder = lambda body, i: Reply(reply)

    result = await CoTCritic(backend, PromptSet()).score(_input())

    assert result.score == pytest.approx(0.73)
    assert result.raw == reply
    body = openai_server.requests[0]
    assert body["temperature"] == 0.0
    assert body["max_completion_tokens"] == 1300
    assert "step by step" in body["messages"][0]["content"]
    assert "Confidence: <integer from 0 to 100>" in body["messages"][0]["content"]
    # The confidence is also asked for under structure, which a vLLM server enforces.
    schema = body["response_format"]["json_schema"]
    assert schema["name"] == "cot_confidence"
    assert schema["schema"]["properties"]["confidence"] == {"type": "integer", "minimum": 0, "maximum": 100}
    assert list(schema["schema"]["properties"]) == ["reasoning", "confidence"]
    # The reasoning's length bound survives OpenAI's strict cut as a pattern, so the reply closes in this mode.
    # At least one non-empty step: without the lower bounds SmolLM2-135M skipped the reasoning on 14 of 16 steps.
    line = {"type": "string", "pattern": "^[^\\n]{1,100}$"}
    assert schema["schema"]["properties"]["reasoning"] == {
        "type": "array",
        "items": line,
        "minItems": 1,
        "maxItems": 12,
    }


@pytest.mark.parametrize(
    ("reply", "valid"),
    [
        ({"reasoning": [], "confidence": 0}, False),
        ({"reasoning": [""], "confidence": 0}, False),
        ({"reasoning": ["the file exists"], "confidence": 80}, True),
        ({"reasoning": ["x"] * 13, "confidence": 80}, False),
    ],
)
def test_cot_schema_demands_some_reasoning(reply: dict[str, object], valid: bool) -> None:
    import jsonschema

    from ceb.stages.baselines.cot import COT_SCHEMA

    assert jsonschema.Draft202012Validator(COT_SCHEMA).is_valid(reply) is valid


async def test_cot_reads_the_structured_reply(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    reply = '{"reasoning":"It lists permissions; confidence: 20 would be too low.","confidence":81}'
    openai_server.responder = lambda body, i: Reply(reply)

    result = await CoTCritic(backend, PromptSet()).score(_input())

    assert result.score == pytest.approx(0.81)
    assert result.stats.requests == 1


async def test_cot_re_asks_an_unreadable_reply(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    replies = ["It looks right to me.", "Confidence: 40%"]
    openai_server.responder = lambda body, i: Reply(replies[i])

    result = await CoTCritic(backend, PromptSet()).score(_input())

    assert result.score == pytest.approx(0.4)
    assert result.stats.requests == 2
    second = openai_server.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": "It looks right to me."}
    assert second[-1]["content"].startswith(REASK_PREFIX)


async def test_cot_gives_up_after_its_re_asks(openai_server: OpenAITestServer, backend: OpenAIBackend) -> None:
    openai_server.responder = lambda body, i: Reply("Confidence: 140")

    result = await CoTCritic(backend, PromptSet(), readout=CriticConfig(format_retries=1)).score(_input())

    assert result.score is None
    assert result.error == "unreadable reply: confidence 140 is outside 0-100"
    assert len(openai_server.requests) == 2


# --- Verbalization ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (" 85", 0.85),
        ("85%", 0.85),
        (" 0.85", 0.85),
        ("1.0", 1.0),
        ("1", 0.01),
        ("42.5\n", 0.425),
        ("0.5%", 0.005),
        (" **70**", 0.70),
        ("0", 0.0),
    ],
)
def test_parse_stated_confidence_scales(text: str, value: float) -> None:
    assert parse_stated_confidence(text) == pytest.approx(value)


@pytest.mark.parametrize(("text", "message"), [(" high", "does not start"), ("150", "above 100"), ("-3", "negative")])
def test_parse_stated_confidence_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_stated_confidence(text)


async def test_verbalized_continues_the_actors_own_reply(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply(" 85")

    result = await VerbalizedCritic(backend, PromptSet()).score(_input(actor_prompt=ACTOR_PROMPT))

    assert result.score == pytest.approx(0.85)
    body = openai_server.requests[0]
    assert body["messages"][0] == {"role": "system", "content": ACTOR_PROMPT}
    assert 'write "Confidence (0-100): <number>"' in body["messages"][1]["content"]
    assert body["messages"][-1] == {"role": "assistant", "content": "ls -la\nConfidence (0-100):"}
    assert body["continue_final_message"] is True
    assert body["add_generation_prompt"] is False
    assert body["max_completion_tokens"] == 8
    assert "prompt_logprobs" not in body
    # Where the server enforces it, the continuation can only be an integer from 0 to 100.
    assert body["response_format"]["json_schema"]["schema"] == {"type": "integer", "minimum": 0, "maximum": 100}


async def test_verbalized_unreadable_continuation_is_an_error(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = lambda body, i: Reply(" very high")

    result = await VerbalizedCritic(backend, PromptSet()).score(_input())

    assert result.score is None
    assert result.error.startswith("unreadable reply: ")
    assert result.raw == " very high"
    assert len(openai_server.requests) == 1


# --- PRO -------------------------------------------------------------------------------------------------


def test_softmax_weight() -> None:
    assert softmax_weight(-1.0, []) == 1.0
    assert softmax_weight(-1.0, [-1.0]) == pytest.approx(0.5)
    assert softmax_weight(-1000.0, [-1001.0]) == pytest.approx(1 / (1 + E(-1)))  # no underflow


def _pro_responder(samples: list[tuple[str, list[float]]] | None) -> Any:
    tf = [*PREFIX, _pos("ls", -0.2), _pos(" -", -0.5), _pos("la", -0.3)]

    def respond(body: dict[str, Any], i: int) -> Reply:
        if "prompt_logprobs" in body:
            return Reply("\n", prompt_logprobs=tf)
        texts = ["ls"] * body["n"] if samples is None else [text for text, _ in samples]
        logprobs = None if samples is None else [[(f"t{j}", lp) for j, lp in enumerate(lps)] for _, lps in samples]
        return Reply(texts, logprobs=logprobs)

    return respond


async def test_pro_is_the_frozen_actions_weight_among_distinct_samples(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = _pro_responder(
        [
            ("ls -la", [-0.1, -0.2]),  # the frozen action's class: keeps the teacher-forced -1.0 instead
            ("ls   -la\n", [-0.35]),  # the same after white space is collapsed
            ("ls", [-0.2, -0.3]),  # -0.5
            ("ls", [-0.6]),  # a duplicate: its class keeps the first -0.5
            ("pwd", [-1.5, -0.5]),  # -2.0
        ]
    )

    result = await PROCritic(backend, PromptSet()).score(_input())

    # e^-1 / (e^-1 + e^-0.5 + e^-2), with -1.0 = -0.2 - 0.5 - 0.3 from teacher forcing
    assert result.score == pytest.approx(0.33149896042409155)
    assert result.stats.requests == 2
    sample, forced = openai_server.requests
    assert sample["n"] == 5
    assert sample["temperature"] == 1.0
    assert sample["logprobs"] is True
    # Long enough to write the frozen action "ls -la" and show a sample differs from it, and no longer.
    assert sample["max_completion_tokens"] == len("ls -la") + SAMPLE_SLACK_TOKENS
    assert [m["role"] for m in sample["messages"]] == ["system", "user"]
    assert forced["messages"][:2] == sample["messages"]
    assert forced["messages"][-1] == {"role": "assistant", "content": "ls -la"}
    assert forced["prompt_logprobs"] == 20


def test_pro_sample_budget_is_the_actions_length_up_to_the_cap() -> None:
    assert sample_budget("ls", 256) == 2 + SAMPLE_SLACK_TOKENS
    assert sample_budget("x" * 1000, 256) == 256
    assert sample_budget("", 256) == SAMPLE_SLACK_TOKENS


async def test_pro_without_sample_logprobs_is_not_available(
    openai_server: OpenAITestServer, backend: OpenAIBackend
) -> None:
    openai_server.responder = _pro_responder(None)

    result = await PROCritic(backend, PromptSet()).score(_input())

    assert _not_available(result)
    assert "no log-probs for the sampled actions" in result.error
    assert len(openai_server.requests) == 1  # no teacher forcing without samples to compare with


# --- the registry and the prompts ------------------------------------------------------------------------


EXPECTED = {
    "ppl": PerplexityCritic,
    "me": MeanEntropyCritic,
    "ptrue": PTrueCritic,
    "cot": CoTCritic,
    "verbalized": VerbalizedCritic,
    "pro": PROCritic,
}


def _stages(chat: Any) -> Stages:
    return Stages(critic=UnavailableCritic("not the LLM critic"), hindsight=None, chat=chat)  # type: ignore[arg-type]


async def test_the_catalogue_builds_each_baseline_over_an_endpoint(backend: OpenAIBackend) -> None:
    baselines = {m.name for m in all_methods() if m.group == "baseline" and not m.uses_llm_critic}
    assert baselines == set(EXPECTED)
    for name, cls in EXPECTED.items():
        spec = resolve_method(name)
        assert not spec.use_bank and not spec.use_repetition_flag
        assert isinstance(build_critic(spec, load_config(), _stages(backend)), cls)


@pytest.mark.parametrize("name", ["ptrue", "cot", "verbalized", "pro"])
def test_a_baseline_that_needs_an_llm_is_not_available_without_one(name: str) -> None:
    critic = build_critic(resolve_method(name), load_config(), _stages(None))
    assert isinstance(critic, UnavailableCritic) and name in critic.reason


def test_ppl_and_me_build_without_an_actor() -> None:
    assert isinstance(build_critic(resolve_method("ppl"), load_config(), _stages(None)), PerplexityCritic)
    assert isinstance(build_critic(resolve_method("me"), load_config(), _stages(None)), MeanEntropyCritic)


@pytest.mark.parametrize("field", ["prompt_logprobs", "pro_samples", "ptrue_top_logprobs"])
def test_settings_refuse_counts_below_one(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        BaselineConfig(**{field: 0})


def test_a_family_may_replace_a_baseline_prompt(tmp_path: Any) -> None:
    (tmp_path / "shell").mkdir()
    (tmp_path / "shell" / "ptrue_user.j2").write_text("MINE {{ action }}")
    system, user = ptrue_first_token_request(PromptSet(tmp_path), _input(), BaselineConfig()).messages

    assert user["content"] == "MINE ls -la\n"
    assert "True or False" in system["content"]  # no shell/ptrue_system.j2: the base one


def test_a_broken_family_prompt_is_reported_not_replaced(tmp_path: Any) -> None:
    (tmp_path / "shell").mkdir()
    (tmp_path / "shell" / "cot_user.j2").write_text("{{ no_such_variable }}")
    with pytest.raises(ConfigError, match="shell/cot_user.j2"):
        cot_request(PromptSet(tmp_path), _input(), BaselineConfig(), CriticConfig())
