"""The information constraint of paper section 3.1 and SCHEMA.md, checked on every prompt sent."""

import dataclasses

import anyio
import pytest

from ceb.backends.scripted import ScriptedChat
from ceb.config import RunConfig
from ceb.pipeline import run_scoring
from ceb.stages import LLMCritic, LLMHindsight, PromptSet
from ceb.stages.assembly import Stages
from tests.support.builders import default_reply, step, trajectory


def stream(secret: str, labels: tuple[int, ...]) -> list:
    """Three trajectories; every evaluation-only field carries ``secret`` or varies with ``labels``."""
    trajs = []
    for i in range(3):
        steps = [
            step(
                f"cmd_{i}_{t} --flag",
                observation=f"OBS_{i}_{t} output",
                state=f"STATE_{i}_{t}",
                label=labels[(i + t) % len(labels)],
                reward=0.1 * ((i + t + len(secret)) % 7),
                actor_logprobs=(-0.5, -float(len(secret))),
                reasoning=f"because {i} {t}",
            )
            for t in range(3)
        ]
        trajs.append(
            trajectory(
                f"traj-{i}",
                *steps,
                task=f"TASK_{i} do things",
                meta={"secret": secret, "gold": secret},
                env="fs_1",
            )
        )
    return trajs


def run_and_capture(trajs, methods=("ceb",)) -> list:
    chat = ScriptedChat(default_reply)
    prompts = PromptSet()
    stages = Stages(critic=LLMCritic(chat, prompts), hindsight=LLMHindsight(chat, prompts), chat=None)
    config = RunConfig(methods=methods, speculation=0)  # stream order: the requests are read by their position

    async def main(tmp):
        await run_scoring({"s": trajs}, config, tmp, stages=stages)

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        anyio.run(main, tmp)
    return chat.requests


def text(request) -> str:
    return "\n".join(m["content"] for m in request.messages)


def test_no_prompt_holds_evaluation_only_fields():
    requests = run_and_capture(stream("PLANTED_META_SECRET_93", (1, 0, 1)))
    assert requests
    for r in requests:
        t = text(r)
        assert "PLANTED_META_SECRET_93" not in t
        assert "fs_1" not in t  # env is not an input of Eq. 2
        assert "-22.0" not in t and "actor_logprobs" not in t


def test_prompts_do_not_change_when_labels_rewards_and_meta_change():
    a = [text(r) for r in run_and_capture(stream("A", (1, 0, 1)), methods=("ceb", "static"))]
    b = [text(r) for r in run_and_capture(stream("BBBBB", (0, 0, 0)), methods=("ceb", "static"))]
    assert sorted(a) == sorted(b)


def test_critic_never_sees_the_current_observation_or_anything_later():
    requests = run_and_capture(stream("x", (1, 0)))
    critic = [r for r in requests if r.stage == "critic"]
    assert len(critic) == 9
    # one lane, so the critic requests arrive in stream order: trajectory i, step t
    for n, r in enumerate(critic):
        i, t = divmod(n, 3)
        u = text(r)
        assert f"cmd_{i}_{t} --flag" in u
        for tt in range(3):
            assert (f"OBS_{i}_{tt}" in u) == (tt < t), (i, t, tt)  # o_t and later never shown
            if tt > t:
                assert f"cmd_{i}_{tt}" not in u and f"STATE_{i}_{tt}" not in u
        for later in range(i + 1, 3):
            assert f"TASK_{later}" not in u and f"cmd_{later}_" not in u and f"OBS_{later}_" not in u


def test_hindsight_sees_only_its_own_finished_trajectory():
    requests = run_and_capture(stream("x", (1, 0)))
    hindsight = [r for r in requests if r.stage == "hindsight"]
    assert len(hindsight) == 3 * RunConfig().ceb.votes
    for r in hindsight:
        u = text(r)
        own = [i for i in range(3) if f"TASK_{i}" in u]
        assert len(own) == 1
        i = own[0]
        assert all(f"OBS_{i}_{t}" in u for t in range(3))
        assert not any(f"cmd_{j}_" in u for j in range(3) if j != i)


def test_precedents_come_only_from_earlier_trajectories():
    requests = run_and_capture(stream("x", (1, 0)))
    critic = [r for r in requests if r.stage == "critic"]
    for n, r in enumerate(critic):
        i = n // 3
        u = text(r).split("Precedents from earlier trajectories:")[1]
        for j in range(3):
            if j >= i:
                assert f"cmd_{j}_" not in u.split("Terminal output before this command")[0], (n, j)
    # and the first trajectory met an empty bank
    assert "the bank has no records yet" in text(critic[0])


def test_blinded_copy_keeps_logprobs_and_drops_evaluation_fields():
    t = stream("S", (1,))[0]
    b = t.blinded()
    assert b.meta == {} and all(s.label is None and s.reward is None for s in b.steps)
    assert [s.actor_logprobs for s in b.steps] == [s.actor_logprobs for s in t.steps]
    assert dataclasses.replace(b, meta=t.meta).task == t.task


@pytest.mark.parametrize("domain", ["shell", "web", "mobile", "sql", "robotics"])
def test_rules_hold_for_every_prompt_family(domain):
    trajs = [dataclasses.replace(t, domain=domain) for t in stream("FAMILY_SECRET", (1, 0))]
    requests = run_and_capture(trajs)
    for r in requests:
        assert "FAMILY_SECRET" not in text(r)
    critic = [r for r in requests if r.stage == "critic"]
    assert len(critic) == 9
    for n, r in enumerate(critic):
        i, t = divmod(n, 3)
        u = text(r)
        assert f"cmd_{i}_{t} --flag" in u
        for tt in range(3):
            assert (f"OBS_{i}_{tt}" in u) == (tt < t), (domain, i, t, tt)
            if tt > t:
                assert f"cmd_{i}_{tt}" not in u and f"STATE_{i}_{tt}" not in u
        assert not any(f"TASK_{j}" in u or f"OBS_{j}_" in u for j in range(i + 1, 3))
