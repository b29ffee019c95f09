"""``--shard i/N`` and ``ceb merge``: N shards merged are the run one unsharded run writes; bad parts are refused."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import write_stream
from ceb.errors import ConfigError, RunError
from ceb.pipeline.merge import merge_runs
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.shard import Shard, lane_id, shard_of
from tests.support.builders import step, trajectory

runner = CliRunner()

N = 3
OPTIONS = ["--methods", "ceb,static", "--orders", "2"]


def _streams(folder: Path) -> list[str]:
    paths = []
    for s in ("alpha", "beta", "gamma"):
        trajs = [
            trajectory(f"{s}{i}", step(f"ls {i}", "x", label=1), step("rm -rf tmp", "denied", label=0))
            for i in range(4)
        ]
        write_stream(folder / f"{s}.jsonl", trajs)
        paths.append(str(folder / f"{s}.jsonl"))
    return paths


def _score(streams: list[str], out: Path, *extra: str) -> None:
    result = runner.invoke(app, ["score", *streams, "--out", str(out), *OPTIONS, *extra])
    assert result.exit_code == 0, result.output


def _lines(path: Path) -> list[bytes]:
    """The file's rows as bytes, sorted (an unsharded run writes lanes in the order they finish)."""
    return sorted(path.read_bytes().splitlines())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("shard")
    streams = _streams(root)
    _score(streams, root / "whole")
    parts = [root / f"part{i}" for i in range(N)]
    for i, part in enumerate(parts):
        _score(streams, part, "--shard", f"{i}/{N}")
    return {"root": root, "streams": streams, "whole": root / "whole", "parts": parts}


def test_lane_ids_are_the_session_keys_and_shards_are_stable() -> None:
    key = ("alpha", 1, "ceb", "")
    assert lane_id(key) == "alpha|1|ceb|"
    # BLAKE2b, not the salted hash(): the same shard in every process and release. These values are fixed for
    # good: a change would move the lanes of every sharded run under way, and its resumes would find other lanes.
    assert [shard_of(("alpha", o, m, ""), N) for o in (0, 1) for m in ("ceb", "static")] == [0, 2, 2, 0]
    assert shard_of(key, 1000) == 28
    assert {shard_of((s, o, m, ""), N) for s in "abcdefgh" for o in (0, 1) for m in ("ceb", "static")} == {0, 1, 2}
    assert Shard.parse(" 2/3 ") == Shard(2, 3)
    for bad in ("3/3", "-1/3", "1/0", "x", "1/3/4", "", "\uff11/3", "\u0661/3", "0/99999999999999999999"):
        with pytest.raises(ConfigError, match="i/N|0 <= i < N|N is at most"):
            Shard.parse(bad)


@pytest.mark.parametrize("spec", ["0/99999999999999999999", "\uff11/3"])
def test_a_shard_out_of_range_or_in_other_digits_is_a_usage_error(tmp_path: Path, spec: str) -> None:
    result = runner.invoke(app, ["score", *_streams(tmp_path), "--out", str(tmp_path / "r"), "--shard", spec])
    assert result.exit_code == EXIT_ERROR and "Traceback" not in result.output, result.output
    assert not (tmp_path / "r").exists()


def test_an_empty_shard_says_it_holds_no_lane(tmp_path: Path) -> None:
    keys = [(s, o, m, "") for s in ("alpha", "beta", "gamma") for o in (0, 1) for m in ("ceb", "static")]
    count = 40
    empty = next(i for i in range(count) if all(shard_of(k, count) != i for k in keys))
    result = runner.invoke(
        app, ["score", *_streams(tmp_path), "--out", str(tmp_path / "r"), *OPTIONS, "--shard", f"{empty}/{count}"]
    )
    assert result.exit_code == 0, result.output
    assert f"note: shard {empty}/{count} holds none of the run's lanes" in result.output


def test_each_shard_records_its_plan_and_scores_only_its_lanes(runs: dict[str, object]) -> None:
    lanes: list[set[tuple[str, int, str]]] = []
    for i, part in enumerate(runs["parts"]):  # type: ignore[arg-type]
        assert RunDir(part).recorded_shard() == {"index": i, "count": N}
        rows = [orjson.loads(x) for x in RunDir(part).scores.read_bytes().splitlines()]
        own = {(r["stream"], r["order"], r["method"]) for r in rows if r["reused_from"] is None}
        assert own and all(Shard(i, N).keeps((s, o, m, "")) for s, o, m in own)
        lanes.append(own)
    assert sum(len(x) for x in lanes) == len(set().union(*lanes))  # no lane twice
    assert RunDir(runs["whole"]).recorded_shard() is None  # type: ignore[arg-type]


def test_merged_shards_are_the_unsharded_run(runs: dict[str, object]) -> None:
    merged = runs["root"] / "merged"  # type: ignore[operator]
    result = runner.invoke(app, ["merge", *[str(p) for p in runs["parts"]], "--out", str(merged)])  # type: ignore[union-attr]
    assert result.exit_code == 0, result.output
    whole, out = RunDir(runs["whole"]), RunDir(merged)  # type: ignore[arg-type]
    assert _lines(out.scores) == _lines(whole.scores)
    assert _lines(out.hindsight) == _lines(whole.hindsight)
    banks = sorted(p.name for p in (whole.path / whole.BANKS).iterdir())
    assert banks and sorted(p.name for p in (out.path / out.BANKS).iterdir()) == banks
    for name in banks:
        assert (out.path / out.BANKS / name).read_bytes() == (whole.path / whole.BANKS / name).read_bytes()
    assert orjson.loads(out.metrics_file.read_bytes()) == orjson.loads(whole.metrics_file.read_bytes())
    assert out.recorded_shard() is None
    assert out.record()["fingerprints"] == whole.record()["fingerprints"]
    summary, base = out.recorded_summary(), whole.recorded_summary()
    assert summary is not None and base is not None and summary["status"] == "finished"
    for count in ("steps_scored", "steps_reused", "trajectories_voted", "requests"):
        assert summary[count] == base[count], count
    assert sorted(map(str, summary["banks"])) == sorted(map(str, base["banks"]))
    # Rows are written in a fixed order: merging again gives the same bytes.
    again = runs["root"] / "again"  # type: ignore[operator]
    merge_runs(list(reversed(runs["parts"])), again)  # type: ignore[call-overload]
    assert RunDir(again).scores.read_bytes() == out.scores.read_bytes()


def _copy_parts(runs: dict[str, object], tmp_path: Path) -> list[Path]:
    copies = []
    for part in runs["parts"]:  # type: ignore[attr-defined]
        dest = tmp_path / part.name
        shutil.copytree(part, dest, ignore=shutil.ignore_patterns(".lock"))
        copies.append(dest)
    return copies


def _edit(path: Path, edit) -> None:  # noqa: ANN001
    doc = orjson.loads(path.read_bytes())
    edit(doc)
    path.write_bytes(orjson.dumps(doc))


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", r"shards? 2/3 missing"),
        ("twice", r"shard 1/3 again"),
        ("unsharded", r"no shard plan"),
        ("count", r"shard count 4, not 3"),
        ("setting", r"differs from part .*setting ceb\.k"),
        ("stream", r"stream alpha: content changed"),
        ("limit", r"max_trajectories"),
        ("unfinished", r"status 'interrupted', not finished"),
        (
            "no-summary",
            r"part0 \(shard 0/3\): no summary\.json, so it never finished; repair it with "
            r"`ceb score .*--resume .*part0 --shard 0/3`",
        ),
        ("foreign-lane", r"rows of lane .*which is shard"),
        ("lane-left-out", r"no rows of its lane"),
        ("out-is-part", r"is one of the parts"),
        ("no-bank", r"no bank file banks/"),
    ],
)
def test_merge_refuses_parts_that_are_not_one_run(
    runs: dict[str, object], tmp_path: Path, case: str, message: str
) -> None:
    parts = _copy_parts(runs, tmp_path)
    cfg = [RunDir(p).config_file for p in parts]
    out = tmp_path / "merged"
    if case == "missing":
        parts = parts[:2]
    elif case == "twice":
        parts = [parts[0], parts[1], parts[1]]
        shutil.copytree(parts[1], tmp_path / "dup")
        parts[2] = tmp_path / "dup"
    elif case == "unsharded":
        _edit(cfg[1], lambda d: d.pop("shard"))
    elif case == "count":
        _edit(cfg[2], lambda d: d["shard"].update(count=4))
    elif case == "setting":
        _edit(cfg[1], lambda d: d["fingerprints"]["config"].update({"ceb.k": 99}))
    elif case == "stream":
        _edit(cfg[2], lambda d: d["fingerprints"]["streams"].update(alpha="0" * 64))
    elif case == "limit":
        _edit(cfg[1], lambda d: d["config"].update(max_trajectories=2))
    elif case == "unfinished":
        _edit(RunDir(parts[1]).summary_file, lambda d: d.update(status="interrupted"))
    elif case == "no-summary":
        RunDir(parts[0]).summary_file.unlink()
    elif case == "foreign-lane":
        # Part 0 also holds a lane of part 1: a lane in two parts.
        lines = RunDir(parts[1]).scores.read_bytes().splitlines(keepends=True)
        with RunDir(parts[0]).scores.open("ab") as f:
            f.write(lines[0])
    elif case == "lane-left-out":  # part 2 lost every row of one of its streams
        stream = orjson.loads(RunDir(parts[2]).scores.read_bytes().splitlines()[0])["stream"]
        for table in (RunDir(parts[2]).scores, RunDir(parts[2]).hindsight):
            rows = table.read_bytes().splitlines(keepends=True)
            table.write_bytes(b"".join(r for r in rows if orjson.loads(r)["stream"] != stream))
    elif case == "out-is-part":
        out = parts[0]
    elif case == "no-bank":
        next((parts[1] / RunDir.BANKS).iterdir()).unlink()
    with pytest.raises(RunError, match=message) as refused:
        merge_runs(parts, out)
    assert "\n" not in str(refused.value)
    assert not RunDir(out).started or case == "out-is-part"


def test_merge_cli_refusal_is_one_error_line(runs: dict[str, object], tmp_path: Path) -> None:
    parts = [str(p) for p in runs["parts"]][:2]  # type: ignore[attr-defined]
    result = runner.invoke(app, ["merge", *parts, "--out", str(tmp_path / "m")])
    assert result.exit_code == EXIT_ERROR
    assert "missing" in result.output and "Traceback" not in result.output


def test_a_shard_resumes_its_own_lanes_and_refuses_another_plan(runs: dict[str, object], tmp_path: Path) -> None:
    streams = runs["streams"]
    part = tmp_path / "part1"
    shutil.copytree(runs["parts"][1], part, ignore=shutil.ignore_patterns(".lock"))  # type: ignore[index]
    before = _lines(RunDir(part).scores)
    # Cut the part short (the last rows lost), then resume it as the same shard: its lanes and rows come back.
    lines = RunDir(part).scores.read_bytes().splitlines(keepends=True)
    RunDir(part).scores.write_bytes(b"".join(lines[: len(lines) // 2]))
    result = runner.invoke(app, ["score", *streams, "--resume", str(part), "--shard", f"1/{N}"])  # type: ignore[misc]
    assert result.exit_code == 0, result.output
    assert _lines(RunDir(part).scores) == before
    for other in ("0/3", "1/4"):
        refused = runner.invoke(app, ["score", *streams, "--resume", str(part), "--shard", other])  # type: ignore[misc]
        assert refused.exit_code == EXIT_ERROR and "shard 1/3" in refused.output, refused.output
    unsharded = runner.invoke(app, ["score", *streams, "--resume", str(part)])  # type: ignore[misc]
    assert unsharded.exit_code == EXIT_ERROR and "--shard 1/3" in unsharded.output, unsharded.output
    whole = runner.invoke(app, ["score", *streams, "--resume", str(runs["whole"]), "--shard", "0/3"])  # type: ignore[misc]
    assert whole.exit_code == EXIT_ERROR and "unsharded" in whole.output, whole.output


def test_grid_shard_writes_beside_the_grid_out(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    _streams(tmp_path / "data")
    (tmp_path / "grid.toml").write_text(
        'methods = ["ceb", "static"]\norders = 2\n[grid]\nstreams = ["data/*.jsonl"]\nout = "runs/g"\n'
    )
    for i in range(2):
        result = runner.invoke(app, ["grid", str(tmp_path / "grid.toml"), "--shard", f"{i}/2"])
        assert result.exit_code == 0, result.output
    parts = [tmp_path / "runs" / f"g-shard{i}of2" for i in range(2)]
    rows = RunDir(parts[0]).scores.read_bytes()
    again = runner.invoke(app, ["grid", str(tmp_path / "grid.toml"), "--shard", "0/2", "--resume"])
    assert again.exit_code == 0, again.output
    assert sorted(RunDir(parts[0]).scores.read_bytes().splitlines()) == sorted(rows.splitlines())
    assert [RunDir(p).recorded_shard() for p in parts] == [{"index": 0, "count": 2}, {"index": 1, "count": 2}]
    merged = merge_runs(parts, tmp_path / "runs" / "g")
    assert merged.lanes == 3 * (2 + 1)  # ceb in each order, static once for both orders
