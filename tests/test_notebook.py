"""The notebook API: ceb.score / ceb.ascore / ceb.read_run return DataFrames of the same run ``ceb score`` writes."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import anyio
import pytest

pd = pytest.importorskip(
    "pandas", reason="the notebook API needs pandas: pip install 'critic-experience-bank[notebook]'"
)

import ceb  # noqa: E402
from ceb.data.reader import write_stream  # noqa: E402
from ceb.data.trajectory import Step, Trajectory  # noqa: E402
from ceb.errors import ConfigError, DataError, RunError  # noqa: E402
from ceb.notebook import trajectories_from_frame  # noqa: E402
from ceb.pipeline.results import StepRow  # noqa: E402


def _trajectories() -> list[Trajectory]:
    out = []
    for i in range(4):
        steps = (
            Step(state="", action="ls", observation="a.txt", label=1),
            Step(state="a.txt", action="cat a.txt", observation="cat: a.txt: No such file", label=0),
            Step(state="", action="cat a.txt", observation="cat: a.txt: No such file", label=0),
        )
        out.append(Trajectory(id=f"t{i}", task=f"show the file {i}", domain="shell", steps=steps))
    return out


def _frame(trajectories: list[Trajectory]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"trajectory": t.id, "step": j, "task": t.task, "domain": t.domain, "state": s.state, "action": s.action}
            | {"observation": s.observation, "label": s.label}
            for t in trajectories
            for j, s in enumerate(t.steps)
        ]
    )


def test_score_returns_one_row_per_step_and_method_and_read_run_reads_it_back(tmp_path: Path) -> None:
    frame = ceb.score(_trajectories(), methods=["ceb", "static"], run_dir=tmp_path / "run")

    assert list(frame.columns) == list(StepRow.__dataclass_fields__)
    assert len(frame) == 2 * 4 * 3 and set(frame["method"]) == {"ceb", "static"}
    assert set(frame["stream"]) == {"stream"} and frame["score"].between(0, 1).all()
    assert frame.attrs["run_dir"] == str(tmp_path / "run")
    # The same run directory as `ceb score`: metrics.json, and the metrics in attrs.
    assert (tmp_path / "run" / "metrics.json").is_file()
    methods = {r["method"] for r in frame.attrs["metrics"]["results"]}
    assert {"ceb", "static"} <= methods
    pd.testing.assert_frame_equal(ceb.read_run(tmp_path / "run"), frame, check_like=False)
    hindsight = ceb.read_run(tmp_path / "run", table="hindsight")
    assert len(hindsight) == 4 and set(hindsight["method"]) == {"ceb"}


def test_score_reads_stream_files_and_a_dataframe_alike(tmp_path: Path) -> None:
    path = write_stream(tmp_path / "mine.jsonl", _trajectories())
    from_file = ceb.score(path, methods=["ceb"], run_dir=tmp_path / "a")
    from_frame = ceb.score(_frame(_trajectories()), methods=["ceb"], run_dir=tmp_path / "b")

    assert set(from_file["stream"]) == {"mine"} and set(from_frame["stream"]) == {"frame"}
    columns = ["trajectory", "step", "score", "label", "repetition_flag"]
    pd.testing.assert_frame_equal(from_file[columns], from_frame[columns])


def test_a_temporary_run_directory_is_made_and_kept_when_none_is_given() -> None:
    frame = ceb.score(_trajectories()[:1], methods=["static"])
    run = Path(frame.attrs["run_dir"])
    assert run.is_dir() and (run / "scores.jsonl").is_file()


def test_score_works_where_an_event_loop_already_runs(tmp_path: Path) -> None:
    """A Jupyter cell runs inside asyncio's loop: a plain call must not fail with 'already running'."""

    async def cell() -> pd.DataFrame:
        return ceb.score(_trajectories(), methods=["static"], run_dir=tmp_path / "run")

    frame = asyncio.run(cell())
    assert len(frame) == 12


def test_ascore_runs_on_the_callers_loop(tmp_path: Path) -> None:
    async def main() -> pd.DataFrame:
        return await ceb.ascore({"mine": _trajectories()}, methods=["ceb"], run_dir=tmp_path / "run")

    frame = anyio.run(main)
    assert set(frame["stream"]) == {"mine"} and len(frame) == 12


def test_a_run_directory_already_holding_a_run_is_refused_unless_overwritten(tmp_path: Path) -> None:
    ceb.score(_trajectories(), methods=["static"], run_dir=tmp_path / "run")
    with pytest.raises(RunError):
        ceb.score(_trajectories(), methods=["static"], run_dir=tmp_path / "run")
    assert len(ceb.score(_trajectories()[:2], methods=["static"], run_dir=tmp_path / "run", overwrite=True)) == 6


def test_frame_rows_are_grouped_sorted_and_checked() -> None:
    frame = _frame(_trajectories()[:2]).iloc[::-1].reset_index(drop=True)  # rows in any order
    frame["stream"] = ["x"] * 3 + ["y"] * 3
    streams = trajectories_from_frame(frame)
    assert list(streams) == ["x", "y"]
    assert [s.action for s in streams["x"][0].steps] == ["ls", "cat a.txt", "cat a.txt"]
    assert streams["y"][0].labels == (1, 0, 0)

    with pytest.raises(DataError, match="missing column") as info:
        trajectories_from_frame(frame.drop(columns=["action"]))
    assert info.value.problem.field == "action"
    gap = frame.copy()
    gap.loc[0, "step"] = 5
    with pytest.raises(DataError, match="must number its steps") as info:
        trajectories_from_frame(gap)
    assert info.value.problem.path == "<DataFrame row 0>"
    empty = frame.copy()
    empty.loc[1, "action"] = ""
    with pytest.raises(DataError, match="action"):
        trajectories_from_frame(empty)


def test_bad_arguments_are_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="list of method names"):
        ceb.score(_trajectories(), methods="ceb", run_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match="unknown method"):
        ceb.score(_trajectories(), methods=["nope"], run_dir=tmp_path / "b")
    with pytest.raises(ConfigError, match="empty sequence"):
        ceb.score([], run_dir=tmp_path / "c")
    with pytest.raises(RunError):
        ceb.read_run(tmp_path / "nothing-here")


def test_without_pandas_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[notebook\]' in ceb's checkout"):
        ceb.score(_trajectories(), run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_stream_name_cannot_write_outside_the_run_directory(tmp_path: Path) -> None:
    victim = tmp_path / "victim__ceb.json"
    victim.write_text("mine")
    run_dir = tmp_path / "runs" / "i"
    with pytest.raises(ConfigError, match=r"name '\.\./\.\./victim' cannot name a stream"):
        ceb.score({"../../victim": _trajectories()}, run_dir=run_dir)
    frame = _frame(_trajectories())
    frame["stream"] = "../../victim"
    with pytest.raises(ConfigError, match="cannot name a stream"):
        ceb.score(frame, run_dir=run_dir)
    with pytest.raises(ConfigError, match="cannot name a stream"):
        ceb.score({"x\n": _trajectories()}, run_dir=run_dir)
    assert victim.read_text() == "mine" and not run_dir.exists()


def test_a_trajectory_twice_in_a_stream_is_refused(tmp_path: Path) -> None:
    t = _trajectories()[0]
    with pytest.raises(DataError, match=r"duplicate id 't0' in stream 'stream'"):
        ceb.score([t, t], run_dir=tmp_path / "run")
    with pytest.raises(DataError, match=r"duplicate id 't0' in stream 's'"):
        ceb.score({"s": [t, *_trajectories()[1:], t]}, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("kwargs", "wrong"),
    [
        ({"data": 5}, r"data must be trajectories.*, not a value of type int"),
        ({"data": None}, r"data must be trajectories.*, not None"),
        ({"data": [{"id": "t"}]}, r"data must be trajectories.*; got a list holding a value of type dict"),
        ({"data": {"s": {"id": "t"}}}, r"data\['s'\] must be a list of Trajectory; got a value of type dict"),
        ({"data": {"s": [{"id": "t"}]}}, r"data\['s'\] must be a list of Trajectory; got a value of type dict"),
        ({"config": 5}, r"config must be a RunConfig, a mapping of settings or a settings file, not a value of"),
        ({"config": {"ceb": {"nope": 1}}}, r"bad configuration: ceb\.nope"),
        ({"run_dir": ""}, r"run_dir must name a directory \(None for a new temporary one\), not ''"),
        ({"methods": 3}, r"methods must be a list of method names"),
    ],
)
def test_arguments_of_another_kind_are_refused_as_ceb_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, object], wrong: str
) -> None:
    monkeypatch.chdir(tmp_path)
    args: dict[str, object] = {"data": _trajectories(), "run_dir": tmp_path / "run"} | kwargs
    with pytest.raises(ConfigError, match=wrong) as refused:
        ceb.score(args.pop("data"), **args)  # type: ignore[arg-type]
    assert "--" not in str(refused.value)  # no CLI flag named to a notebook user
    assert list(tmp_path.iterdir()) == []


def test_a_settings_mapping_is_a_config(tmp_path: Path) -> None:
    frame = ceb.score(_trajectories(), config={"methods": ["static"]}, run_dir=tmp_path / "run")
    assert set(frame["method"]) == {"static"}


def test_notebook_refusals_name_arguments_not_cli_flags(tmp_path: Path) -> None:
    ceb.score(_trajectories(), methods=["static"], run_dir=tmp_path / "run")
    with pytest.raises(RunError, match="pass overwrite=True") as refused:
        ceb.score(_trajectories(), methods=["static"], run_dir=tmp_path / "run")
    assert "--" not in str(refused.value)
    with pytest.raises(ConfigError, match="needs an LLM endpoint") as refused:
        ceb.score(_trajectories(), methods=["ptrue"], run_dir=tmp_path / "b")
    assert "--" not in str(refused.value)


def test_a_frame_row_without_a_trajectory_id_is_refused_not_named_nan() -> None:
    frame = _frame(_trajectories()[:1])
    frame.loc[1, "trajectory"] = float("nan")
    with pytest.raises(DataError, match=r"<DataFrame row 1>:0: field trajectory: missing trajectory id"):
        trajectories_from_frame(frame)


ABSURD: list[object] = [5, None, "", "../../x", "x\n", {"a": 1}, [None], [{"id": "t"}], float("nan"), b"x", object()]


@pytest.mark.parametrize("function", ["score", "read_run", "trajectories_from_frame"])
def test_absurd_values_of_every_argument_give_a_ceb_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    """Each argument of the notebook API, given a value of the wrong kind, ends in a ``CEBError`` naming no flag."""
    import inspect

    monkeypatch.chdir(tmp_path)
    call = getattr(ceb.notebook, function)
    valid = {"data": _trajectories(), "run_dir": tmp_path / "run", "frame": _frame(_trajectories())}
    for name in inspect.signature(call).parameters:
        for value in ABSURD:
            args = {n: valid[n] for n in inspect.signature(call).parameters if n in valid} | {name: value}
            try:
                call(**args)
            except ceb.errors.CEBError as exc:
                assert "--" not in str(exc), (name, value, exc)
            shutil.rmtree(tmp_path / "run", ignore_errors=True)
