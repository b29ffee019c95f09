"""``ceb label`` against a loopback OpenAI server: a judge's step labels for a converted inspect log."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import read_stream, write_stream
from ceb.data.inspect_logs import convert_inspect
from tests.support.builders import step, trajectory
from tests.support.kills import kill_after_two_judged
from tests.support.openai_server import OpenAITestServer, Reply
from tests.support.paths import REPO

pytestmark = pytest.mark.anyio

runner = CliRunner()
INSPECT_LOG = REPO / "tests" / "fixtures" / "inspect" / "tool-task.eval"
STEPS = re.compile(r"^Step \d+:", re.MULTILINE)
SEED = 100


def inspect_stream(tmp_path: Path) -> Path:
    """The inspect fixture converted: ``add-1`` (2 steps, scored C) and ``add-2`` (3 steps, scored I)."""
    (converted,) = convert_inspect(INSPECT_LOG, tmp_path / "streams")
    return converted.path


def config_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def votes_by_seed(body: dict[str, Any], i: int) -> Reply:
    """Vote ``v`` (seed ``SEED + v``): step 1 is productive in votes 0-2 (3 of 5), step 2 in votes 0-1 (2 of 5),
    every later step in every vote."""
    v = body["seed"] - SEED
    n = len(STEPS.findall(body["messages"][-1]["content"]))
    labels = [int(v < 3), int(v < 2), *([1] * (n - 2))][:n]
    return Reply(orjson.dumps({"labels": labels}).decode())


async def label(server: OpenAITestServer, *args: str) -> Any:
    base = ["label", *args, "--base-url", server.base_url, "--model", server.model]
    return await anyio.to_thread.run_sync(runner.invoke, app, base)


async def test_a_judge_labels_a_converted_inspect_log_by_majority_and_the_report_names_it(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = inspect_stream(tmp_path)
    openai_server.responder = votes_by_seed
    out = tmp_path / "labelled.jsonl"
    cfg = config_file(tmp_path, f"[hindsight]\nseed = {SEED}\n")
    result = await label(openai_server, str(stream), "--out", str(out), "--config", str(cfg))
    assert result.exit_code == 0, result.output
    assert f"2 of 2 trajectories labelled by judge:{openai_server.model} (5 steps, majority of 5 votes)" in (
        result.output
    )
    # V = 5 votes per trajectory, each the hindsight question with the trajectory's final outcome after it
    assert len(openai_server.requests) == 10
    users = [b["messages"][-1]["content"] for b in openai_server.requests]
    assert sum("Final outcome: the task succeeded." in u for u in users) == 5
    assert sum("Final outcome: the task failed." in u for u in users) == 5
    assert {b["temperature"] for b in openai_server.requests} == {0.7}

    got = {t.id: (t.labels, t.meta["label_source"]) for t in read_stream([out])}
    source = f"judge:{openai_server.model}"
    # 3 of 5 votes is productive, 2 of 5 is not
    assert got == {"add-1/epoch-1": ((1, 0), source), "add-2/epoch-1": ((1, 0, 1), source)}
    assert not out.with_name(out.name + ".judgments.jsonl").exists()

    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(out), "--out", str(run)])
    assert scored.exit_code == 0, scored.output
    reported = await anyio.to_thread.run_sync(runner.invoke, app, ["report", str(run), "--boot", "0"])
    assert reported.exit_code == 0, reported.output
    data = orjson.loads((run / "report" / "report.json").read_bytes())
    assert data["provenance"]["labels"] == {"labelled": source}
    page = (run / "report" / "report.md").read_text()
    assert f"Labels of stream `labelled`: `{source}`" in page and "not ground truth" in page


async def test_a_stream_mixing_label_sources_is_refused_by_score_and_a_labelled_one_by_label(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    judged = trajectory("a", step("ls", label=1), meta={"label_source": "judge:m"})
    mixed = write_stream(tmp_path / "mixed.jsonl", [judged, trajectory("b", step("pwd", label=0))])
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(mixed), "--out", str(tmp_path / "r")])
    assert scored.exit_code == EXIT_ERROR and "labelled by the dataset, but trajectory 'a' by judge:m" in scored.output

    result = await label(openai_server, str(mixed), "--out", str(tmp_path / "out.jsonl"))
    assert result.exit_code == EXIT_ERROR and "has step labels already" in result.output
    assert openai_server.requests == []


async def test_a_judge_that_is_the_runs_own_critic_or_labeller_is_refused_unless_allowed(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = inspect_stream(tmp_path)
    openai_server.responder = lambda body, i: Reply(
        orjson.dumps({"labels": [1] * len(STEPS.findall(body["messages"][-1]["content"]))}).decode()
    )
    url, model = openai_server.base_url, openai_server.model
    critic = config_file(
        tmp_path, f'[ceb]\nvotes = 1\n[backend]\nname = "openai"\nbase_url = "{url}"\nmodel = "{model}"\n'
    )
    out = tmp_path / "out.jsonl"
    refused = await anyio.to_thread.run_sync(
        runner.invoke, app, ["label", str(stream), "--out", str(out), "--config", str(critic)]
    )
    assert refused.exit_code == EXIT_ERROR and "is the run's own critic" in refused.output
    labeller = tmp_path / "labeller.toml"
    other = '[backend]\nname = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "the-critic"\n'
    labeller.write_text(f'[ceb]\nvotes = 1\n{other}[hindsight]\nbase_url = "{url}/"\nmodel = "{model}"\n')
    refused = await label(openai_server, str(stream), "--out", str(out), "--config", str(labeller))
    assert refused.exit_code == EXIT_ERROR and "is the run's own hindsight labeller" in refused.output
    assert openai_server.requests == [] and not out.exists()  # refused before any request

    allowed = await label(openai_server, str(stream), "--out", str(out), "--config", str(critic), "--allow-self-judge")
    assert allowed.exit_code == 0, allowed.output
    assert [t.labels for t in read_stream([out])] == [(1, 1), (1, 1, 1)]


async def test_a_killed_label_run_keeps_its_labels_and_a_rerun_asks_only_the_rest(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = write_stream(
        tmp_path / "logs.jsonl",
        [trajectory(f"t{i}", step(f"echo {i}", "ok"), task=f"say {i}", meta={"label": 1}) for i in range(4)],
    )
    cfg = config_file(tmp_path, "[ceb]\nvotes = 1\n")
    out = tmp_path / "labelled" / "logs.jsonl"
    journal = out.with_name("logs.jsonl.judgments.jsonl")

    await kill_after_two_judged(openai_server, ["label", str(stream), "--out", str(out), "--config", str(cfg)], journal)
    assert not out.exists()

    openai_server.responder = lambda body, i: Reply('{"labels": [0]}')
    asked_before = len(openai_server.requests)
    result = await label(openai_server, str(stream), "--out", str(out), "--config", str(cfg))
    assert result.exit_code == 0, result.output
    asked = [b["messages"][-1]["content"] for b in openai_server.requests[asked_before:]]
    assert len(asked) == 2 and not any("say 0" in a or "say 1" in a for a in asked)
    assert "(2 labelled by an earlier run, not asked again)" in result.output
    assert {t.id: t.labels for t in read_stream([out])} == {"t0": (1,), "t1": (1,), "t2": (0,), "t3": (0,)}
    assert not journal.exists()
