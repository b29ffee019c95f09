"""Replies: deterministic, seeded, in the shapes the critic and hindsight stages ask for."""

from __future__ import annotations

import json
import math
import random
from typing import Any

import orjson
import pytest
from openai import AsyncOpenAI

from ceb.backends.base import ChatRequest, RetryPolicy
from ceb.backends.openai import OpenAIBackend, StructuredOutput
from ceb.config import BackendConfig, CriticConfig, HindsightConfig
from ceb.data.trajectory import Step, Trajectory
from ceb.sim import SimConfig, SimServer, classify
from ceb.sim.replies import REPETITION_MARKER
from ceb.stages.asking import REASK_PREFIX
from ceb.stages.base import CriticInput
from ceb.stages.critic import CRITIC_SCHEMA, LLMCritic
from ceb.stages.hindsight import LLMHindsight, labels_schema
from ceb.stages.parsing import parse_labels, parse_score
from ceb.stages.templates import PromptSet
from tests.sim.conftest import StartSim

CRITIC_MESSAGES = [
    {"role": "system", "content": "You judge actions."},
    {"role": "user", "content": 'Proposed command: ls\nReply: {"score": <number>}'},
]
CRITIC_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "critic_score", "schema": CRITIC_SCHEMA, "strict": True},
}
NO_WAIT = RetryPolicy(max_attempts=1, backoff_s=0, max_backoff_s=0)


def _labels_format(n: int) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "hindsight_labels", "schema": labels_schema(n)}}


def _backend(server: SimServer, mode: StructuredOutput = "json_schema") -> OpenAIBackend:
    settings = BackendConfig(
        base_url=server.base_url, model=server.config.model, api_key_env="CEB_SIM_UNSET_KEY", structured_output=mode
    )
    return OpenAIBackend(settings, retry=NO_WAIT)


def _trajectory(n_steps: int, task: str = "count the python files") -> Trajectory:
    steps = tuple(Step(state=f"state {i}", action=f"cmd {i}", observation=f"out {i}") for i in range(n_steps))
    return Trajectory(id="t1", task=task, domain="shell", steps=steps)


async def _content(client: AsyncOpenAI, **kw: Any) -> list[str]:
    response = await client.chat.completions.create(model="ceb-simulator", **kw)
    return [c.message.content or "" for c in sorted(response.choices, key=lambda c: c.index)]


# --- determinism -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_same_critic_request_gets_the_same_valid_score(sim_client: AsyncOpenAI) -> None:
    first = await _content(sim_client, messages=CRITIC_MESSAGES, temperature=0.0, response_format=CRITIC_FORMAT)
    again = await _content(sim_client, messages=CRITIC_MESSAGES, temperature=0.0, response_format=CRITIC_FORMAT)
    assert first == again
    reply = json.loads(first[0])
    assert set(reply) == {"score", "reason"}
    assert 0.0 <= reply["score"] <= 1.0 and round(reply["score"], 3) == reply["score"]
    assert parse_score(first[0]) == reply["score"]


@pytest.mark.anyio
async def test_a_re_ask_after_an_unreadable_reply_gets_the_first_answer(sim_client: AsyncOpenAI) -> None:
    first = await _content(sim_client, messages=CRITIC_MESSAGES, temperature=0.0, response_format=CRITIC_FORMAT)
    reask = [
        *CRITIC_MESSAGES,
        {"role": "assistant", "content": "I think it is fine"},
        {"role": "user", "content": f"{REASK_PREFIX}no JSON object. Reply again with only the JSON object."},
    ]
    assert await _content(sim_client, messages=reask, temperature=0.0, response_format=CRITIC_FORMAT) == first


@pytest.mark.anyio
async def test_the_reply_depends_on_the_prompt_and_on_the_simulator_seed(start_sim: StartSim) -> None:
    replies = []
    for seed in (0, 0, 1):
        server = await start_sim(SimConfig(time_scale=0, seed=seed))
        async with AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0) as client:
            replies.append(
                [
                    (await _content(client, messages=[{"role": "user", "content": f"Task {i}"}], temperature=0))[0]
                    for i in range(5)
                ]
            )
    assert replies[0] == replies[1]
    assert replies[0] != replies[2]
    assert len(set(replies[0])) > 1


@pytest.mark.anyio
async def test_at_temperature_zero_all_choices_and_seeds_agree(sim_client: AsyncOpenAI) -> None:
    kw: dict[str, Any] = {"messages": CRITIC_MESSAGES, "response_format": _labels_format(12), "temperature": 0.0}
    choices = await _content(sim_client, n=4, seed=1, **kw)
    assert len(choices) == 4 and len(set(choices)) == 1
    assert await _content(sim_client, seed=2, **kw) == choices[:1]


@pytest.mark.anyio
async def test_above_temperature_zero_choices_and_seeds_differ_reproducibly(sim_client: AsyncOpenAI) -> None:
    kw: dict[str, Any] = {"messages": CRITIC_MESSAGES, "response_format": _labels_format(12), "temperature": 0.7}
    choices = await _content(sim_client, n=6, seed=5, **kw)
    assert len(set(choices)) > 1
    assert await _content(sim_client, n=6, seed=5, **kw) == choices
    assert await _content(sim_client, n=6, seed=6, **kw) != choices
    for text in choices:
        assert len(parse_labels(text, 12)) == 12


# --- dispatch ------------------------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["json_schema", "vllm"])
async def test_hindsight_schema_gets_exactly_its_label_count(sim_server: SimServer, mode: StructuredOutput) -> None:
    request = ChatRequest(
        messages=tuple(CRITIC_MESSAGES), json_schema=labels_schema(9), schema_name="hindsight_labels", n=3
    )
    async with _backend(sim_server, mode) as backend:
        response = await backend.complete(request)
    assert len(response.completion.texts) == 3
    for text in response.completion.texts:
        assert set(parse_labels(text, 9)) <= {0, 1}
    assert sim_server.stats.by_kind == {"labels": 1}


@pytest.mark.anyio
async def test_the_real_critic_and_hindsight_stages_read_the_replies(sim_server: SimServer) -> None:
    prompts = PromptSet()
    async with _backend(sim_server) as backend:
        critic = LLMCritic(backend, prompts, CriticConfig())
        result = await critic.score(CriticInput(domain="shell", task="count files", step=0, state="", action="ls"))
        votes = await LLMHindsight(backend, prompts, HindsightConfig(seed=1)).label(_trajectory(5), votes=3)
    assert result.error is None and result.score is not None and 0.0 <= result.score <= 1.0
    assert votes.failed_votes == 0 and len(votes.votes) == 3
    assert all(len(v) == 5 for v in votes.votes)
    assert len(votes.pseudo_labels) == 5


@pytest.mark.anyio
async def test_without_a_schema_the_prompts_are_recognised_and_the_step_count_read(sim_server: SimServer) -> None:
    prompts = PromptSet()
    async with _backend(sim_server, "none") as backend:
        critic = LLMCritic(backend, prompts, CriticConfig())
        result = await critic.score(CriticInput(domain="web", task="buy a lamp", step=0, state="<html/>", action="x"))
        votes = await LLMHindsight(backend, prompts, HindsightConfig(seed=1)).label(_trajectory(7), votes=2)
    assert result.score is not None and result.error is None
    assert votes.failed_votes == 0 and [len(v) for v in votes.votes] == [7, 7]
    assert sim_server.stats.by_kind == {"critic": 1, "labels": 2}


@pytest.mark.anyio
async def test_the_repetition_note_lowers_the_critic_score(sim_server: SimServer) -> None:
    async with _backend(sim_server) as backend:
        critic = LLMCritic(backend, PromptSet(), CriticConfig())
        scores: dict[bool, list[float]] = {False: [], True: []}
        for flag in (False, True):
            for i in range(25):
                inp = CriticInput(domain="shell", task=f"task {i}", step=1, state="", action="ls", repetition_flag=flag)
                assert (REPETITION_MARKER in critic.messages(inp)[1]["content"]) is flag
                result = await critic.score(inp)
                assert result.score is not None
                scores[flag].append(result.score)
    mean = {flag: sum(v) / len(v) for flag, v in scores.items()}
    assert mean[True] < 0.45 < 0.5 < mean[False]


def test_dispatch_by_schema_name_properties_and_prompt_text() -> None:
    assert classify({"messages": CRITIC_MESSAGES}).kind == "critic"  # the prompt shows {"score"
    assert classify({"messages": [{"role": "user", "content": "hi"}]}).kind == "text"
    plan = classify({"messages": [{"role": "user", "content": "hi"}], "structured_outputs": {"json": labels_schema(4)}})
    assert (plan.kind, plan.n_labels) == ("labels", 4)
    named = {"type": "json_schema", "json_schema": {"name": "critic_score", "schema": {}}}
    assert classify({"messages": [], "response_format": named}).kind == "critic"
    as_text = {"messages": [], "guided_json": json.dumps({"properties": {"score": {"type": "number"}}})}
    assert classify(as_text).kind == "critic"


# --- free text, logprobs, replier ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_true_false_question_gets_both_answers_in_top_logprobs(sim_client: AsyncOpenAI) -> None:
    answers = set()
    for i in range(12):
        messages = [{"role": "user", "content": f"Claim {i}. Answer True or False."}]
        response = await sim_client.chat.completions.create(
            model="ceb-simulator", messages=messages, logprobs=True, top_logprobs=2, temperature=0
        )
        choice = response.choices[0]
        answers.add(choice.message.content)
        assert choice.logprobs is not None and choice.logprobs.content is not None
        (first,) = choice.logprobs.content
        assert first.token == choice.message.content
        assert {t.token for t in first.top_logprobs} == {"True", "False"}
        assert first.top_logprobs[0].token == first.token
        p_true = sum(math.exp(t.logprob) for t in first.top_logprobs if t.token == "True")
        assert sum(math.exp(t.logprob) for t in first.top_logprobs) == pytest.approx(1.0)
        assert (p_true > 0.5) is (first.token == "True")
    assert answers == {"True", "False"}


@pytest.mark.anyio
async def test_logprobs_cover_every_choice_token_with_ranked_alternatives(sim_client: AsyncOpenAI) -> None:
    response = await sim_client.chat.completions.create(
        model="ceb-simulator",
        messages=CRITIC_MESSAGES,
        response_format=CRITIC_FORMAT,
        n=3,
        temperature=1.0,
        logprobs=True,
        top_logprobs=4,
    )
    assert len(response.choices) == 3
    for choice in response.choices:
        assert choice.logprobs is not None and choice.logprobs.content is not None
        tokens = choice.logprobs.content
        assert "".join(t.token for t in tokens) == choice.message.content
        for t in tokens:
            assert t.logprob <= 0 and t.bytes == list(t.token.encode())
            assert len(t.top_logprobs) == 4
            assert t.top_logprobs[0].token == t.token and t.top_logprobs[0].logprob == t.logprob
            values = [alt.logprob for alt in t.top_logprobs]
            assert values == sorted(values, reverse=True) and len(set(values)) == 4
    assert response.usage is not None
    assert response.usage.completion_tokens == sum(
        len(c.logprobs.content or []) for c in response.choices if c.logprobs
    )


@pytest.mark.anyio
async def test_a_custom_replier_answers_and_max_tokens_cuts_the_reply(start_sim: StartSim) -> None:
    seen: list[int] = []

    def replier(body: dict[str, Any], choice_index: int, rng: random.Random) -> str:
        seen.append(choice_index)
        return f"choice {choice_index} says {rng.randint(0, 9)} and more words here"

    server = await start_sim(replier=replier)
    async with AsyncOpenAI(base_url=server.base_url, api_key="EMPTY", max_retries=0) as client:
        full = await client.chat.completions.create(model="ceb-simulator", messages=CRITIC_MESSAGES, n=2)
        cut = await client.chat.completions.create(
            model="ceb-simulator", messages=CRITIC_MESSAGES, max_completion_tokens=3
        )
    assert seen == [0, 1, 0]
    assert [c.message.content for c in full.choices][0].startswith("choice 0 says")
    assert [c.finish_reason for c in full.choices] == ["stop", "stop"]
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content == "choice 0 says"
    assert cut.usage is not None and cut.usage.completion_tokens == 3


# --- the baselines' own reply shapes ------------------------------------------------------------------------------


def _situation() -> dict[str, Any]:
    from ceb.stages.critic import situation_context

    inp = CriticInput(domain="shell", task="list the files", step=0, state="", action="ls -la")
    return situation_context(inp)


def test_cot_and_stated_confidence_prompts_get_replies_the_baselines_can_read() -> None:
    from ceb.sim.replies import default_replier
    from ceb.stages.baselines.cot import parse_confidence_line
    from ceb.stages.baselines.verbalized import parse_stated_confidence

    prompts = PromptSet()
    cot_user = prompts.render_or_base("shell", "cot_user", _situation())
    cot = {"messages": [{"role": "user", "content": cot_user}], "temperature": 0}
    assert classify(cot).kind == "cot"
    cue = prompts.render_or_base("shell", "verbalized_cue", _situation())
    stated = {
        "messages": [{"role": "user", "content": "act"}, {"role": "assistant", "content": "ls -la\n" + cue.strip()}],
        "continue_final_message": True,
    }
    assert classify(stated).kind == "stated"
    # Without continue_final_message the cue is just text in a finished turn.
    assert classify({**stated, "continue_final_message": False}).kind == "text"
    for seed in range(20):
        rng = random.Random(seed)
        c = parse_confidence_line(default_replier(cot, 0, rng)) / 100
        v = parse_stated_confidence(default_replier(stated, 0, rng))
        assert 0.0 <= c <= 1.0 and 0.0 <= v <= 1.0


@pytest.mark.anyio
async def test_prompt_logprobs_list_the_prompt_token_first_as_vllm_does(sim_server: SimServer) -> None:
    backend = _backend(sim_server)
    try:
        request = ChatRequest(
            messages=({"role": "user", "content": "print the file"}, {"role": "assistant", "content": "cat a.txt"}),
            max_tokens=1,
            extra={"prompt_logprobs": 3, "continue_final_message": True, "add_generation_prompt": False},
        )
        completion = (await backend.complete(request)).completion
    finally:
        await backend.aclose()
    positions = completion.prompt_logprobs
    assert positions is not None and positions[0] is None
    assert "".join(p.token for p in positions[1:]).endswith("cat a.txt")
    assert all(p is not None and p.rank is not None and p.rank >= 1 for p in positions[1:])
    assert any(p is not None and p.rank is not None and p.rank > 1 for p in positions[1:])


@pytest.mark.parametrize("top_k", [0, 1, 5, 20])
def test_synthetic_prompt_logprobs_are_vllms_shape(top_k: int) -> None:
    from ceb.sim.replies import _ALTERNATIVES, prompt_logprobs

    tokens = ["<s>", "ls", " -la", *_ALTERNATIVES, "ls", *_ALTERNATIVES]  # own tokens among the alternatives too
    text = bytes(orjson.dumps(prompt_logprobs(tokens, top_k, random.Random(3))))

    def no_repeated_key(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), keys
        return dict(pairs)

    positions = json.loads(text, object_pairs_hook=no_repeated_key)
    assert len(positions) == len(tokens) and positions[0] is None
    ranks_seen = set()
    for token, position in zip(tokens[1:], positions[1:], strict=True):
        own = next(iter(position.values()))
        assert own["decoded_token"] == token  # the prompt's own token first, as vLLM lists it
        ranks_seen.add(own["rank"])
        alternatives = list(position.values())[1:]
        assert len(alternatives) == (top_k - 1 if own["rank"] <= top_k else top_k)
        assert all(a["decoded_token"] != token and a["rank"] <= top_k for a in alternatives)
        by_rank = sorted(position.values(), key=lambda e: e["rank"])
        assert [e["rank"] for e in by_rank] == sorted({e["rank"] for e in by_rank})  # one entry per rank
        assert all(a["logprob"] > b["logprob"] for a, b in zip(by_rank, by_rank[1:], strict=False))
    assert 1 in ranks_seen and any(r > 1 for r in ranks_seen)
    assert text == bytes(orjson.dumps(prompt_logprobs(tokens, top_k, random.Random(3))))  # seeded
