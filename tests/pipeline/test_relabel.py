"""``ceb relabel`` against a loopback OpenAI server with a scripted judge: its requests, the stream it writes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_FAILED
from ceb.data import read_stream, write_stream
from ceb.data.converters import REFERENCE_OBSERVATION
from ceb.pipeline.relabel import JudgmentLog
from ceb.stages.hindsight import labels_schema
from tests.support.builders import step, trajectory
from tests.support.kills import kill_after_two_judged
from tests.support.openai_server import OpenAITestServer, Reply

pytestmark = pytest.mark.anyio

runner = CliRunner()
N_STEPS = re.compile(r"The agent's steps \((\d+)\)")
REFERENCE = re.compile(r"reference action: (.*)")


def web_stream(path: Path) -> Path:
    """Two web trajectories: t0 with 2 steps (the first with reasoning), t1 with 3; t1 already has a column."""
    t0 = trajectory(
        "t0",
        step("[CLICK] <button> Search", REFERENCE_OBSERVATION + "[button] Search -> CLICK", label=1, reasoning="go"),
        step("[TYPE] <input> to -> Paris", REFERENCE_OBSERVATION + "[input] from -> TYPE: Paris", label=0),
        task="find a flight to Paris",
        domain="web",
    )
    t1 = trajectory(
        "t1",
        *(step(f"[CLICK] <a> link {i}", f"{REFERENCE_OBSERVATION}[a] ref {i} -> CLICK", label=0) for i in range(3)),
        task="open the third link",
        domain="web",
        meta={"alt_labels": {"human": [1, 1, 0]}, "kept": "as is"},
    )
    return write_stream(path, [t0, t1])


def judge(body: dict[str, Any], i: int) -> Reply:
    """Labels each step 1 unless its reference mentions 'from' (a different field than the agent's)."""
    user = body["messages"][-1]["content"]
    refs = REFERENCE.findall(user)
    return Reply(orjson.dumps({"labels": [0 if "from" in r else 1 for r in refs]}).decode())


async def relabel(server: OpenAITestServer, *args: str) -> Any:
    base = ["relabel", *args, "--base-url", server.base_url, "--model", server.model]
    return await anyio.to_thread.run_sync(runner.invoke, app, base)


async def test_one_greedy_schema_bound_request_per_trajectory_with_actions_references_and_reasoning(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = web_stream(tmp_path / "web.jsonl")
    before = stream.read_bytes()
    openai_server.responder = judge
    out = tmp_path / "judged" / "web.jsonl"
    result = await relabel(openai_server, str(stream), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "2 of 2 trajectories judged (5 steps labelled llm_judge), 0 left without" in result.output

    bodies = sorted(openai_server.requests, key=lambda b: b["messages"][-1]["content"])
    assert len(bodies) == 2  # one request per trajectory
    for body, n in zip(bodies, (2, 3), strict=True):
        assert body["temperature"] == 0
        assert body["response_format"]["type"] == "json_schema"
        assert body["response_format"]["json_schema"]["schema"] == labels_schema(n)
        user = body["messages"][-1]["content"]
        assert N_STEPS.search(user).group(1) == str(n)  # type: ignore[union-attr]
    paris = bodies[0]["messages"][-1]["content"]
    assert "find a flight to Paris" in paris
    assert "agent action: [CLICK] <button> Search" in paris and "agent action: [TYPE] <input> to -> Paris" in paris
    assert "reference action: [button] Search -> CLICK" in paris and "reference action: [input] from -> TYPE" in paris
    assert "agent reasoning: go" in paris and paris.count("agent reasoning:") == 1
    assert "productive" in bodies[0]["messages"][0]["content"].lower()

    assert stream.read_bytes() == before  # the input is never modified
    got = {t.id: t for t in read_stream([out])}
    assert got["t0"].meta["alt_labels"] == {"llm_judge": [1, 0]}
    assert got["t1"].meta == {"alt_labels": {"human": [1, 1, 0], "llm_judge": [1, 1, 1]}, "kept": "as is"}
    assert [t.labels for t in got.values()] == [(1, 0), (0, 0, 0)]  # the strict labels are kept beside the judge's


async def test_a_stream_without_reference_actions_is_refused_in_one_line(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    shell = write_stream(
        tmp_path / "bash.jsonl",
        [
            trajectory("ok", step("x", REFERENCE_OBSERVATION + "x", label=1)),
            trajectory("bash/1", step("ls", REFERENCE_OBSERVATION + "ls"), step("pwd", "/root", label=1)),
        ],
    )
    out = tmp_path / "out.jsonl"
    result = await relabel(openai_server, str(shell), "--out", str(out))
    assert result.exit_code == EXIT_ERROR
    error = result.output.strip()
    assert error.count("\n") == 0 and error.startswith("error:")
    assert f"{shell}:2 (trajectory 'bash/1', step 1): field meta.reference_actions[1]: no reference action" in error
    assert not out.exists() and openai_server.requests == [] and openai_server.preflights == []


async def test_an_unreadable_reply_is_asked_again_once_then_the_trajectory_keeps_no_judge_label(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = web_stream(tmp_path / "web.jsonl")

    def flaky(body: dict[str, Any], i: int) -> Reply:
        user = body["messages"][1]["content"]
        if "open the third link" in user:
            return Reply("three labels: yes, yes, no")  # never JSON, the re-ask included
        if len(body["messages"]) == 2:
            return Reply('{"labels": [1]}')  # t0 first gets the wrong count ...
        assert body["messages"][-1]["content"].startswith("Your reply could not be read: expected 2 labels, got 1")
        return Reply('{"labels": [0, 1]}')  # ... and answers the re-ask

    openai_server.responder = flaky
    out = tmp_path / "out.jsonl"
    result = await relabel(openai_server, str(stream), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert len(openai_server.requests) == 4  # each trajectory asked twice, never a third time
    assert "1 of 2 trajectories judged (2 steps labelled llm_judge), 1 left without a judge label" in result.output
    assert "warning: trajectory 't1' has no judge label: unreadable reply" in result.output
    got = {t.id: t.meta for t in read_stream([out])}
    assert got["t0"]["alt_labels"] == {"llm_judge": [0, 1]}
    assert got["t1"]["alt_labels"] == {"human": [1, 1, 0]}  # no guessed column


async def test_no_readable_reply_at_all_writes_nothing_and_exits_1(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = web_stream(tmp_path / "web.jsonl")
    openai_server.responder = lambda body, i: Reply("no")
    out = tmp_path / "out.jsonl"
    result = await relabel(openai_server, str(stream), "--out", str(out))
    assert result.exit_code == EXIT_FAILED
    assert "error: no trajectory got a judge label" in result.output and not out.exists()


async def test_out_may_not_be_the_input_or_an_existing_file(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    stream = web_stream(tmp_path / "web.jsonl")
    before = stream.read_bytes()
    same = await relabel(openai_server, str(stream), "--out", str(stream), "--overwrite")
    assert same.exit_code == EXIT_ERROR and "never modifies its input" in same.output
    other = tmp_path / "other.jsonl"
    other.write_text("keep")
    kept = await relabel(openai_server, str(stream), "--out", str(other))
    assert kept.exit_code == EXIT_ERROR and "--overwrite" in kept.output
    assert stream.read_bytes() == before and other.read_text() == "keep" and openai_server.requests == []


M2W = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"


async def test_a_relabelled_mind2web_stream_scored_and_reported_shows_both_label_sets_and_the_shift(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    from ceb.data import convert_mind2web

    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path / "streams")
    stream = tmp_path / "streams" / "mind2web-gpt-4.1.jsonl"
    strict = [y for t in read_stream([stream]) for y in t.labels]
    assert sorted(strict) == [0, 0, 0, 1, 1]  # the fixture's reference-matching labels
    # A permissive judge: every step productive, so each strict 0 is relabelled 0 -> 1.
    openai_server.responder = lambda body, i: Reply(
        orjson.dumps({"labels": [1] * len(REFERENCE.findall(body["messages"][-1]["content"]))}).decode()
    )
    judged = tmp_path / "judged.jsonl"
    result = await relabel(openai_server, str(stream), "--out", str(judged))
    assert result.exit_code == 0, result.output
    assert len(openai_server.requests) == 2  # two tasks, one call each

    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(judged), "--out", str(run)])
    assert scored.exit_code == 0, scored.output
    reported = await anyio.to_thread.run_sync(runner.invoke, app, ["report", str(run), "--boot", "0"])
    assert reported.exit_code == 0, reported.output

    report = run / "report"
    data = orjson.loads((report / "report.json").read_bytes())
    (shift,) = [r for r in data["label_shift"] if r["labels"] == "llm_judge"]
    assert shift["shift"] == {
        "n": 5,
        "strict_positive_rate": pytest.approx(0.4),
        "alt_positive_rate": 1.0,
        "agreement": pytest.approx(0.4),
        "zero_to_one": pytest.approx(0.6),
        "one_to_zero": 0.0,
    }
    assert data["main"] and data["alt_main"]["llm_judge"]  # metrics under both label sets
    table = (report / "label-shift.md").read_text()
    assert "| llm_judge | judged | 5 | 0.400 | 1.000 | 40.0 | 60.0 | 0.0 |" in table  # agreement, 0->1, 1->0 in %


def long_stream(path: Path, n: int = 6, first_action: str = "[CLICK] <a> link 0") -> Path:
    """``n`` one-step web trajectories ``t0 .. t{n-1}`` (with reference actions)."""
    trajectories = [
        trajectory(
            f"t{i}",
            step(first_action if i == 0 else f"[CLICK] <a> link {i}", f"{REFERENCE_OBSERVATION}[a] ref {i} -> CLICK"),
            task=f"open link {i}",
            domain="web",
        )
        for i in range(n)
    ]
    return write_stream(path, trajectories)


async def test_a_killed_relabel_keeps_its_judgments_and_a_rerun_asks_only_the_rest(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = long_stream(tmp_path / "web.jsonl")
    out = tmp_path / "judged" / "web.jsonl"
    journal = out.with_name("web.jsonl.judgments.jsonl")

    await kill_after_two_judged(openai_server, ["relabel", str(stream), "--out", str(out)], journal)
    assert not out.exists()

    # t0 changed since it was judged: its judgment answered another request, so it is asked again; t1 is not.
    long_stream(stream, first_action="[CLICK] <a> another link")
    openai_server.responder = lambda body, i: Reply('{"labels": [0]}')
    asked_before = len(openai_server.requests)
    result = await relabel(openai_server, str(stream), "--out", str(out))
    assert result.exit_code == 0, result.output
    asked = [b["messages"][-1]["content"] for b in openai_server.requests[asked_before:]]
    assert len(asked) == 5 and not any("open link 1" in a for a in asked)
    assert (
        "6 of 6 trajectories judged" in result.output
        and "(1 judged by an earlier run, not asked again)" in result.output
    )
    got = {t.id: t.meta["alt_labels"]["llm_judge"] for t in read_stream([out])}
    assert got == {"t0": [0], "t1": [1], "t2": [0], "t3": [0], "t4": [0], "t5": [0]}
    assert not journal.exists()  # the output holds every judgment now

    again = await relabel(openai_server, str(stream), "--out", str(out), "--overwrite")
    assert again.exit_code == 0 and len(openai_server.requests) == asked_before + 5 + 6  # no journal: all asked


async def test_an_out_that_is_a_directory_is_refused_before_any_request_naming_it(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = web_stream(tmp_path / "web.jsonl")
    folder = tmp_path / "out"
    folder.mkdir()
    result = await relabel(openai_server, str(stream), "--out", str(folder), "--overwrite")
    assert result.exit_code == EXIT_ERROR and f"{folder}: --out is a directory" in result.output
    assert ".tmp" not in result.output and openai_server.requests == []


def test_a_stream_that_cannot_be_moved_into_place_is_named_not_its_temporary_file(tmp_path: Path) -> None:
    folder = tmp_path / "out.jsonl"
    folder.mkdir()
    with pytest.raises(IsADirectoryError) as caught:
        write_stream(folder, [trajectory("t", step("ls", "a"))])
    assert caught.value.filename == str(folder) and ".tmp" not in str(caught.value)
    assert list(tmp_path.iterdir()) == [folder]  # no temporary file left behind


async def test_a_trajectory_left_unjudged_is_the_only_one_asked_again_and_a_cut_journal_line_is_dropped(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    stream = long_stream(tmp_path / "web.jsonl", n=4)
    out = tmp_path / "web-judged.jsonl"
    journal = tmp_path / "web-judged.jsonl.judgments.jsonl"
    openai_server.responder = lambda body, i: Reply(
        "?" if "open link 2" in body["messages"][1]["content"] else '{"labels": [1]}'
    )
    first = await relabel(openai_server, str(stream), "--out", str(out))
    assert first.exit_code == 0 and "3 of 4 trajectories judged" in first.output
    assert f"note: the judgments so far stay in {journal}" in first.output
    with journal.open("ab") as f:
        f.write(b'{"trajectory": "t2", "key": "')  # a write cut short by a kill
    asked_before = len(openai_server.requests)
    openai_server.responder = lambda body, i: Reply('{"labels": [0]}')
    again = await relabel(openai_server, str(stream), "--out", str(out), "--overwrite")
    assert again.exit_code == 0, again.output
    asked = [b["messages"][1]["content"] for b in openai_server.requests[asked_before:]]
    assert len(asked) == 1 and "open link 2" in asked[0]  # only the trajectory without a judgment
    assert "(3 judged by an earlier run, not asked again)" in again.output
    got = {t.id: t.meta["alt_labels"]["llm_judge"] for t in read_stream([out])}
    assert got == {"t0": [1], "t1": [1], "t2": [0], "t3": [1]} and not journal.exists()


def test_a_cut_journal_line_is_cut_off_before_the_next_judgment_is_appended(tmp_path: Path) -> None:
    journal = JudgmentLog(tmp_path / "out.jsonl")
    journal.path.write_bytes(b'{"trajectory": "t0", "key": "a", "labels": [1]}\n{"trajectory": "t1", "ke')
    with journal.appender() as sink:
        assert journal.read() == {("t0", "a"): (1,)}
        sink.write(b'{"trajectory": "t2", "key": "c", "labels": [0, 1]}\n')
    assert journal.read() == {("t0", "a"): (1,), ("t2", "c"): (0, 1)}  # not one damaged line holding t1 and t2
