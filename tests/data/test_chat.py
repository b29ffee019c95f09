"""OpenAI chat transcripts as steps (ceb.data.chat) and ``ceb convert chat`` on its fixture."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
import structlog
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data import read_stream
from ceb.data.chat import chat_steps, outcome_label, tool_action
from ceb.data.chat_transcripts import convert_chat
from ceb.errors import DataError
from tests.support.paths import REPO

runner = CliRunner()
FIXTURE = REPO / "tests" / "fixtures" / "chat"


def _call(call_id: Any, command: str) -> dict[str, Any]:
    arguments = orjson.dumps({"command": command}).decode()
    return {"id": call_id, "type": "function", "function": {"name": "bash", "arguments": arguments}}


# --- the mapping ----------------------------------------------------------------------------------------


def test_each_tool_call_is_a_step_its_tool_message_the_observation_the_previous_observation_the_state() -> None:
    chat = chat_steps(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "count the files"},
            {"role": "assistant", "content": None, "tool_calls": [_call("a", "ls")]},
            {"role": "tool", "tool_call_id": "a", "content": "x y"},
            {"role": "user", "content": "and the hidden ones?"},
            {"role": "assistant", "content": "look again", "tool_calls": [_call("b", "ls -a"), _call("c", "pwd")]},
            {"role": "tool", "tool_call_id": "c", "content": "/root"},
            {"role": "tool", "tool_call_id": "b", "content": ". .. x y"},
            {"role": "assistant", "content": "2 files"},
        ]
    )

    assert chat.task == "count the files" and chat.system == "be brief"
    assert [s.action for s in chat.steps] == [
        'bash {"command":"ls"}',
        'bash {"command":"ls -a"}',
        'bash {"command":"pwd"}',
        "2 files",
    ]
    assert [s.observation for s in chat.steps] == ["x y", ". .. x y", "/root", ""]  # matched by tool_call_id
    # parallel calls of one message share the state; the answer's state is the last call's observation
    assert [s.state for s in chat.steps] == ["", "x y", "x y", "/root"]
    assert [s.reasoning for s in chat.steps] == [None, "look again", "look again", None]


def test_a_tool_call_renders_the_same_however_its_arguments_were_spelt() -> None:
    openai = {"id": "x", "type": "function", "function": {"name": "f", "arguments": '{"b": 1, "a": [2]}'}}
    plain = {"name": "f", "arguments": {"a": [2], "b": 1}}

    assert tool_action(openai, "c") == tool_action(plain, "c") == 'f {"a":[2],"b":1}'
    assert tool_action({"name": "f", "arguments": "not json"}, "c") == "f not json"


@pytest.mark.parametrize(
    ("value", "label"),
    [(True, 1), (False, 0), (1, 1), (0, 0), (1.0, 1), ("C", 1), ("I", 0), ("P", None), (0.5, None), ("yes", None)],
)
def test_an_outcome_is_a_label_only_when_it_is_pass_or_fail(value: Any, label: int | None) -> None:
    assert outcome_label(value) == label


# --- ceb convert chat on the fixture -------------------------------------------------------------------


def test_the_fixture_converts_to_the_documented_trajectories(tmp_path: Path) -> None:
    [stream] = convert_chat(FIXTURE / "transcripts.jsonl", tmp_path)
    got = {t.id: t for t in read_stream([stream.path])}

    assert stream.path.name == "chat-transcripts.jsonl" and stream.trajectories == 3 and stream.steps == 8
    assert list(got) == ["shell-1", "transcripts.jsonl:2", "transcripts.jsonl:3"]  # id, else file:line
    shell = got["shell-1"]
    assert shell.task == "How many .py files are under /srv/app?" and shell.domain == "tool"
    assert shell.actor == "gpt-4.1-mini-2025-04-14" and shell.env == "fs_1"  # actor from the request's model
    assert [s.action for s in shell.steps] == [
        'bash {"command":"ls /srv/app"}',
        'bash {"command":"find /srv/app -name \'*.py\' | wc -l"}',
        "There are 5 .py files under /srv/app.",
    ]
    assert [s.observation for s in shell.steps] == ["main.py\nutil.py\ntests\n", "5\n", ""]
    assert shell.labels == (0, 1, 1)
    assert shell.meta == {"file": "transcripts.jsonl", "line": 1, "label": 1}  # success: true
    parallel = got["transcripts.jsonl:2"]
    assert parallel.task == "Compare the sizes of a.log and b.log."  # text parts of a content list
    assert parallel.labels == (None, None, None) and parallel.meta["label"] == 0 and parallel.meta["score"] == 0
    assert "label" not in got["transcripts.jsonl:3"].meta  # the fine-tuning format's tools: accepted, no outcome
    assert stream.positive_rate == pytest.approx(2 / 3)


def test_a_folder_converts_every_transcript_file_in_it_including_a_whole_file_messages_array(tmp_path: Path) -> None:
    [stream] = convert_chat(FIXTURE, tmp_path / "out")
    got = read_stream([stream.path])

    assert [t.id for t in got] == ["single.json:1", "shell-1", "transcripts.jsonl:2", "transcripts.jsonl:3"]
    assert got[0].task == "Is port 8080 free?" and len(got[0].steps) == 2


def test_the_command_prints_the_stream_and_its_help_names_the_fields(tmp_path: Path) -> None:
    done = runner.invoke(
        app, ["convert", "chat", "--transcripts", str(FIXTURE / "transcripts.jsonl"), "--out", str(tmp_path)]
    )
    helped = runner.invoke(app, ["convert", "chat", "--help"])

    assert done.exit_code == 0, done.output
    assert "chat-transcripts.jsonl" in done.output and "│ 3 " in done.output
    assert helped.exit_code == 0 and "--transcripts" in helped.output and "--domain" in helped.output
    assert "tool call is a step" in helped.output


def _convert_line(tmp_path: Path, *lines: Any) -> DataError:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"".join((x if isinstance(x, bytes) else orjson.dumps(x)) + b"\n" for x in lines))
    with pytest.raises(DataError) as caught:
        convert_chat(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written
    return caught.value


GOOD = {"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "tool_calls": [_call("a", "ls")]}]}


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        (b"{not json", "<line>", "not valid JSON"),
        ({**GOOD, "line": 7}, "line", "meta.line is taken"),  # kept in meta, where ceb writes its own
        ({"id": "x"}, "messages", "required field is missing"),
        ({**GOOD, "labels": [1, 0]}, "labels", "2 labels for 1 steps"),
        ({**GOOD, "labels": [True]}, "labels[0]", "0 or 1"),
        ({**GOOD, "success": "yes"}, "success", "true, false, 1 or 0"),
        ({**GOOD, "meta": {"label": 1}}, "meta.label", "ceb's own"),
        ({"messages": [{"role": "assistant", "tool_calls": [_call("a", "ls")]}]}, "task", "no user message"),
        (
            {"messages": [{"role": "user", "content": "t"}, {"role": "tool", "tool_call_id": "z", "content": "x"}]},
            "messages[1].tool_call_id",
            "answers no earlier",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]},
                ]
            },
            "messages[1].tool_calls[0].function.name",
            "non-empty string",
        ),
        ({"messages": [{"role": "robot"}]}, "messages[0].role", "must be system"),
        (  # two calls sharing an id: both once got the second result
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "tool_calls": [_call("a", "ls")]},
                    {"role": "tool", "tool_call_id": "a", "content": "x"},
                    {"role": "assistant", "tool_calls": [_call("a", "pwd")]},
                    {"role": "tool", "tool_call_id": "a", "content": "y"},
                ]
            },
            "messages[3].tool_calls[0].id",
            "'a' is also a call's id in messages[1]",
        ),
        (  # a numeric id once attached to the latest call
            {
                "messages": [
                    {"role": "user", "content": "t"},
                    {"role": "assistant", "tool_calls": [_call("a", "ls"), _call("b", "pwd")]},
                    {"role": "tool", "tool_call_id": 1, "content": "x"},
                ]
            },
            "messages[2].tool_call_id",
            "must be a string (a call's id), got",
        ),
        (
            {"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "tool_calls": [_call(7, "ls")]}]},
            "messages[1].tool_calls[0].id",
            "must be a string",
        ),
    ],
)
def test_a_bad_transcript_is_refused_naming_file_line_and_field(
    tmp_path: Path, bad: Any, field: str, words: str
) -> None:
    error = _convert_line(tmp_path, GOOD, bad)  # line 2: the first line is fine

    assert error.problem.path.endswith("bad.jsonl") and error.problem.line == 2 and error.problem.field == field
    assert words in error.problem.message
    assert str(error).count("\n") == 0 and f"bad.jsonl:2: field {field}" in str(error)


def test_unknown_top_level_fields_are_kept_in_meta_with_one_warning_per_file_and_strict_refuses(
    tmp_path: Path,
) -> None:
    """Logging wrappers add ``usage`` and ``created`` to each line; one such field used to fail the whole file."""
    path = tmp_path / "logged.jsonl"
    wrapped = [{**GOOD, "id": f"r{i}", "usage": {"total_tokens": 10 + i}, "created": 1700000000 + i} for i in (1, 2)]
    path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in wrapped))
    with structlog.testing.capture_logs() as logs:
        (stream,) = convert_chat(path, tmp_path / "out")
    assert [t.meta["usage"] for t in read_stream([stream.path])] == [{"total_tokens": 11}, {"total_tokens": 12}]
    assert [t.meta["created"] for t in read_stream([stream.path])] == [1700000001, 1700000002]
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert warning["file"] == str(path) and warning["fields"] == "created (2 transcripts), usage (2 transcripts)"

    strict = runner.invoke(
        app, ["convert", "chat", "--transcripts", str(path), "--out", str(tmp_path / "s"), "--strict"]
    )
    assert strict.exit_code != 0 and "logged.jsonl:1: field created" in strict.output
    assert "unknown field" in strict.output and not (tmp_path / "s").exists()


def test_a_repeated_id_names_where_it_first_appeared(tmp_path: Path) -> None:
    error = _convert_line(tmp_path, {**GOOD, "id": "r"}, {**GOOD, "id": "r"})

    assert error.problem.line == 2 and error.problem.field == "id" and "first at bad.jsonl:1" in error.problem.message


def test_a_transcript_without_an_action_is_skipped_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    silent = {"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "content": ""}]}
    path.write_bytes(orjson.dumps(silent) + b"\n" + orjson.dumps(GOOD) + b"\n")

    [stream] = convert_chat(path, tmp_path / "out")

    assert stream.trajectories == 1 and [s.id for s in stream.skipped] == ["t.jsonl:1"]


def test_a_missing_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such file or folder"):
        convert_chat(tmp_path / "nope.jsonl", tmp_path / "out")
    empty = tmp_path / "empty"
    shutil.copytree(FIXTURE, empty, ignore=shutil.ignore_patterns("*.json*"))
    with pytest.raises(DataError, match="no .jsonl or .json transcript file"):
        convert_chat(empty, tmp_path / "out")


def test_the_manuals_example_line_converts_as_the_manual_says(tmp_path: Path) -> None:
    page = (REPO / "docs" / "stream-format.md").read_text(encoding="utf-8")
    example = page[page.index("A transcript line:") :].split("```json\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "doc.jsonl"
    path.write_bytes(orjson.dumps(orjson.loads(example)) + b"\n")

    [trajectory] = read_stream([convert_chat(path, tmp_path / "out")[0].path])

    assert trajectory.id == "shell-1" and trajectory.actor == "gpt-4.1-mini" and trajectory.labels == (1, 1)
    assert [s.action for s in trajectory.steps] == ['bash {"command":"ls /srv/app"}', "There are 2 .py files."]
    assert trajectory.steps[1].state == "main.py\nutil.py\n" and trajectory.meta["label"] == 1


def test_an_over_deep_meta_is_named_at_its_input_line_not_the_unwritten_stream(tmp_path: Path) -> None:
    from ceb.data.reader import _META_MAX_DEPTH

    deep: Any = {}
    for _ in range(_META_MAX_DEPTH + 1):
        deep = {"a": deep}
    error = _convert_line(tmp_path, GOOD, {**GOOD, "meta": deep})
    assert str(error).startswith(f"{tmp_path / 'bad.jsonl'}:2 ") and error.problem.field == "meta", str(error)
    assert "nests deeper than" in str(error)


def test_a_field_past_the_bound_is_refused_naming_the_line_and_the_limit(tmp_path: Path) -> None:
    from ceb.data.writer import MAX_FIELD_MB

    huge = {**GOOD, "task": "t" * (MAX_FIELD_MB * 1_000_000 + 1)}
    error = _convert_line(tmp_path, GOOD, huge)
    assert str(error).startswith(f"{tmp_path / 'bad.jsonl'}:2 ") and error.problem.field == "task"
    assert f"over the limit of {MAX_FIELD_MB} MB a field (--max-field-mb)" in str(error)
