"""An independent labeller: ``[hindsight]`` names its own endpoint, and each endpoint gets only its stage's requests."""

import re
from pathlib import Path

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.config import load_config
from ceb.data.reader import trajectory_object
from ceb.gate import Gate, StepContext
from tests.support.builders import step, trajectory
from tests.support.openai_server import OpenAITestServer, Reply, serve_openai

pytestmark = pytest.mark.anyio

N_STEPS = re.compile(r"The whole trajectory \((\d+) steps\)")


def is_hindsight(body: dict) -> bool:
    return N_STEPS.search(body["messages"][-1]["content"]) is not None


def critic_only(body: dict, i: int) -> Reply:
    assert not is_hindsight(body), "the critic's endpoint got a hindsight request"
    return Reply('{"score": 0.8, "reason": "scripted"}')


def labeller_only(body: dict, i: int) -> Reply:
    assert is_hindsight(body), "the labeller's endpoint got a critic request"
    user = body["messages"][-1]["content"]
    n = int(N_STEPS.search(user).group(1))  # type: ignore[union-attr]
    outs = re.findall(r"what happened: (.*)", user)
    return Reply(orjson.dumps({"labels": [0 if "error" in o else 1 for o in outs[:n]]}).decode())


def trajectories():
    return [
        trajectory(
            f"t{i}", step("ls", "a b", label=1), step("rm -rf /x", "error: denied", "a b", label=0), task=f"task {i}"
        )
        for i in range(3)
    ]


def write_stream(path: Path) -> Path:
    path.write_bytes(b"".join(orjson.dumps(trajectory_object(t)) + b"\n" for t in trajectories()))
    return path


def settings(critic: OpenAITestServer, labeller: OpenAITestServer) -> dict:
    return {
        "backend": {"name": "openai", "base_url": critic.base_url, "model": critic.model, "backoff_s": 0.0},
        "hindsight": {"base_url": labeller.base_url, "model": labeller.model},
        "ceb": {"votes": 3},
    }


def toml(d: dict) -> str:
    lines = [f"{k} = {orjson.dumps(v).decode()}" for k, v in d.items() if not isinstance(v, dict)]
    for section, values in ((k, v) for k, v in d.items() if isinstance(v, dict)):
        lines.append(f"[{section}]")
        lines += [f"{k} = {orjson.dumps(v).decode()}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


async def test_ceb_score_sends_votes_to_the_labeller_and_steps_to_the_critic(tmp_path):
    async with (
        serve_openai(critic_only, model="critic-model") as critic,
        serve_openai(labeller_only, model="judge-model") as labeller,
    ):
        config = tmp_path / "run.toml"
        config.write_text(toml(settings(critic, labeller)))
        stream = write_stream(tmp_path / "bash.jsonl")
        run = tmp_path / "run"
        args = ["score", str(stream), "--out", str(run), "--config", str(config)]
        result = await anyio.to_thread.run_sync(CliRunner().invoke, app, args)
    assert result.exit_code == 0, result.output
    summary = orjson.loads((run / "summary.json").read_bytes())
    # 3 trajectories x 2 steps x (ceb, static) critic requests, and those speculation discarded; 3 votes per
    # trajectory of the ceb lane
    assert len(critic.requests) == 12 + summary["discarded_requests"]
    assert {b["model"] for b in critic.requests} == {"critic-model"}
    assert len(labeller.requests) == 9 and {b["model"] for b in labeller.requests} == {"judge-model"}
    assert len(critic.preflights) == 1 and len(labeller.preflights) == 1  # both endpoints checked before the run
    assert summary["hindsight_labellers"] == [
        {"critic": "", "backend": "openai", "model": "judge-model", "base_url": [labeller.base_url]}
    ]
    asked = [(e["role"], e["model"], e["endpoint"]) for e in summary["provenance"]["endpoints"]]
    assert asked == [("critic", "critic-model", [critic.base_url]), ("hindsight", "judge-model", [labeller.base_url])]
    assert (
        result.stdout.strip()
        .splitlines()[-1]
        .startswith(f"scored by: openai, model 'critic-model' at {critic.base_url}")
    )
    recorded = orjson.loads((run / "config.json").read_bytes())
    assert recorded["config"]["hindsight"]["model"] == "judge-model"
    hrows = [orjson.loads(line) for line in (run / "hindsight.jsonl").read_bytes().splitlines()]
    assert [h["pseudo_labels"] for h in hrows] == [[1, 0]] * 3


async def test_the_gate_asks_the_labeller_for_votes_and_the_critic_for_scores():
    async with (
        serve_openai(critic_only, model="critic-model") as critic,
        serve_openai(labeller_only, model="judge-model") as labeller,
    ):
        config = load_config(overrides=settings(critic, labeller))
        async with Gate(config) as gate:
            for t in trajectories()[:2]:
                for i, s in enumerate(t.steps):
                    context = StepContext(t.id, t.task, t.domain, s, history=t.steps[:i])
                    assert (await gate.score("agent", context)).score == 0.8
                await gate.finish("agent", t)
            assert len(gate.bank("agent")) == 4
    assert len(critic.requests) == 4 and len(labeller.requests) == 6


def test_without_its_own_endpoint_the_labeller_is_the_critics_backend():
    config = load_config(overrides={"backend": {"name": "openai", "base_url": "http://h/v1", "model": "m"}})
    assert config.hindsight_backend() is None
    own = load_config(overrides={"backend": {"name": "openai", "model": "m"}, "hindsight": {"model": "judge"}})
    labeller = own.hindsight_backend()
    assert labeller is not None and labeller.model == "judge" and labeller.name == "openai"
