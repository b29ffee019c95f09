"""``ceb regenerate``: the selections (budgets, ties, missing scores, Oracle, Random), the refusal of a stream
without references, and the command end to end against a loopback actor on the Mind2Web fixture."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR, EXIT_FAILED
from ceb.data import convert_mind2web, read_stream, write_stream
from ceb.data.converters import REFERENCE_OBSERVATION
from ceb.data.references import ACTION_SPACES
from ceb.errors import RunError
from ceb.eval.regeneration import regeneration_curves
from ceb.pipeline.regenerate import ORACLE, RANDOM, Regeneration, budget_count, plan_regeneration
from ceb.pipeline.results import StepRow
from ceb.stages.regenerate import CRITIQUE, action_schema
from tests.support.builders import step, trajectory
from tests.support.openai_server import OpenAITestServer, Reply

runner = CliRunner()
M2W = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"


def row(method: str, traj: str, t: int, score: float | None, label: int | None, **kw: Any) -> StepRow:
    return StepRow(
        stream="s", method=method, trajectory=traj, step=t, score=score, label=label, error=None, clipped=False,
        raw="", latency_s=0.0, queue_s=0.0, requests=0, prompt_tokens=None, completion_tokens=None, bank_size=0,
        repetition_flag=False, retrieved=[], **kw,
    )  # fmt: skip


def four_steps() -> list[Any]:
    """Trajectory a (3 steps) then b (1 step), stream order a0 a1 a2 b0."""
    return [
        trajectory("a", *(step(f"x{i}", REFERENCE_OBSERVATION + "r") for i in range(3))),
        trajectory("b", step("y", REFERENCE_OBSERVATION + "r")),
    ]


# --- selection ---------------------------------------------------------------------------------------------


def test_a_budget_flags_the_rounded_share_of_steps_half_up() -> None:
    assert [budget_count(7, b) for b in (10, 25, 50, 100)] == [1, 2, 4, 7]  # 0.7, 1.75, 3.5, 7
    assert budget_count(4, 10) == 0 and budget_count(5, 10) == 1  # 0.4 down, 0.5 up
    # Exact halves that float arithmetic puts just below .5 (0.29 * 50 = 14.499999999999998) still round up.
    assert budget_count(50, 29) == 15 and budget_count(100, 14.5) == 15 and budget_count(1000, 0.15) == 2
    with pytest.raises(ValueError, match="percentage"):
        budget_count(4, 120)


def test_lowest_confidence_first_ties_in_stream_order_and_missing_scores_last() -> None:
    rows = [
        row("m", "a", 0, 0.5, 1),
        row("m", "a", 1, None, 0, status="failed"),  # no score: ranked after every scored step
        row("m", "a", 2, 0.2, 0),
        row("m", "b", 0, 0.5, 1),  # ties with a0: a0 comes first in the stream
        row("m", "b", 0, 0.0, 1, order=1),  # another order: ignored
    ]
    plan = plan_regeneration(rows, four_steps(), budgets=(25, 50, 75, 100), seeds=2)
    assert plan.methods["m"] == (("a", 2), ("a", 0), ("b", 0), ("a", 1))
    assert [plan.flagged(plan.methods["m"], b) for b in (25, 50)] == [(("a", 2),), (("a", 2), ("a", 0))]
    # Oracle: the wrong steps first (a1, a2 in stream order), then the right ones.
    assert plan.oracle == (("a", 1), ("a", 2), ("a", 0), ("b", 0))
    for seed, ranking in plan.random.items():  # a seeded permutation each, reproducible
        assert sorted(ranking) == sorted(plan.steps)
        assert ranking == tuple(plan.steps[i] for i in np.random.default_rng(seed).permutation(4))
    assert plan.random[0] != plan.random[1]
    assert plan_regeneration(rows, four_steps(), budgets=(50, 25, 50), seeds=1).budgets == (25, 50)


def test_a_method_with_a_critic_is_its_own_selection_and_unknown_methods_are_refused() -> None:
    rows = [row("m", "a", t, 0.1 * t, 1) for t in range(3)] + [
        row("m", "a", t, 1 - 0.1 * t, 1, critic="c") for t in range(3)
    ]
    plan = plan_regeneration(rows, four_steps()[:1], budgets=(50,), seeds=1)
    assert set(plan.methods) == {"m", "m@c"}
    assert plan.methods["m"][0] == ("a", 0) and plan.methods["m@c"][0] == ("a", 2)
    with pytest.raises(RunError, match="no such method in the run: z"):
        plan_regeneration(rows, four_steps()[:1], methods=["z"])


def test_rates_follow_the_regenerated_labels_and_random_is_the_mean_over_seeds() -> None:
    rows = [row("m", "a", 0, 0.9, 1), row("m", "a", 1, 0.1, 0), row("m", "a", 2, 0.5, 0), row("m", "b", 0, 0.3, 1)]
    plan = plan_regeneration(rows, four_steps(), budgets=(25, 50), seeds=3)

    def rec(traj: str, t: int, label: int | None) -> Regeneration:
        return Regeneration(traj, t, "x", plan.labels[(traj, t)], "1", "CLICK", "", label, "", None, 1)

    # a1 fixed (0 -> 1), a2 still wrong, b0 broken (1 -> 0), a0 fails (kept as logged).
    records = {
        ("a", 1): rec("a", 1, 1),
        ("a", 2): rec("a", 2, 0),
        ("b", 0): rec("b", 0, 0),
        ("a", 0): rec("a", 0, None),
    }
    curves = {c.selection: c for c in regeneration_curves(plan, records)}
    m = curves["m"]
    # base: labels 1 0 0 | 1 -> rate 2/4, per task (1/3 + 1) / 2.
    assert m.positive_rate[0] == pytest.approx(0.5) and m.task_accuracy[0] == pytest.approx(2 / 3)
    # b=25%: m flags a1 -> 1 1 0 | 1; b=50%: a1, b0 -> 1 1 0 | 0.
    assert m.positive_rate[1:] == pytest.approx((0.75, 0.5)) and m.task_accuracy[1:] == pytest.approx((5 / 6, 1 / 3))
    assert m.flagged == (0, 1, 2) and m.changed[1:] == (1.0, 2.0)
    assert curves[ORACLE].positive_rate[1:] == pytest.approx((0.75, 0.75))  # a1 then a2: one fixed
    fixed = {k: r.label for k, r in records.items() if r.label is not None}
    for i, b in enumerate(plan.budgets, 1):
        each = []
        for ranking in plan.random.values():
            labels = dict(plan.labels) | {k: fixed[k] for k in plan.flagged(ranking, b) if k in fixed}
            each.append(sum(labels.values()) / 4)
        assert curves[RANDOM].positive_rate[i] == pytest.approx(np.mean(each))
        assert curves[RANDOM].positive_rate_std[i] == pytest.approx(np.std(each))


# --- the command -------------------------------------------------------------------------------------------

TASK = re.compile(r"Task: (.*)")
STEP = re.compile(r"Your action at step (\d+):")
GOLD = {  # the fixture's positive candidate and gold op per (task, step number); b2 step 2 has no positive
    ("Find one-way flights from New York to Boston in economy class.", 1): ("101", "CLICK"),
    ("Find one-way flights from New York to Boston in economy class.", 2): ("201", "TYPE"),
    ("Find one-way flights from New York to Boston in economy class.", 3): ("301", "SELECT"),
    ("Look at this week's ad and search for bread.", 1): ("11", "CLICK"),
    ("Look at this week's ad and search for bread.", 2): ("40", "TYPE"),
}


def asked(body: dict[str, Any]) -> tuple[str, int]:
    user = body["messages"][1]["content"]  # the first user turn (a re-ask appends a correction after it)
    return TASK.search(user).group(1).strip(), int(STEP.search(user).group(1))  # type: ignore[union-attr]


def perfect(body: dict[str, Any], i: int) -> Reply:
    """An actor that always picks the reference element with the gold operation."""
    element, op = GOLD[asked(body)]
    return Reply(orjson.dumps({"element_id": element, "op": op, "value": ""}).decode())


async def scored_fixture(tmp_path: Path) -> Path:
    convert_mind2web(M2W, M2W / "predictions.jsonl", tmp_path / "streams")
    run = tmp_path / "run"
    streams = sorted(str(p) for p in (tmp_path / "streams").glob("*.jsonl"))
    # offline: ceb and static, no model
    result = await anyio.to_thread.run_sync(runner.invoke, app, ["score", *streams, "--out", str(run)])
    assert result.exit_code == 0, result.output
    return run


async def regenerate(server: OpenAITestServer, *args: str) -> Any:
    base = ["regenerate", *args, "--base-url", server.base_url, "--model", server.model]
    return await anyio.to_thread.run_sync(runner.invoke, app, base)


@pytest.mark.anyio
async def test_one_request_per_distinct_flagged_step_and_the_table_follows_from_the_replies(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    run = await scored_fixture(tmp_path)
    openai_server.responder = perfect
    result = await regenerate(openai_server, str(run))
    assert result.exit_code == 0, result.output
    out = run / "regeneration"

    steps = [asked(b) for b in openai_server.requests]
    records = [orjson.loads(line) for line in (out / "regenerations.jsonl").read_bytes().splitlines()]
    keys = [(r["trajectory"], r["step"]) for r in records]
    assert len(keys) == len(set(keys)) == len(openai_server.requests)  # one call per distinct step, never two
    from ceb.pipeline.rundir import RunDir

    trajectories = read_stream(sorted((tmp_path / "streams").glob("*.jsonl")))
    plan = plan_regeneration(RunDir(run).step_rows(), trajectories)
    assert set(keys) == set(plan.to_ask())
    by_id = {t.id: t for t in trajectories}
    assert sorted(steps) == sorted((by_id[k[0]].task, k[1] + 1) for k in keys)  # (duplicates across actors allowed)
    for body in openai_server.requests:
        assert body["temperature"] == 0
        user = body["messages"][-1]["content"]
        page = user.split("Current page")[1]
        ids = re.findall(r'backend_node_id="(\w+)"', page)
        web = ACTION_SPACES["web"].operations
        assert ids and body["response_format"]["json_schema"]["schema"] == action_schema(web, list(dict.fromkeys(ids)))
        assert CRITIQUE in user and "reference action executed" not in user.split("Current page")[1]
    for r in records:  # the perfect actor fixes every step but the one without a positive candidate
        assert r["error"] is None and r["label"] == (0 if r["trajectory"].endswith("/b2") and r["step"] == 1 else 1)

    doc = orjson.loads((out / "regeneration.json").read_bytes())
    curves = {c["selection"]: c for c in doc["curves"]}
    assert doc["steps"] == 7 and doc["budgets"] == [10, 25, 50]
    # 7 steps, 2 positive. Oracle at 10/25/50% flags 1/2/4 wrong steps in stream order: a1-1, a1-2, then gpt b2-1
    # (no positive: stays 0) and qwen b2-0, each fixed but b2-1: 3, 4 and 5 of 7.
    assert curves[ORACLE]["positive_rate"] == pytest.approx([2 / 7, 3 / 7, 4 / 7, 5 / 7])
    assert set(curves) == {"ceb", "static", RANDOM, ORACLE}
    assert "about" in doc and doc["about"]["command"].startswith("ceb regenerate ")
    table = (out / "regeneration.md").read_text()
    assert "| *Oracle (upper bound)* | 0.286 | 0.429 | 0.571 | 0.714 |" in table
    assert (out / "regeneration.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.anyio
async def test_a_rerun_asks_only_what_is_new_or_failed(tmp_path: Path, openai_server: OpenAITestServer) -> None:
    run = await scored_fixture(tmp_path)

    def flaky(body: dict[str, Any], i: int) -> Reply:
        if asked(body) == ("Find one-way flights from New York to Boston in economy class.", 2):
            return Reply("I would type New York")  # unreadable, the re-ask too
        return perfect(body, i)

    openai_server.responder = flaky
    first = await regenerate(openai_server, str(run), "--budget", "25")
    assert first.exit_code == 0, first.output
    records = (run / "regeneration" / "regenerations.jsonl").read_bytes().splitlines()
    done = {(r["trajectory"], r["step"]) for r in map(orjson.loads, records) if r["error"] is None}
    failed = {(r["trajectory"], r["step"]) for r in map(orjson.loads, records) if r["error"] is not None}
    assert failed == {("mind2web/gpt-4.1/a1", 1)}  # 2 steps flagged by Oracle at 25%: a1-1 among them

    openai_server.requests.clear()
    openai_server.responder = perfect
    second = await regenerate(openai_server, str(run), "--budget", "25", "--budget", "50")
    assert second.exit_code == 0, second.output
    again = {
        (r["trajectory"], r["step"])
        for r in map(
            orjson.loads, (run / "regeneration" / "regenerations.jsonl").read_bytes().splitlines()[len(records) :]
        )
    }
    assert again.isdisjoint(done) and failed <= again  # the failed one is asked again, none of the done ones
    assert len(openai_server.requests) == len(again)
    assert f"{len(done)} from an earlier run" in second.output


@pytest.mark.anyio
async def test_no_readable_reply_at_all_exits_1_and_keeps_the_records(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    run = await scored_fixture(tmp_path)
    openai_server.responder = lambda body, i: Reply("no")
    result = await regenerate(openai_server, str(run), "--budget", "10")
    assert result.exit_code == EXIT_FAILED
    assert "error: no flagged step got a regenerated action" in result.output
    assert (run / "regeneration" / "regenerations.jsonl").is_file()


@pytest.mark.anyio
async def test_a_stream_without_reference_actions_is_refused_in_one_line(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    shell = write_stream(
        tmp_path / "bash.jsonl",
        [
            trajectory("ok", step("x", REFERENCE_OBSERVATION + "x", label=1)),
            trajectory("bash/1", step("ls", "/root", label=0)),
        ],
    )
    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(shell), "--out", str(run)])
    assert scored.exit_code == 0
    result = await regenerate(openai_server, str(run))
    assert result.exit_code == EXIT_ERROR
    error = result.output.strip()
    assert error.count("\n") == 0 and error.startswith("error:")
    assert f"{shell}:2 (trajectory 'bash/1', step 0): field meta.reference_actions[0]: no reference action" in error
    assert "cannot be regenerated" in error
    assert openai_server.requests == [] and openai_server.preflights == []


@pytest.mark.anyio
async def test_a_stream_with_references_but_no_dataset_task_is_refused_before_asking(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    web = write_stream(
        tmp_path / "web.jsonl", [trajectory("w", step("[CLICK] a", REFERENCE_OBSERVATION + "[a] x", label=1))]
    )
    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(web), "--out", str(run)])
    assert scored.exit_code == 0
    result = await regenerate(openai_server, str(run))
    assert result.exit_code == EXIT_ERROR
    assert f"{web}:1 (trajectory 'w'): field meta: no dataset task to judge against" in result.output
    assert openai_server.requests == []


def test_the_schema_offers_exactly_the_elements_on_the_page_shown() -> None:
    from ceb.data.mind2web_dom import element_ids

    page = """<div backend_node_id="3"><b backend_node_id='4'>x</b><i data-backend_node_id="9"></i>"""
    page += """<a backend_node_id="3">"""
    assert element_ids(page) == ["3", "4"]  # once each, in order; another attribute's suffix is not one
    web = ACTION_SPACES["web"].operations
    assert action_schema(web, ["3", "4"])["properties"]["element_id"] == {"type": "string", "enum": ["3", "4", ""]}
    assert "enum" not in action_schema(web)["properties"]["element_id"]  # no ids: a bounded string


def test_the_schema_offers_no_element_the_prompt_cut_out_of_a_long_state() -> None:
    # An AMEX screen's list fills the converter's 2,000 characters; the prompt's fence indents each line, so the
    # shown state passes its budget and its middle is cut. The actor may name only elements it was shown.
    from typing import cast

    from ceb.backends.base import ChatBackend
    from ceb.config import PromptConfig
    from ceb.stages.regenerate import Regenerator
    from ceb.stages.templates import PromptSet

    state = "\n".join(f"[{i}] <button> item {i:02d} of the list" for i in range(58))
    assert len(state) <= 2000
    screen = trajectory("m", step("[TAP] (1, 1) on [0] <button>", REFERENCE_OBSERVATION + "x", state), domain="mobile")
    request = Regenerator(cast(ChatBackend, None), PromptSet(None, PromptConfig())).request(screen, 0)
    offered = request.json_schema["properties"]["element_id"]["enum"][:-1]  # type: ignore[index]
    shown = request.messages[1]["content"]
    listed = re.findall(r"^ *\[(\d+)\] ", shown, re.MULTILINE)
    assert "0" in offered and "57" in offered and len(listed) < 58  # head and tail shown, the middle cut
    assert offered == listed


@pytest.mark.anyio
async def test_another_actor_is_refused_on_a_directory_holding_one_actors_records(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    run = await scored_fixture(tmp_path)
    openai_server.responder = perfect
    first = await regenerate(openai_server, str(run), "--budget", "10")
    assert first.exit_code == 0, first.output
    openai_server.requests.clear()
    args = ["regenerate", str(run), "--budget", "50", "--base-url", openai_server.base_url, "--model", "other"]
    second = await anyio.to_thread.run_sync(runner.invoke, app, args)
    assert second.exit_code == EXIT_ERROR
    records = run / "regeneration" / "regenerations.jsonl"
    assert f"{records}:1: regenerated by actor 'openai:{openai_server.model}', not 'openai:other'" in second.output
    assert openai_server.requests == []


AMEX = Path(__file__).resolve().parents[1] / "fixtures" / "amex"


@pytest.mark.anyio
async def test_an_amex_run_is_judged_by_the_converters_tap_rule_at_the_elements_centre(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    from ceb.data import convert_amex

    convert_amex(AMEX / "instruction_anno", AMEX / "predictions.jsonl", tmp_path / "streams")
    (stream,) = sorted((tmp_path / "streams").glob("*.jsonl"))
    run = tmp_path / "run"
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", str(stream), "--out", str(run)])
    assert scored.exit_code == 0, scored.output
    # Always TAP the first listed element. The fixture's 4 labelled (TAP) steps: alpha 0 (the human touched [1]
    # "Search here", nested in [0] "Search panel", whose centre (540, 400) lies outside [1]: 0), alpha 2, beta 0
    # and beta 2 (the human's element is [0]: 1).
    openai_server.responder = lambda body, i: Reply('{"element_id": "0", "op": "TAP", "value": ""}')
    elements = AMEX / "element_anno"
    result = await regenerate(openai_server, str(run), "--budget", "100", "--elements", str(elements))
    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in (run / "regeneration" / "regenerations.jsonl").read_bytes().splitlines()]
    got = {(r["trajectory"].rsplit("/", 1)[1], r["step"]): r["label"] for r in records}
    assert got == {("ep_alpha", 0): 0, ("ep_alpha", 2): 1, ("ep_beta", 0): 1, ("ep_beta", 2): 1}
    assert len(openai_server.requests) == 4  # the unlabelled (non-TAP) steps are never asked
    first = next(b for b in openai_server.requests if "Search for pizza" in b["messages"][1]["content"])
    schema = first["response_format"]["json_schema"]["schema"]["properties"]
    assert schema["op"]["enum"] == list(ACTION_SPACES["mobile"].operations)
    assert schema["element_id"]["enum"] in (["0", "1", ""], ["0", ""])  # the elements of that step's screen
    assert "index [i]" in first["messages"][0]["content"]  # the mobile family's prompt
    doc = orjson.loads((run / "regeneration" / "regeneration.json").read_bytes())
    oracle = next(c for c in doc["curves"] if c["selection"] == ORACLE)
    # At 100% every step takes its regeneration, whoever selects: 3 of 4 (alpha 0 broken, beta 0 and 2 fixed).
    assert oracle["positive_rate"] == pytest.approx([0.5, 0.75])
    command = shlex.split(doc["about"]["command"])  # the command that reproduces the run names every input
    assert command[command.index("--elements") + 1] == str(elements)


async def regenerated_by_a_perfect_actor(tmp_path: Path, server: OpenAITestServer, budget: str) -> tuple[Path, Path]:
    """The scored fixture regenerated once at ``budget`` by :func:`perfect`: the run and its records file."""
    run = await scored_fixture(tmp_path)
    server.responder = perfect
    first = await regenerate(server, str(run), "--budget", budget)
    assert first.exit_code == 0, first.output
    return run, run / "regeneration" / "regenerations.jsonl"


@pytest.mark.anyio
async def test_a_record_cut_by_a_crash_is_asked_again_and_the_file_stays_readable(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    # A kill mid-write leaves the last record without its newline. The next run must not glue its first record
    # onto that piece (a damaged line in the middle of the file, refused by every later run), nor lose it.
    run, records = await regenerated_by_a_perfect_actor(tmp_path, openai_server, "25")
    lines = records.read_bytes().splitlines(keepends=True)
    cut = orjson.loads(lines[-1])
    records.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])

    openai_server.requests.clear()
    second = await regenerate(openai_server, str(run), "--budget", "25", "--budget", "50")
    assert second.exit_code == 0, second.output
    rows = [orjson.loads(line) for line in records.read_bytes().splitlines()]  # every line a whole record
    keys = [(r["trajectory"], r["step"]) for r in rows]
    assert (cut["trajectory"], cut["step"]) in keys[len(lines) - 1 :]  # the cut one was asked again
    assert len(openai_server.requests) == len(rows) - (len(lines) - 1)

    openai_server.requests.clear()
    third = await regenerate(openai_server, str(run), "--budget", "25", "--budget", "50")
    assert third.exit_code == 0, third.output
    assert openai_server.requests == []  # everything answered is read back


@pytest.mark.anyio
async def test_records_of_another_logged_action_are_refused_not_reused(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    # Another run's directory (--out) whose stream has the same ids but other logged actions: its regenerations
    # answer other prompts and must not stand in for this run's.
    run, records = await regenerated_by_a_perfect_actor(tmp_path, openai_server, "10")
    lines = records.read_bytes().splitlines(keepends=True)
    other = orjson.loads(lines[0]) | {"original_action": "[CLICK] <a> somewhere else"}
    records.write_bytes(orjson.dumps(other) + b"\n" + b"".join(lines[1:]))
    openai_server.requests.clear()
    second = await regenerate(openai_server, str(run), "--budget", "10")
    assert second.exit_code == EXIT_ERROR
    assert f"{records}:1: step {other['step']} of {other['trajectory']!r} was regenerated from another" in second.output
    assert openai_server.requests == []


@pytest.mark.anyio
async def test_stream_files_the_run_recorded_that_cannot_be_read_again_are_one_line(
    tmp_path: Path, openai_server: OpenAITestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The run records its stream files as `ceb score` was given them: relative ones are read from the current
    # directory, so a regeneration from another one cannot find them. Say that, on one line, before any request.
    scored_in = tmp_path / "work"
    convert_mind2web(M2W, M2W / "predictions.jsonl", scored_in / "streams")
    monkeypatch.chdir(scored_in)
    streams = sorted(str(p.relative_to(scored_in)) for p in (scored_in / "streams").glob("*.jsonl"))
    scored = await anyio.to_thread.run_sync(runner.invoke, app, ["score", *streams, "--out", "run"])
    assert scored.exit_code == 0, scored.output
    monkeypatch.chdir(tmp_path)
    result = await regenerate(openai_server, str(scored_in / "run"))
    assert result.exit_code == EXIT_ERROR
    error = result.output.strip()
    assert error.count("\n") == 0 and error.startswith("error:"), error
    assert f"{streams[0]}:0: field <file>: cannot read the file" in error and "nothing was scored" not in error
    assert str(scored_in / "run" / "config.json") in error and "1 more" in error
    assert openai_server.requests == [] and openai_server.preflights == []


@pytest.mark.anyio
async def test_a_second_regeneration_into_a_directory_in_use_is_refused_before_asking(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    # Two processes appending to one regenerations.jsonl would each ask the steps the other is asking.
    from ceb.pipeline.regenerate import RegenerationDir

    run = await scored_fixture(tmp_path)
    openai_server.responder = perfect
    with RegenerationDir(run / "regeneration").lock():
        result = await regenerate(openai_server, str(run), "--budget", "10")
    assert result.exit_code == EXIT_ERROR
    assert f"error: {run / 'regeneration'} is in use by another ceb process (pid {os.getpid()})" in result.output
    assert openai_server.requests == []


@pytest.mark.anyio
async def test_the_python_api_regenerates_and_reports_while_the_directory_is_held(
    tmp_path: Path, openai_server: OpenAITestServer
) -> None:
    # The command's whole driver is a library call: settings in, the outcome out while the directory is held.
    from ceb.config import load_config
    from ceb.pipeline.regenerate import RegenerationDir, RegenerationSettings, RegenerationSummary, regeneration

    run = await scored_fixture(tmp_path)
    openai_server.responder = perfect
    config = load_config(
        None, {"backend": {"name": "openai", "base_url": openai_server.base_url, "model": openai_server.model}}
    )
    seen: list[RegenerationSummary] = []

    def report() -> str:
        with regeneration(settings) as result:
            with (
                pytest.raises(RunError, match="is in use by another ceb process"),
                RegenerationDir(result.out.path).lock(),
            ):
                pass
            seen.append(result)
            return "reported"

    settings = RegenerationSettings(run_dir=run, config=config, budgets=(25.0,), seeds=2, command="ceb regenerate x")
    assert await anyio.to_thread.run_sync(report) == "reported"
    (result,) = seen
    assert result.out.path == run / "regeneration" and result.plan.budgets == (25.0,) and result.plan.seeds == (0, 1)
    assert result.asked == len(openai_server.requests) == result.flagged > 0
    assert result.about["command"] == "ceb regenerate x"
    assert result.about["backend"] == f"openai {openai_server.model} at {openai_server.base_url}"
    assert not (run / "regeneration" / "regeneration.md").exists()  # the table is the report's to write
