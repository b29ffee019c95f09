"""The Mind2Web converter: label rule, states, actions and observations on hand-computed fixtures, and errors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest

from ceb.data.mind2web import CONVERTER, DEFAULT_DOM_CHARS, convert_mind2web, dom_snippet, mind2web_step_label
from ceb.data.reader import read_stream
from ceb.errors import ConfigError, DataError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "mind2web"
TASKS_2 = FIXTURES / "train_2.json"
TASKS_10 = FIXTURES / "train_10.json"
PREDICTIONS = FIXTURES / "predictions.jsonl"


def load(path: Path) -> Any:
    return orjson.loads(path.read_bytes())


def dump(path: Path, data: Any) -> Path:
    path.write_bytes(orjson.dumps(data))
    return path


def prediction_lines() -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in PREDICTIONS.read_text().splitlines() if line.strip()]


def write_lines(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    return path


# --- the label rule (paper appendix "Experimental Details") -----------------------------------------


@pytest.mark.parametrize(
    ("element", "op", "gold_op", "label"),
    [
        ("101", "CLICK", "CLICK", 1),  # right element, right op
        ("102", "CLICK", "CLICK", 0),  # wrong element
        ("101", "TYPE", "CLICK", 0),  # right element, wrong op
        ("101", "click", "CLICK", 1),  # ops compare case-insensitively
        ("101", "HOVER", "CLICK", 1),  # the dataset maps HOVER and ENTER to CLICK
        ("101", "ENTER", "CLICK", 1),
        ("101", "HOVER", "SELECT", 0),
        (None, "CLICK", "CLICK", 0),  # no element chosen
    ],
)
def test_label_needs_a_positive_element_and_the_gold_op(element: str | None, op: str, gold_op: str, label: int) -> None:
    assert mind2web_step_label(element, op, {"101", "105"}, gold_op) == label


def test_a_step_without_positive_candidates_is_never_positive() -> None:
    assert mind2web_step_label("40", "TYPE", set(), "TYPE") == 0


# --- the fixtures, converted ------------------------------------------------------------------------


def test_converts_the_fixtures_into_one_stream_per_actor(tmp_path: Path) -> None:
    out = convert_mind2web(FIXTURES, PREDICTIONS, tmp_path / "out")

    assert [(s.dataset, s.actor, s.trajectories, s.steps) for s in out] == [
        ("mind2web", "gpt-4.1", 2, 5),
        ("mind2web", "qwen/qwen3", 1, 2),
    ]
    assert [s.path.name for s in out] == ["mind2web-gpt-4.1.jsonl", "mind2web-qwen_qwen3.jsonl"]
    assert out[0].positive_rate == pytest.approx(2 / 5)
    assert out[1].positive_rate == 0.0
    # natural file order (train_2 before train_10), the predictions file last
    assert out[0].sources == (str(TASKS_2), str(TASKS_10), str(PREDICTIONS))

    gpt = read_stream([out[0].path])
    # c3 has no prediction and is left out; a1 (train_2) comes before b2 (train_10)
    assert [t.id for t in gpt] == ["mind2web/gpt-4.1/a1", "mind2web/gpt-4.1/b2"]
    a1, b2 = gpt
    assert (a1.domain, a1.actor, a1.env, a1.task) == (
        "web",
        "gpt-4.1",
        "jetblue",
        "Find one-way flights from New York to Boston in economy class.",
    )
    assert a1.meta == {
        "annotation_id": "a1",
        "domain": "Travel",
        "subdomain": "Airlines",
        "file": str(TASKS_2),
        "reference_actions": load(TASKS_2)[0]["action_reprs"],
    }
    # correct; wrong element; right element but wrong op (CLICK for SELECT)
    assert a1.labels == (1, 0, 0)
    # HOVER counts as the gold CLICK; no element chosen
    assert b2.labels == (1, 0)
    (qwen_b2,) = read_stream([out[1].path])
    # the nav that holds the target is still the wrong element; pos_candidates is empty on step 1
    assert qwen_b2.labels == (0, 0)


def test_step_fields_come_from_the_prediction_and_the_page(tmp_path: Path) -> None:
    out = convert_mind2web([TASKS_2, TASKS_10], PREDICTIONS, tmp_path / "out")
    a1, b2 = read_stream([out[0].path])

    first, second, third = a1.steps
    assert first.action == "[CLICK] <button> Search flights"
    assert (first.op, first.element, first.value) == ("CLICK", "<button> Search flights", None)
    assert first.reasoning == "The search button starts the flight search."
    # element 202 was predicted as an integer; its text comes from the candidate's attributes (the page has none)
    assert second.action == "[TYPE] <input> Where to? -> New York"
    assert (second.op, second.element, second.value) == ("TYPE", "<input> Where to?", "New York")
    assert second.actor_logprobs == (-0.1, -0.25)
    assert third.action == "[CLICK] <select> Economy Business"
    assert b2.steps[0].action == "[HOVER] <span> Weekly Ad"
    assert b2.steps[1].action == "[TYPE] (no element) -> bread"
    assert b2.steps[1].element is None


def test_state_is_the_page_and_observation_the_next_page(tmp_path: Path) -> None:
    out = convert_mind2web(FIXTURES, PREDICTIONS, tmp_path / "out")
    a1, _ = read_stream([out[0].path])
    tasks = load(TASKS_2)
    pages = [a["cleaned_html"] for a in tasks[0]["actions"]]

    # the fixture pages fit the default budget, so the state is the whole cleaned_html
    assert [s.state for s in a1.steps] == pages
    # o_t is the page after the step ran (step t+1's state), empty after the last; never the human's action
    assert [s.observation for s in a1.steps] == [pages[1], pages[2], ""]
    # the human's actions are kept for the judge in meta, which no stage sees
    assert a1.meta["reference_actions"] == tasks[0]["action_reprs"]


def test_the_reference_observation_is_an_explicit_option(tmp_path: Path) -> None:
    out = convert_mind2web(FIXTURES, PREDICTIONS, tmp_path / "out", observation="reference")
    a1, _ = read_stream([out[0].path])
    # o_t is the reference action t (what moved the page on), never the next step's answer
    assert [s.observation for s in a1.steps] == [
        "reference action executed: [button]  Search flights -> CLICK",
        "reference action executed: [textbox]  Where from? -> TYPE: New York",
        "reference action executed: [combobox]  cabin -> SELECT: Economy",
    ]
    help_text = next(o.help for o in CONVERTER.options if o.name == "observation")
    assert "reference" in help_text and "SHOWS THE REFERENCE ANSWER" in help_text


def test_gold_annotations_never_reach_a_state_or_an_action(tmp_path: Path) -> None:
    out = convert_mind2web(FIXTURES, PREDICTIONS, tmp_path / "out")
    for stream in out:
        for traj in read_stream([stream.path]):
            for step in traj.steps:
                for text in (step.state, step.action, step.element or "", step.reasoning or ""):
                    assert "pos_candidates" not in text and "is_original_target" not in text
                    assert "reference action" not in text


def test_empty_observation_mode_needs_no_action_reprs(tmp_path: Path) -> None:
    tasks = load(TASKS_2)
    for task in tasks:
        del task["action_reprs"]
    path = dump(tmp_path / "train_0.json", tasks)
    mine = [p for p in prediction_lines() if p["annotation_id"] == "a1"]
    preds = write_lines(tmp_path / "p.jsonl", mine)

    (stream,) = convert_mind2web(path, preds, tmp_path / "out", observation="empty")

    (a1,) = read_stream([stream.path])
    assert [s.observation for s in a1.steps] == ["", "", ""]
    assert a1.labels == (1, 0, 0)
    assert "reference_actions" not in a1.meta  # action_reprs were not read


def test_a_json_list_of_predictions_and_a_default_actor(tmp_path: Path) -> None:
    records = [p for p in prediction_lines() if p["actor"] == "gpt-4.1"]
    for record in records:
        del record["actor"]
    preds = dump(tmp_path / "preds.json", records)

    (stream,) = convert_mind2web(FIXTURES, preds, tmp_path / "out", actor="agent-x")

    assert stream.path.name == "mind2web-agent-x.jsonl"
    assert [t.labels for t in read_stream([stream.path])] == [(1, 0, 0), (1, 0)]


# --- the DOM snippet --------------------------------------------------------------------------------


def long_page() -> str:
    rows = "".join(f'<li backend_node_id="{i}">Item number {i}</li>' for i in range(100, 160))
    return f'<html backend_node_id="1"><body backend_node_id="2"><ul backend_node_id="3">{rows}</ul></body></html>'


def test_snippet_is_centred_on_the_element_and_cut_at_tag_boundaries() -> None:
    html = long_page()
    snippet = dom_snippet(html, "130", 300)

    assert '<li backend_node_id="130">Item number 130</li>' in snippet
    assert len(snippet) <= 300
    assert snippet.startswith("... <") and snippet.endswith("> ...")
    body = snippet.removeprefix("... ").removesuffix(" ...")
    assert body in html
    # centred: about as much page before the element as after it
    before, after = body.split('<li backend_node_id="130">')
    assert abs(len(before) - len(after)) < 80


def test_snippet_of_an_element_near_the_start_keeps_the_head() -> None:
    html = long_page()
    snippet = dom_snippet(html, "100", 300)

    assert snippet.startswith('<html backend_node_id="1">')
    assert snippet.endswith("> ...") and '<li backend_node_id="100">' in snippet


def test_snippet_without_the_element_is_the_head_of_the_page() -> None:
    html = long_page()

    for node in (None, "999"):
        snippet = dom_snippet(html, node, 300)
        assert snippet.startswith('<html backend_node_id="1">') and snippet.endswith("> ...")
        assert len(snippet) <= 300


def test_a_page_within_budget_is_returned_whole_and_a_tiny_budget_is_refused() -> None:
    assert dom_snippet("<a>x</a>", "1") == "<a>x</a>"
    assert DEFAULT_DOM_CHARS == 2000
    with pytest.raises(ConfigError, match="at least 100"):
        dom_snippet(long_page(), "130", 50)
    with pytest.raises(ConfigError, match="at least 100"):
        convert_mind2web(FIXTURES, PREDICTIONS, "unused", dom_chars=10)


def test_converter_truncates_long_pages_around_the_prediction(tmp_path: Path) -> None:
    tasks = load(TASKS_10)
    tasks[0]["actions"][0]["cleaned_html"] = long_page()
    tasks[0]["actions"][0]["neg_candidates"].append({"tag": "li", "backend_node_id": "150", "attributes": "{}"})
    path = dump(tmp_path / "train_10.json", tasks)
    preds = write_lines(
        tmp_path / "p.jsonl",
        [
            {"actor": "m", "annotation_id": "b2", "action_uid": "b2-0", "element_id": "150", "op": "CLICK"},
            {"actor": "m", "annotation_id": "b2", "action_uid": "b2-1", "element_id": "40", "op": "TYPE"},
        ],
    )

    (stream,) = convert_mind2web(path, preds, tmp_path / "out", dom_chars=400)

    (b2,) = read_stream([stream.path])
    state = b2.steps[0].state
    assert '<li backend_node_id="150">Item number 150</li>' in state and len(state) <= 400
    assert b2.steps[0].action == "[CLICK] <li> Item number 150"


# --- wrong layouts: every error names the file, the record and the field ----------------------------


def broken_task_file(tmp_path: Path, edit: Any) -> Path:
    tasks = load(TASKS_2)
    edit(tasks)
    return dump(tmp_path / "train_2.json", tasks)


@pytest.mark.parametrize(
    ("edit", "field", "step"),
    [
        (lambda t: t[0]["actions"][1].pop("operation"), "[0].actions[1].operation", 1),
        (lambda t: t[0]["actions"][1]["operation"].pop("op"), "[0].actions[1].operation.op", 1),
        (lambda t: t[0]["actions"][2].pop("cleaned_html"), "[0].actions[2].cleaned_html", 2),
        (lambda t: t[0]["actions"][0].pop("pos_candidates"), "[0].actions[0].pos_candidates", 0),
        (
            lambda t: t[0]["actions"][0]["neg_candidates"][1].pop("backend_node_id"),
            "[0].actions[0].neg_candidates[1].backend_node_id",
            0,
        ),
        (lambda t: t[0]["actions"][0].pop("action_uid"), "[0].actions[0].action_uid", 0),
        (lambda t: t[0].pop("confirmed_task"), "[0].confirmed_task", None),
        (lambda t: t[0].pop("website"), "[0].website", None),
        (lambda t: t[0]["action_reprs"].pop(), "[0].action_reprs", None),
    ],
)
def test_a_missing_task_field_is_named_with_file_task_and_step(
    tmp_path: Path, edit: Any, field: str, step: int | None
) -> None:
    path = broken_task_file(tmp_path, edit)

    with pytest.raises(DataError) as info:
        convert_mind2web([path, TASKS_10], PREDICTIONS, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.trajectory_id, problem.step) == (str(path), field, "a1", step)
    assert str(path) in str(info.value) and field in str(info.value)
    assert not (tmp_path / "out").exists()  # nothing is written when a source is broken


def test_a_missing_annotation_id_names_the_task_index(tmp_path: Path) -> None:
    path = broken_task_file(tmp_path, lambda t: t[1].pop("annotation_id"))

    with pytest.raises(DataError) as info:
        convert_mind2web([path, TASKS_10], PREDICTIONS, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.field) == (str(path), "[1].annotation_id")


def test_a_task_file_that_is_not_a_list_is_refused(tmp_path: Path) -> None:
    path = dump(tmp_path / "train_0.json", {"data": load(TASKS_2)})

    with pytest.raises(DataError, match="must be a JSON list of Mind2Web task objects") as info:
        convert_mind2web(path, PREDICTIONS, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.field) == (str(path), "<file>")


def test_bad_candidate_attributes_are_named(tmp_path: Path) -> None:
    path = broken_task_file(tmp_path, lambda t: t[0]["actions"][1]["neg_candidates"][0].update(attributes="{oops"))

    with pytest.raises(DataError) as info:
        convert_mind2web([path, TASKS_10], PREDICTIONS, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.step) == (str(path), "actions[1].neg_candidates[0].attributes", 1)


def test_a_step_without_a_prediction_is_named(tmp_path: Path) -> None:
    records = [p for p in prediction_lines() if p["action_uid"] != "a1-2"]
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError) as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    problem = info.value.problem
    assert (problem.path, problem.field, problem.trajectory_id, problem.step) == (str(preds), "action_uid", "a1", 2)
    assert "'a1-2'" in problem.message and "gpt-4.1" in problem.message


def test_an_unknown_annotation_id_names_the_predictions_line(tmp_path: Path) -> None:
    records = [
        *prediction_lines(),
        {"actor": "m", "annotation_id": "zz9", "action_uid": "x", "element_id": None, "op": "CLICK"},
    ]
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError, match="unknown annotation_id 'zz9'") as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (
        str(preds),
        8,
        "annotation_id",
    )


def test_an_unknown_action_uid_names_the_predictions_line(tmp_path: Path) -> None:
    records = prediction_lines()
    records[0]["action_uid"] = "a1-9"
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError, match="unknown action_uid 'a1-9'") as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (str(preds), 1, "action_uid")


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda r: r.pop("element_id"), "element_id"),
        (lambda r: r.pop("op"), "op"),
        (lambda r: r.pop("annotation_id"), "annotation_id"),
        (lambda r: r.pop("actor"), "actor"),
        (lambda r: r.update(elemnt="101"), "elemnt"),
        (lambda r: r.update(element_id=["101"]), "element_id"),
        (lambda r: r.update(actor_logprobs=[0.5]), "actor_logprobs[0]"),
    ],
)
def test_a_bad_prediction_names_its_line_and_field(tmp_path: Path, edit: Any, field: str) -> None:
    records = prediction_lines()
    edit(records[2])
    preds = write_lines(tmp_path / "p.jsonl", records)

    with pytest.raises(DataError) as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (str(preds), 3, field)


def test_a_bad_item_of_a_json_predictions_list_is_named_by_index(tmp_path: Path) -> None:
    records = prediction_lines()
    del records[2]["op"]
    preds = dump(tmp_path / "preds.json", records)

    with pytest.raises(DataError) as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    assert (info.value.problem.path, info.value.problem.line, info.value.problem.field) == (str(preds), 0, "[2].op")


def test_a_repeated_prediction_is_refused(tmp_path: Path) -> None:
    records = prediction_lines()
    preds = write_lines(tmp_path / "p.jsonl", [*records, records[0]])

    with pytest.raises(DataError, match="repeats the prediction at line 1") as info:
        convert_mind2web(FIXTURES, preds, tmp_path / "out")

    assert info.value.problem.line == 8


def test_a_repeated_annotation_id_across_task_files_is_refused(tmp_path: Path) -> None:
    copy = shutil.copy(TASKS_2, tmp_path / "again.json")

    with pytest.raises(DataError, match="annotation_id 'a1' repeats"):
        convert_mind2web([TASKS_2, copy], PREDICTIONS, tmp_path / "out")


def test_a_missing_task_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"

    with pytest.raises(DataError, match="cannot read the file") as info:
        convert_mind2web(missing, PREDICTIONS, tmp_path / "out")

    assert info.value.problem.path == str(missing)


def test_the_command_line_converts_the_fixture(tmp_path):
    from typer.testing import CliRunner

    from ceb.cli import app

    fixtures = Path(__file__).parents[1] / "fixtures" / "mind2web"
    result = CliRunner().invoke(
        app,
        [
            "convert",
            "mind2web",
            "--tasks",
            str(fixtures),
            "--predictions",
            str(fixtures / "predictions.jsonl"),
            "--out",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    assert list(tmp_path.glob("mind2web-*.jsonl"))
