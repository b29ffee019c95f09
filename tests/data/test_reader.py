"""The strict SCHEMA.md version 1 reader and the atomic writer."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ceb.data import Step, Trajectory, read_stream, write_stream
from ceb.errors import Problem, StreamValidationError


def valid(tid: Any = "t1", **top: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "id": tid,
        "task": "list the files",
        "domain": "shell",
        "steps": [
            {"state": "", "action": "ls", "observation": "a b\n", "reward": 0.5, "label": 1},
            {"state": "a b\n", "action": "ls -l", "observation": "", "reward": 0.5, "label": 0},
        ],
    }
    obj.update(top)
    return obj


def with_step(step: int, **fields: Any) -> dict[str, Any]:
    obj = valid()
    obj["steps"][step].update(fields)
    return obj


def without(obj: dict[str, Any], key: str, step: int | None = None) -> dict[str, Any]:
    target = obj if step is None else obj["steps"][step]
    del target[key]
    return obj


def write_lines(path: Path, lines: list[bytes | dict[str, Any]]) -> Path:
    # json, not orjson: hypothesis makes integers beyond 64 bits, which orjson will not write.
    path.write_bytes(b"".join((x if isinstance(x, bytes) else json.dumps(x).encode()) + b"\n" for x in lines))
    return path


def problems_of(paths: list[Path]) -> list[Problem]:
    with pytest.raises(StreamValidationError) as info:
        read_stream(paths)
    return info.value.problems


def only_problem(path: Path, line: dict[str, Any] | bytes) -> Problem:
    """The one problem of a stream whose line 2 is ``line`` between two good lines."""
    write_lines(path, [valid("before"), line, valid("after")])
    problems = problems_of([path])
    assert len(problems) == 1, problems
    assert problems[0].path == str(path)
    assert problems[0].line == 2
    return problems[0]


# --- accepted input ---------------------------------------------------------------------------------


def test_reads_a_stream_of_several_files_in_order(tmp_path: Path) -> None:
    a = write_lines(tmp_path / "a.jsonl", [valid("x1"), valid("x2", actor="gpt-4", env="fs_1")])
    b = write_lines(tmp_path / "b.jsonl", [valid("x3", meta={"k": [1, {"n": None}]})])

    out = read_stream([a, str(b)])

    assert [t.id for t in out] == ["x1", "x2", "x3"]
    assert [t.source for t in out] == [f"{a}:1", f"{a}:2", f"{b}:1"]
    assert out[1].actor == "gpt-4" and out[1].env == "fs_1"
    assert out[2].meta == {"k": [1, {"n": None}]}
    assert out[0].meta == {}
    assert isinstance(out[0].steps, tuple)
    assert out[0].steps[0] == Step(state="", action="ls", observation="a b\n", reward=0.5, label=1)
    assert out[0].labels == (1, 0)


def test_blank_and_whitespace_lines_are_skipped_and_line_numbers_kept(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [b"", valid("a"), b"   \t\r", valid("b")])

    out = read_stream([path])

    assert [t.source for t in out] == [f"{path}:2", f"{path}:4"]


def test_crlf_line_endings_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(orjson.dumps(valid("a")) + b"\r\n" + orjson.dumps(valid("b")) + b"\r\n")

    assert [t.id for t in read_stream([path])] == ["a", "b"]


def test_optional_fields_may_be_null_or_absent(tmp_path: Path) -> None:
    nulls = {"reasoning": None, "op": None, "element": None, "value": None, "reward": None}
    obj = valid(actor=None, env=None, meta=None)
    obj["steps"][0].update(nulls, actor_logprobs=None, label=None)
    obj["steps"][1] = {"state": "", "action": "pwd", "observation": ""}
    path = write_lines(tmp_path / "s.jsonl", [obj])

    (traj,) = read_stream([path])

    assert traj.actor is None and traj.env is None and traj.meta == {}
    assert traj.steps[0] == Step(state="", action="ls", observation="a b\n")
    assert traj.steps[1] == Step(state="", action="pwd", observation="")


def test_numbers_become_floats_and_lists_tuples(tmp_path: Path) -> None:
    obj = with_step(0, reward=1, actor_logprobs=[0, -1, -0.25], reasoning="why", op="CLICK", element="e", value="v")
    path = write_lines(tmp_path / "s.jsonl", [obj])

    step = read_stream([path])[0].steps[0]

    assert step.reward == 1.0 and type(step.reward) is float
    assert step.actor_logprobs == (0.0, -1.0, -0.25)
    assert all(type(x) is float for x in step.actor_logprobs)
    assert (step.reasoning, step.op, step.element, step.value) == ("why", "CLICK", "e", "v")


@pytest.mark.parametrize("domain", ["web", "mobile", "shell", "sql", "my_domain-2"])
def test_accepts_lower_case_domains(tmp_path: Path, domain: str) -> None:
    path = write_lines(tmp_path / "s.jsonl", [valid(domain=domain)])

    assert read_stream([path])[0].domain == domain


# --- rejections: one rule each, with file, line, field, id and step --------------------------------

TOP_LEVEL_CASES = [
    ("missing id", without(valid(), "id"), "id", "required field is missing", None),
    ("empty id", valid(""), "id", "non-empty string", None),
    ("blank id", valid("  "), "id", "non-empty string", None),
    ("number id", valid(7), "id", "non-empty string, got 7", None),
    ("missing task", without(valid(), "task"), "task", "required field is missing", "t1"),
    ("number task", valid(task=3), "task", "must be a string, got a number", "t1"),
    ("missing domain", without(valid(), "domain"), "domain", "required field is missing", "t1"),
    (
        "upper-case domain",
        valid(domain="Web"),
        "domain",
        'lower-case word matching [a-z][a-z0-9_-]*, got "Web"',
        "t1",
    ),
    ("empty domain", valid(domain=""), "domain", "lower-case word", "t1"),
    ("two-word domain", valid(domain="web page"), "domain", "lower-case word", "t1"),
    ("digit-first domain", valid(domain="1web"), "domain", "lower-case word", "t1"),
    ("newline after domain", valid(domain="web\n"), "domain", "lower-case word", "t1"),
    ("list domain", valid(domain=["web"]), "domain", "got a list", "t1"),
    ("missing steps", without(valid(), "steps"), "steps", "required field is missing", "t1"),
    ("empty steps", valid(steps=[]), "steps", "at least one step", "t1"),
    ("object steps", valid(steps={}), "steps", "non-empty list of step objects, got an object", "t1"),
    ("number actor", valid(actor=4), "actor", "string or null, got a number", "t1"),
    ("boolean env", valid(env=True), "env", "string or null, got a boolean", "t1"),
    ("list meta", valid(meta=[1]), "meta", "object or null, got a list", "t1"),
    (
        "unknown field",
        valid(lable=1),
        "lable",
        "unknown field 'lable'; allowed fields: id, task, domain",
        "t1",
    ),
]


@pytest.mark.parametrize(
    ("obj", "field", "message", "tid"), [c[1:] for c in TOP_LEVEL_CASES], ids=[c[0] for c in TOP_LEVEL_CASES]
)
def test_rejects_bad_top_level_fields(
    tmp_path: Path, obj: dict[str, Any], field: str, message: str, tid: str | None
) -> None:
    problem = only_problem(tmp_path / "s.jsonl", obj)

    assert problem.field == field
    assert message in problem.message
    assert problem.trajectory_id == tid
    assert problem.step is None
    assert "s.jsonl:2" in str(problem) and f"field {field}" in str(problem)


STEP_CASES = [
    ("missing state", without(valid(), "state", 1), "steps[1].state", "required field is missing"),
    ("null state", with_step(1, state=None), "steps[1].state", "must be a string (may be empty), got null"),
    ("missing action", without(valid(), "action", 1), "steps[1].action", "required field is missing"),
    ("empty action", with_step(1, action=""), "steps[1].action", "non-empty string"),
    ("whitespace action", with_step(1, action=" \n\t"), "steps[1].action", "got only whitespace"),
    ("number action", with_step(1, action=3), "steps[1].action", "non-empty string, got a number"),
    ("missing observation", without(valid(), "observation", 1), "steps[1].observation", "required field"),
    ("list observation", with_step(1, observation=["x"]), "steps[1].observation", "got a list"),
    ("number reasoning", with_step(1, reasoning=1), "steps[1].reasoning", "string or null, got a number"),
    ("boolean op", with_step(1, op=False), "steps[1].op", "string or null, got a boolean"),
    ("list element", with_step(1, element=[]), "steps[1].element", "string or null, got a list"),
    ("object value", with_step(1, value={}), "steps[1].value", "string or null, got an object"),
    ("string reward", with_step(1, reward="1"), "steps[1].reward", 'finite number or null, got "1"'),
    ("boolean reward", with_step(1, reward=True), "steps[1].reward", "finite number or null, got true"),
    ("string logprobs", with_step(1, actor_logprobs="-1"), "steps[1].actor_logprobs", "must be a list"),
    ("empty logprobs", with_step(1, actor_logprobs=[]), "steps[1].actor_logprobs", "got an empty list"),
    ("positive logprob", with_step(1, actor_logprobs=[-1, 0.1]), "steps[1].actor_logprobs[1]", "<= 0"),
    ("boolean logprob", with_step(1, actor_logprobs=[False]), "steps[1].actor_logprobs[0]", "got false"),
    ("null logprob", with_step(1, actor_logprobs=[-1, None]), "steps[1].actor_logprobs[1]", "got null"),
    ("true label", with_step(1, label=True), "steps[1].label", "integer 0 or 1, or null, got true"),
    ("false label", with_step(1, label=False), "steps[1].label", "integer 0 or 1, or null, got false"),
    ("float label 1.0", with_step(1, label=1.0), "steps[1].label", "got 1.0"),
    ("float label 0.0", with_step(1, label=0.0), "steps[1].label", "got 0.0"),
    ("label 2", with_step(1, label=2), "steps[1].label", "got 2"),
    ("label -1", with_step(1, label=-1), "steps[1].label", "got -1"),
    ("string label", with_step(1, label="1"), "steps[1].label", 'got "1"'),
    (
        "unknown step field",
        with_step(1, labels=1),
        "steps[1].labels",
        "unknown step field 'labels'; allowed:",
    ),
    ("step not an object", valid(steps=[valid()["steps"][0], "ls"]), "steps[1]", "step object, got a string"),
]


@pytest.mark.parametrize(("obj", "field", "message"), [c[1:] for c in STEP_CASES], ids=[c[0] for c in STEP_CASES])
def test_rejects_bad_step_fields(tmp_path: Path, obj: dict[str, Any], field: str, message: str) -> None:
    problem = only_problem(tmp_path / "s.jsonl", obj)

    assert problem.field == field
    assert message in problem.message
    assert problem.trajectory_id == "t1"
    assert problem.step == 1
    assert "(trajectory 't1', step 1)" in str(problem)


def test_unknown_field_message_lists_every_allowed_name(tmp_path: Path) -> None:
    top = only_problem(tmp_path / "a.jsonl", valid(extra=1))
    step = only_problem(tmp_path / "b.jsonl", with_step(0, thought="x"))

    for name in ("id", "task", "domain", "actor", "env", "steps", "meta"):
        assert name in top.message
    for name in ("state", "action", "observation", "reasoning", "op", "element", "value", "reward"):
        assert name in step.message
    assert "actor_logprobs" in step.message and "label" in step.message


LINE_CASES = [
    ("not JSON", b"{not json", "not valid JSON"),
    ("truncated", orjson.dumps(valid())[:-1], "not valid JSON"),
    ("two objects on a line", orjson.dumps(valid()) + orjson.dumps(valid()), "not valid JSON"),
    ("JSON list", b"[1, 2]", "must be a JSON object, got a list"),
    ("JSON string", b'"id"', "must be a JSON object, got a string"),
    ("JSON null", b"null", "must be a JSON object, got null"),
    ("NaN literal", b'{"id": NaN}', "not valid JSON"),
    ("infinite number", b'{"id": "x", "reward": 1e400}', "not valid JSON"),
    ("deep nesting", b"[" * 5000 + b"]" * 5000, "not valid JSON"),
    ("bad UTF-8", b'{"id": "caf\xe9"}', "not valid UTF-8: byte 11"),
    ("lone surrogate escape", b'{"id": "\\ud800"}', "not valid JSON"),
    ("byte-order mark", b"\xef\xbb\xbf" + orjson.dumps(valid()), "byte-order mark"),
]


@pytest.mark.parametrize(("raw", "message"), [c[1:] for c in LINE_CASES], ids=[c[0] for c in LINE_CASES])
def test_rejects_lines_that_are_not_json_objects(tmp_path: Path, raw: bytes, message: str) -> None:
    problem = only_problem(tmp_path / "s.jsonl", raw)

    assert problem.field == "<line>"
    assert message in problem.message
    assert problem.trajectory_id is None and problem.step is None


def test_every_problem_is_collected_across_lines_and_files(tmp_path: Path) -> None:
    a = write_lines(tmp_path / "a.jsonl", [valid("a1"), with_step(0, label=True) | {"id": "a2"}, b"{oops"])
    b = write_lines(tmp_path / "b.jsonl", [valid("b1", domain="Web", task=None)])

    problems = problems_of([a, b])

    assert [(p.path, p.line, p.field) for p in problems] == [
        (str(a), 2, "steps[0].label"),
        (str(a), 3, "<line>"),
        (str(b), 1, "task"),
        (str(b), 1, "domain"),
    ]
    assert problems[0].trajectory_id == "a2" and problems[0].step == 0


def test_error_message_lists_the_problems(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [valid(domain="X"), valid("t2", task=1)])

    with pytest.raises(StreamValidationError, match=r"2 problems in the stream") as info:
        read_stream([path])

    text = str(info.value)
    assert f"{path}:1 (trajectory 't1'): field domain" in text
    assert f"{path}:2 (trajectory 't2'): field task" in text


def test_duplicate_id_names_both_places(tmp_path: Path) -> None:
    a = write_lines(tmp_path / "a.jsonl", [valid("x"), valid("y")])
    b = write_lines(tmp_path / "b.jsonl", [valid("z"), valid("x")])

    (problem,) = problems_of([a, b])

    assert (problem.path, problem.line, problem.field, problem.trajectory_id) == (str(b), 2, "id", "x")
    assert f"first at {a}:1" in problem.message


def test_duplicate_id_in_one_file(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [valid("x"), valid("y"), valid("x"), valid("x")])

    problems = problems_of([path])

    assert [(p.line, p.field) for p in problems] == [(3, "id"), (4, "id")]
    assert all(f"first at {path}:1" in p.message for p in problems)


def test_duplicate_of_a_bad_line_is_still_reported(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "s.jsonl", [valid("x", domain="X"), valid("x")])

    problems = problems_of([path])

    assert [(p.line, p.field) for p in problems] == [(1, "domain"), (2, "id")]


def test_bad_utf8_is_reported_on_its_own_line(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(orjson.dumps(valid("a")) + b"\n" + b'{"id": "\xff\xfe"}\n' + orjson.dumps(valid("c")) + b"\n")

    (problem,) = problems_of([path])

    assert (problem.line, problem.field) == (2, "<line>")
    assert "not valid UTF-8" in problem.message


def test_missing_directory_and_empty_files_are_problems(tmp_path: Path) -> None:
    good = write_lines(tmp_path / "good.jsonl", [valid()])
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = tmp_path / "blank.jsonl"
    blank.write_bytes(b"\n  \n")
    missing = tmp_path / "missing.jsonl"

    problems = problems_of([good, empty, blank, missing, tmp_path])

    assert [(p.path, p.line, p.field) for p in problems] == [
        (str(empty), 0, "<file>"),
        (str(blank), 0, "<file>"),
        (str(missing), 0, "<file>"),
        (str(tmp_path), 0, "<file>"),
    ]
    assert "holds no trajectory" in problems[0].message
    assert "cannot read the file" in problems[2].message


def test_no_paths_is_a_usage_error() -> None:
    with pytest.raises(ValueError, match="at least one path"):
        read_stream([])


def test_huge_line_is_read(tmp_path: Path) -> None:
    big = "x" * 5_000_000
    path = write_lines(tmp_path / "s.jsonl", [with_step(0, observation=big)])

    assert read_stream([path])[0].steps[0].observation == big


# --- writing ----------------------------------------------------------------------------------------


def full_trajectory(tid: str) -> Trajectory:
    steps = (
        Step(state="", action="[CLICK] <button> Go", observation="page", reasoning="go on", op="CLICK"),
        Step(
            state="<div/>",
            action="[TYPE] <input> q",
            observation="",
            element="<input>",
            value="q",
            reward=0.25,
            actor_logprobs=(-0.5, 0.0, -3.25),
            label=0,
        ),
        Step(state="é ✓ \u2028", action="done", observation="ok\n", reward=1.0, label=1),
    )
    meta = {"task_id": 3, "nested": {"a": [1, 2.5, None, "s"]}}
    return Trajectory(id=tid, task="find it", domain="web", steps=steps, actor="gpt-4", env="site", meta=meta)


def test_round_trip_equals_input_except_source(tmp_path: Path) -> None:
    items = [
        full_trajectory("a"),
        Trajectory(id="b", task="", domain="sql", steps=(Step("", "SELECT 1", ""),)),
    ]

    path = write_stream(tmp_path / "s.jsonl", items)
    back = read_stream([path])

    assert path == tmp_path / "s.jsonl"
    assert [t.source for t in back] == [f"{path}:1", f"{path}:2"]
    assert [Trajectory(**{**_fields(t), "source": ""}) for t in back] == items


def _fields(t: Trajectory) -> dict[str, Any]:
    return {name: getattr(t, name) for name in Trajectory.__slots__}


def test_written_lines_leave_out_none_fields_and_empty_meta(tmp_path: Path) -> None:
    traj = Trajectory(id="b", task="q", domain="sql", steps=(Step("", "SELECT 1", "", reward=0.0, label=0),))

    path = write_stream(tmp_path / "s.jsonl", [traj])

    assert path.read_bytes() == (
        b'{"id":"b","task":"q","domain":"sql","steps":'
        b'[{"state":"","action":"SELECT 1","observation":"","reward":0.0,"label":0}]}\n'
    )


def test_write_replaces_atomically_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"old\n")

    write_stream(path, [full_trajectory("a")])

    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]
    assert read_stream([path])[0].id == "a"


@pytest.mark.parametrize(
    ("traj", "field"),
    [
        (Trajectory(id="a", task="q", domain="sql", steps=(Step("", " ", ""),)), "steps[0].action"),
        (
            Trajectory(id="a", task="q", domain="sql", steps=(Step("", "x", "", reward=math.nan),)),
            "steps[0].reward",
        ),
        (
            Trajectory(id="a", task="q", domain="sql", steps=(Step("", "x", "", label=True),)),
            "steps[0].label",
        ),
        (Trajectory(id="a", task="q", domain="SQL", steps=(Step("", "x", ""),)), "domain"),
        (Trajectory(id="a", task="q", domain="sql", steps=()), "steps"),
        (Trajectory(id="a", task="q", domain="sql", steps=(Step("", "x", ""),), meta={"s": {1}}), "meta"),
    ],
    ids=["blank action", "NaN reward", "boolean label", "upper-case domain", "no steps", "set in meta"],
)
def test_write_refuses_what_read_would_reject_and_keeps_the_old_file(
    tmp_path: Path, traj: Trajectory, field: str
) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"old\n")

    with pytest.raises(StreamValidationError) as info:
        write_stream(path, [full_trajectory("ok"), traj])

    (problem,) = info.value.problems
    assert (problem.path, problem.line, problem.field) == (str(path), 2, field)
    assert path.read_bytes() == b"old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.jsonl"]


def test_write_refuses_duplicate_ids_and_empty_streams(tmp_path: Path) -> None:
    with pytest.raises(StreamValidationError) as info:
        write_stream(tmp_path / "s.jsonl", [full_trajectory("a"), full_trajectory("a")])
    assert info.value.problems[0].line == 2 and "first at line 1" in info.value.problems[0].message

    with pytest.raises(StreamValidationError, match="no trajectories"):
        write_stream(tmp_path / "s.jsonl", [])
    assert not (tmp_path / "s.jsonl").exists()


# --- hostile input never escapes as anything but StreamValidationError ------------------------------

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
VALID_OBJ = {**valid(), "actor": "a", "meta": {"k": 1}}
VALID_LINE = orjson.dumps(VALID_OBJ)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def read_or_problems(path: Path) -> list[Trajectory] | list[Problem]:
    try:
        return read_stream([path])
    except StreamValidationError as exc:
        assert exc.problems, "an error must name at least one problem"
        for p in exc.problems:
            assert p.path == str(path) and p.line >= 0 and p.field and p.message
        return exc.problems


@FUZZ
@given(data=st.binary(max_size=2000))
def test_arbitrary_bytes_only_raise_stream_validation_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(data)

    read_or_problems(path)


@FUZZ
@given(
    edits=st.lists(
        st.tuples(st.integers(0, len(VALID_LINE)), st.integers(0, 8), st.binary(max_size=6)),
        min_size=1,
        max_size=4,
    )
)
def test_mutated_valid_lines_only_raise_stream_validation_error(
    tmp_path: Path, edits: list[tuple[int, int, bytes]]
) -> None:
    line = bytearray(VALID_LINE)
    for at, cut, insert in edits:
        line[at : at + cut] = insert
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(VALID_LINE + b"\n" + bytes(line) + b"\n")

    read_or_problems(path)


@FUZZ
@given(
    where=st.sampled_from(["top", "step"]),
    key=st.sampled_from([*VALID_OBJ, "state", "action", "observation", "reward", "label", "zz"]),
    value=json_values,
)
def test_any_json_value_in_any_field_is_accepted_or_explained(tmp_path: Path, where: str, key: str, value: Any) -> None:
    obj = orjson.loads(VALID_LINE)
    (obj if where == "top" else obj["steps"][1])[key] = value
    path = write_lines(tmp_path / "fuzz.jsonl", [obj])

    result = read_or_problems(path)

    if result and isinstance(result[0], Trajectory):
        trajectories = [t for t in result if isinstance(t, Trajectory)]
        again = read_stream([write_stream(tmp_path / "again.jsonl", trajectories)])
        assert [_fields(t) | {"source": ""} for t in again] == [_fields(t) | {"source": ""} for t in result]
