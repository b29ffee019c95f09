"""Grid files: expansion of streams, sweep cells and critics, and one run directory in the tidy long format."""

from __future__ import annotations

from collections import Counter

import pytest
from typer.testing import CliRunner

from ceb.backends.scripted import ScriptedChat
from ceb.cli import app
from ceb.config import load_config
from ceb.data import write_stream
from ceb.errors import ConfigError, RunError
from ceb.pipeline import read_rows, run_scoring
from ceb.pipeline.grid import load_grid, resolve_grid
from ceb.pipeline.rundir import RunDir
from ceb.stages.assembly import llm_stages
from ceb.stages.methods import sweep_methods
from tests.support.builders import default_reply, step, trajectory


def _streams(folder):
    for s in ("alpha", "beta"):
        trajs = [trajectory(f"{s}{i}", step(f"ls {i}", "x", label=1), step("pwd", "/", label=0)) for i in range(5)]
        write_stream(folder / f"{s}.jsonl", trajs)


GRID = """
methods = ["ceb", "static", "ceb-single-vote"]
orders = 2

[ceb]
votes = 3

[grid]
streams = ["data/*.jsonl"]
out = "runs/g"
sweep_votes = [1, 3]
sweep_k = [1]
"""


def test_a_grid_runs_every_cell_into_one_tidy_run_directory(tmp_path):
    (tmp_path / "data").mkdir()
    _streams(tmp_path / "data")
    (tmp_path / "grid.toml").write_text(GRID)
    result = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml")])
    assert result.exit_code == 0, result.output
    rows = list(read_rows(tmp_path / "runs" / "g" / "scores.jsonl"))
    cells = Counter((r["stream"], r["order"], r["method"]) for r in rows)
    methods = ["ceb", "static", "ceb-single-vote", "ceb-V1-k1", "ceb-V3-k1"]
    assert set(cells) == {(s, o, m) for s in ("alpha", "beta") for o in (0, 1) for m in methods}
    assert set(cells.values()) == {10}
    # Order 1 is a permutation of the same trajectories.
    order1 = [r["trajectory"] for r in rows if r["stream"] == "alpha" and r["order"] == 1 and r["method"] == "ceb"]
    order0 = [r["trajectory"] for r in rows if r["stream"] == "alpha" and r["order"] == 0 and r["method"] == "ceb"]
    assert sorted(order1) == sorted(order0) and order1 != order0
    # static has no bank: scored in order 0 and copied to order 1 (ceb.pipeline.pool), same scores.
    static = {(r["order"], r["trajectory"], r["step"]): r for r in rows if r["method"] == "static"}
    assert {r["status"] for (o, *_), r in static.items() if o == 1} == {"reused"}
    assert all(r["score"] == static[(0, *place)]["score"] for (o, *place), r in static.items() if o == 1)
    again = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml"), "--resume"])
    assert again.exit_code == 0, again.output
    assert len(list(read_rows(tmp_path / "runs" / "g" / "scores.jsonl"))) == len(rows)


def test_grid_file_errors_name_the_problem(tmp_path):
    bad = tmp_path / "g.toml"
    bad.write_text('methods = ["ceb"]\n')
    with pytest.raises(ConfigError, match=r"\[grid\]"):
        load_grid(bad)
    bad.write_text('[grid]\nstreams = ["none/*.jsonl"]\nout = "o"\n')
    with pytest.raises(ConfigError, match="matches no file"):
        load_grid(bad)
    bad.write_text('[grid]\nstreams = ["x"]\nout = "o"\nsweep = 1\n')
    with pytest.raises(ConfigError, match="unknown"):
        load_grid(bad)
    bad.write_text('[grid]\nstreams = ["x"]\nout = "o"\nsweep_k = [1, 2]\n')
    with pytest.raises(ConfigError, match=r"sweep_k without sweep_votes adds no cell"):
        load_grid(bad)
    assert sweep_methods([1, 2], [3]) == ["ceb-V1-k3", "ceb-V2-k3"]


@pytest.mark.anyio
async def test_the_critic_axis_runs_each_critic_on_its_own_endpoint(tmp_path):
    config = load_config(
        overrides={
            "methods": ["ceb", "static"],
            "ceb": {"votes": 1},
            "critics": [{"name": "small", "model": "s"}, {"name": "large", "model": "l"}],
        }
    )
    chats = {name: ScriptedChat(default_reply) for name in ("small", "large")}
    stages = {name: llm_stages(config, chat) for name, chat in chats.items()}
    trajs = [trajectory(f"t{i}", step("ls", "x", label=1)) for i in range(3)]
    summary = await run_scoring({"s": trajs}, config, tmp_path, stages=stages)
    rows = list(read_rows(tmp_path / "scores.jsonl"))
    assert Counter(r["critic"] for r in rows) == {"small": 6, "large": 6}
    # ceb + static critic calls, 3 votes, per critic; and what speculation asked ahead and discarded
    assert all(len(c.requests) >= 3 + 3 + 3 for c in chats.values())
    assert sum(len(c.requests) for c in chats.values()) == 2 * (3 + 3 + 3) + summary.discarded_requests
    assert (tmp_path / "banks" / "s__ceb__small.json").is_file()
    with pytest.raises(ConfigError, match="repeat"):
        load_config(overrides={"critics": [{"name": "a"}, {"name": "a"}]})


def test_a_grid_can_pick_streams_and_limit_trajectories_and_its_resume_keeps_both(tmp_path):
    (tmp_path / "data").mkdir()
    _streams(tmp_path / "data")
    (tmp_path / "grid.toml").write_text(GRID)
    run = tmp_path / "runs" / "g"

    def lanes() -> Counter:
        return Counter((r["stream"], r["order"], r["method"]) for r in read_rows(run / "scores.jsonl"))

    first = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml"), "--streams", "al*", "--limit", "2"])
    assert first.exit_code == 0, first.output
    assert {s for s, _, _ in lanes()} == {"alpha"} and set(lanes().values()) == {4}  # 2 trajectories x 2 steps
    again = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml"), "--resume"])
    assert again.exit_code == 0, again.output  # the run's own stream and limit: nothing to add
    assert {s for s, _, _ in lanes()} == {"alpha"} and set(lanes().values()) == {4}
    grown = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml"), "--resume", "--limit", "3"])
    assert grown.exit_code == 0, grown.output
    assert set(lanes().values()) == {6}
    wrong = CliRunner().invoke(app, ["grid", str(tmp_path / "grid.toml"), "--streams", "gamma"])
    assert wrong.exit_code == 2
    assert "--streams 'gamma' matches no stream of the grid; its streams are: alpha, beta" in wrong.output


def test_a_ray_resume_takes_the_streams_and_limit_its_parts_recorded(tmp_path):
    # What `ceb grid --ray ADDRESS --resume` runs with, read back from OUT/parts/ without Ray: the parts' streams and
    # trajectory limit, unless the command gives its own; OUT itself holds no run to check.
    (tmp_path / "data").mkdir()
    _streams(tmp_path / "data")
    grid = tmp_path / "grid.toml"
    grid.write_text(GRID)
    out = tmp_path / "runs" / "g"
    for i in range(2):
        part = RunDir(out).part(i, 2).path
        args = ["grid", str(grid), "--streams", "al*", "--limit", "2", "--shard", f"{i}/2", "--out", str(part)]
        assert CliRunner().invoke(app, args).exit_code == 0

    spec = resolve_grid(grid, resume=True, ray=True)
    assert spec.out == out and list(spec.streams) == ["alpha"] and spec.config.max_trajectories == 2
    mine = resolve_grid(grid, streams=["*"], limit=3, resume=True, ray=True)
    assert list(mine.streams) == ["alpha", "beta"] and mine.config.max_trajectories == 3
    # Without --ray the same directory holds no run of its own to resume.
    with pytest.raises(RunError, match=f"cannot resume {out}"):
        resolve_grid(grid, resume=True)


@pytest.mark.parametrize("name", ["grid-intercode-bash.toml", "grid-intercode-bash-sim.toml"])
def test_the_shipped_grid_files_are_not_refused_for_methods_their_backend_cannot_run(name):
    from pathlib import Path

    from ceb.config import read_settings_file
    from ceb.stages.assembly import build_stages, lacks_endpoint
    from ceb.stages.methods import resolve_method

    data = read_settings_file(Path(__file__).parents[2] / "configs" / name)
    data.pop("grid")  # its streams are converted data that this test does not need
    config = load_config(None, data)
    stages = build_stages(config)
    if any(lacks_endpoint(resolve_method(m), stages) for m in config.methods):
        assert config.allow_unavailable  # else `ceb grid` refuses it at start
