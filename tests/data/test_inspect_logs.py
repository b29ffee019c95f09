"""``ceb convert inspect``: inspect_ai eval logs, read by inspect_ai's own reader, as trajectory streams.

The fixture logs (tests/fixtures/inspect, README there) were written by inspect_ai itself. The tests that read them
need the ``inspect`` extra, which CI installs; the missing-extra error and the help run without it.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data import read_stream
from ceb.data.inspect_logs import convert_inspect
from ceb.errors import ConfigError, DataError
from tests.support.paths import REPO

runner = CliRunner()
FIXTURE = REPO / "tests" / "fixtures" / "inspect"
needs_inspect = pytest.mark.skipif(
    importlib.util.find_spec("inspect_ai") is None,
    reason="inspect_ai is not installed (pip install -e '.[inspect]'); CI installs it",
)


@needs_inspect
@pytest.mark.parametrize("log", ["tool-task.eval", "tool-task.json"])
def test_each_sample_of_either_log_format_is_a_trajectory_with_its_score_as_outcome(tmp_path: Path, log: str) -> None:
    [stream] = convert_inspect(FIXTURE / log, tmp_path)
    first, second = read_stream([stream.path])

    assert stream.path.name == "inspect-tool-task.jsonl" and stream.trajectories == 2 and stream.steps == 5
    assert stream.actor == "mockllm/model" and first.actor == "mockllm/model"
    assert (first.id, second.id) == ("add-1/epoch-1", "add-2/epoch-1")
    assert first.task == "What is 2 + 3? Use the add tool." and first.domain == "tool"
    assert [s.action for s in first.steps] == ['add {"x":2,"y":3}', "2 + 3 = 5. ANSWER: 5"]
    assert [s.observation for s in first.steps] == ["5", ""]
    assert [s.reasoning for s in first.steps] == ["I will add them.", None]
    assert [s.action for s in second.steps] == ['add {"x":7,"y":6}', 'add {"x":7,"y":5}', "ANSWER: 13"]
    assert [s.observation for s in second.steps] == ["13", "12", ""]
    assert [s.state for s in second.steps] == ["", "13", "12"]
    # the match scorer's C / I: the trajectory's outcome, never a step's label
    assert first.meta == {"file": log, "sample_id": "add-1", "epoch": 1, "scorer": "match", "score": "C", "label": 1}
    assert second.meta["score"] == "I" and second.meta["label"] == 0
    assert first.labels == (None, None) and second.labels == (None, None, None)


@needs_inspect
def test_both_formats_convert_to_the_same_trajectories(tmp_path: Path) -> None:
    [a] = convert_inspect(FIXTURE / "tool-task.eval", tmp_path / "eval")
    [b] = convert_inspect(FIXTURE / "tool-task.json", tmp_path / "json")

    def content(path: Path) -> list[tuple[object, ...]]:
        return [
            (t.id, t.task, t.steps, t.actor, {k: v for k, v in t.meta.items() if k != "file"})
            for t in read_stream([path])
        ]

    assert content(a.path) == content(b.path)


@needs_inspect
def test_a_folder_gives_one_stream_per_log_and_the_command_prints_them(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    (logs / "older").mkdir(parents=True)
    shutil.copy(FIXTURE / "tool-task.eval", logs / "run-a.eval")  # any .eval file is a log
    # a .json file is one when it is named as inspect_ai names its logs (inspect_ai's list_eval_logs)
    shutil.copy(FIXTURE / "tool-task.json", logs / "older" / "2026-11-28T04-08-00+00-00_tool-task_b.json")
    (logs / "older" / "notes.json").write_text('{"not": "a log"}')

    done = runner.invoke(app, ["convert", "inspect", "--logs", str(logs), "--out", str(tmp_path / "out")])

    assert done.exit_code == 0, done.output
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    # Both logs ran tool-task with mockllm/model: neither the task nor task and model tell them apart, the stems do.
    assert written == ["inspect-2026-11-28T04-08-00_00-00_tool-task_b.jsonl", "inspect-run-a.jsonl"]
    assert "inspect-run-a.jsonl" in done.output and "tool-task_b.jsonl" in done.output


@needs_inspect
def test_a_log_named_as_inspect_names_it_gives_a_stream_named_by_its_task(tmp_path: Path) -> None:
    """inspect_ai's file names (<time>_<task>_<id>) made 61-character stream names, repeated in every row."""
    log = tmp_path / "2026-11-28T04-08-00+00-00_tool-task_S4twfEBTh5wTSKQXknVrW2.eval"
    shutil.copy(FIXTURE / "tool-task.eval", log)
    [stream] = convert_inspect(log, tmp_path / "out")
    assert stream.path.name == "inspect-tool-task.jsonl"


@needs_inspect
def test_a_scorer_the_samples_do_not_have_is_named(tmp_path: Path) -> None:
    with pytest.raises(DataError) as caught:
        convert_inspect(FIXTURE / "tool-task.eval", tmp_path, scorer="accuracy")

    problem = caught.value.problem
    assert problem.path.endswith("tool-task.eval") and problem.field == "samples[add-1/epoch-1].scores"
    assert "no score by 'accuracy'" in problem.message and "match" in problem.message
    assert not any(tmp_path.iterdir())


@needs_inspect
def test_a_file_that_is_not_an_eval_log_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "broken.eval"
    bad.write_bytes(b"not a zip")

    with pytest.raises(DataError) as caught:
        convert_inspect(bad, tmp_path / "out")

    assert caught.value.problem.path == str(bad) and "inspect_ai cannot read it as an eval log" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_without_the_extra_the_command_names_it_and_its_help_still_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # import inspect_ai now raises ImportError
    monkeypatch.setitem(sys.modules, "inspect_ai.log", None)

    with pytest.raises(ConfigError, match=r"install it with: pip install -e '\.\[inspect\]' in ceb's checkout"):
        convert_inspect(FIXTURE / "tool-task.eval", tmp_path)
    done = runner.invoke(app, ["convert", "inspect", "--logs", str(FIXTURE / "tool-task.eval"), "--out", str(tmp_path)])
    helped = runner.invoke(app, ["convert", "inspect", "--help"])

    assert done.exit_code == 2 and "pip install -e '.[inspect]' in ceb's checkout" in done.output
    assert helped.exit_code == 0 and "--logs" in helped.output and "--scorer" in helped.output
    assert "inspect_ai's own log reader" in helped.output


def _bomb(tmp_path: Path, observation_mb: float) -> Path:
    """The fixture ``.eval`` with sample add-1's tool result a run of ``observation_mb`` MB of one letter."""
    import zipfile

    import inspect_ai.log  # noqa: F401  (its zipfile_zstd teaches zipfile the fixture's zstd entries)
    import orjson

    bomb = tmp_path / "bomb.eval"
    with zipfile.ZipFile(FIXTURE / "tool-task.eval") as src, zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "samples/add-1_epoch_1.json":
                sample = orjson.loads(data)
                for message in sample["messages"]:
                    if message["role"] == "tool":
                        message["content"] = "a" * int(observation_mb * 1_000_000)
                data = orjson.dumps(sample)
            dst.writestr(info.filename, data)
    return bomb


@needs_inspect
def test_a_compressed_bomb_is_refused_before_it_inflates_naming_the_file_and_the_limit(tmp_path: Path) -> None:
    bomb = _bomb(tmp_path, 3)
    assert bomb.stat().st_size < 100_000
    with pytest.raises(
        DataError, match=r"bomb\.eval:0: field <file>: inflates to 3\.\d MB, over the limit of 2 MB a log"
    ):
        convert_inspect(bomb, tmp_path / "out", max_log_mb=2)
    with pytest.raises(DataError, match=r"field steps\[0\]\.observation: is 3\.0 MB, over the limit of 1 MB a field"):
        convert_inspect(bomb, tmp_path / "out", max_field_mb=1)
    assert not (tmp_path / "out").exists()
    result = runner.invoke(
        app, ["convert", "inspect", "--logs", str(bomb), "--out", str(tmp_path / "out"), "--max-log-mb", "2"]
    )
    assert result.exit_code == 2 and "over the limit of 2 MB a log (--max-log-mb)" in result.output, result.output
    [stream] = convert_inspect(bomb, tmp_path / "out")  # within the defaults
    assert stream.trajectories == 2


@needs_inspect
@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_a_bound_that_bounds_nothing_is_refused(tmp_path: Path, bad: str) -> None:
    result = runner.invoke(
        app, ["convert", "inspect", "--logs", str(FIXTURE), "--out", str(tmp_path), "--max-field-mb", bad]
    )
    assert result.exit_code == 2 and "--max-field-mb" in result.output and "positive number" in result.output


@needs_inspect
def test_the_summary_says_no_labelled_step_and_two_logs_of_one_stem_are_logs(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["convert", "inspect", "--logs", str(FIXTURE / "tool-task.eval"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 0 and "no labelled step" in result.output and "nan" not in result.output
    for sub in ("a", "b"):
        (tmp_path / "logs" / sub).mkdir(parents=True)
        shutil.copy(FIXTURE / "tool-task.eval", tmp_path / "logs" / sub / "x.eval")
    with pytest.raises(DataError, match=r"field log: logs 'x' and 'x' would both write inspect-x\.jsonl"):
        convert_inspect(tmp_path / "logs", tmp_path / "o2")
