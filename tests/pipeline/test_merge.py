"""Issue 33 items 1-2: ``ceb merge`` refuses a damaged part, and a merge is published whole or not at all.

A part that lost rows, holds a row twice or lost its hindsight rows is refused naming the part, the lane and what
is wrong, with the ``--resume`` that repairs it (and that resume does). A merge cut short leaves no run that a
reader takes for whole, and the next merge into the same directory builds the run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.cli._common import EXIT_ERROR
from ceb.data import write_stream
from ceb.errors import RunError
from ceb.pipeline.merge import merge_runs
from ceb.pipeline.rundir import RunDir
from tests.support.builders import step, trajectory

runner = CliRunner()

N = 2
OPTIONS = ["--methods", "ceb,static", "--orders", "2"]


def _score(*args: str) -> None:
    result = runner.invoke(app, ["score", *args, *OPTIONS])
    assert result.exit_code == 0, result.output


def _sorted_rows(path: Path) -> list[bytes]:
    return sorted(path.read_bytes().splitlines())


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("merge")
    streams = []
    for s in ("alpha", "beta"):
        trajs = [
            trajectory(
                f"{s}{i}", step(f"ls {i}", "x", label=1), step("cat f", "no such file", label=0), step("pwd", "/")
            )
            for i in range(5)
        ]
        write_stream(root / f"{s}.jsonl", trajs)
        streams.append(str(root / f"{s}.jsonl"))
    _score(*streams, "--out", str(root / "whole"))
    parts = [root / f"part{i}" for i in range(N)]
    for i, part in enumerate(parts):
        _score(*streams, "--out", str(part), "--shard", f"{i}/{N}")
    return {"root": root, "streams": streams, "whole": root / "whole", "parts": parts}


def _copies(runs: dict[str, object], tmp_path: Path) -> list[Path]:
    out = []
    for part in runs["parts"]:  # type: ignore[attr-defined]
        shutil.copytree(part, tmp_path / part.name, ignore=shutil.ignore_patterns(".lock"))
        out.append(tmp_path / part.name)
    return out


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _first_lane(path: Path) -> tuple[str, int, str]:
    row = orjson.loads(_lines(path)[0])
    return row["stream"], row["order"], row["method"]


@pytest.mark.parametrize(
    ("damage", "wrong"),
    [
        (
            "rows-lost",
            r"lane \S+: (trajectory \S+ has no row of step|step rows of \d+ trajectories, where its plan"
            r"|trajectory \S+ has \d+ step rows, \d+ in part \S+ \(shard \d/\d\), lane \S+ \(rows lost)",
        ),
        ("row-twice", r"lane \S+: the row of trajectory \S+ step \d is in scores\.jsonl twice"),
        ("hindsight-emptied", r"lane \S+__ceb\S*: hindsight rows of 0 of its 5 trajectories"),
        ("summary-differs", r"summary\.json counts {n} rows of scores\.jsonl, which holds {held}"),
        ("bank-halved", r"lane \S+__ceb\S*: bank file banks/\S+\.json holds \d+ records, where summary\.json counts"),
        ("bank-junk", r"lane \S+__ceb\S*: bank file banks/\S+\.json cannot be read"),
        ("bank-other-records", r"lane \S+__ceb\S*: bank file banks/\S+\.json holds other records than its hindsight"),
    ],
)
def test_a_damaged_part_is_refused_naming_part_lane_and_repair(
    runs: dict[str, object], tmp_path: Path, damage: str, wrong: str
) -> None:
    parts = _copies(runs, tmp_path)
    part = RunDir(parts[1])
    if damage == "rows-lost":  # rows from the middle of the file: a lane loses steps of its trajectories
        lines = _lines(part.scores)
        part.scores.write_bytes(b"".join(lines[:10] + lines[13:]))
    elif damage == "row-twice":
        lines = _lines(part.scores)
        part.scores.write_bytes(b"".join([*lines[:5], lines[4], *lines[5:]]))
    elif damage == "hindsight-emptied":
        part.hindsight.write_bytes(b"")
    elif damage == "summary-differs":
        summary = orjson.loads(part.summary_file.read_bytes())
        summary["steps_scored"] += 1
        part.summary_file.write_bytes(orjson.dumps(summary))
        held = len(_lines(part.scores))
        wrong = wrong.format(n=held + 1, held=held)
    elif damage.startswith("bank"):
        bank = sorted((part.path / "banks").glob("*__ceb*.json"))[0]
        doc = orjson.loads(bank.read_bytes())
        assert len(doc["records"]) >= 2
        if damage == "bank-halved":
            doc["records"] = doc["records"][: len(doc["records"]) // 2]
            bank.write_bytes(orjson.dumps(doc))
        elif damage == "bank-junk":
            bank.write_bytes(b"junk")
        else:  # as many records, one of them changed
            doc["records"][0]["pseudo_label"] = 1 - doc["records"][0]["pseudo_label"]
            bank.write_bytes(orjson.dumps(doc))
    out = tmp_path / "merged"
    with pytest.raises(RunError) as refused:
        merge_runs(parts, out)
    message = str(refused.value)  # one line: the part, the lane, what is wrong, the repair of that part
    assert message.startswith(f"part {part.path} (shard 1/{N})"), message
    assert "\n" not in message
    assert re.search(wrong, message), message
    assert f"--resume {part.path} --shard 1/{N}" in message
    assert not out.exists() and not RunDir(out).building.path.exists()


def test_a_part_a_live_process_holds_is_refused_as_in_use(runs: dict[str, object], tmp_path: Path) -> None:
    parts = _copies(runs, tmp_path)
    in_use = rf"^part {parts[1]} is in use by another ceb process \(pid \d+\)"
    with RunDir(parts[1]).lock(), pytest.raises(RunError, match=in_use):  # as a `--resume` of that part holds it
        merge_runs(parts, tmp_path / "m")
    assert not (tmp_path / "m").exists()
    assert merge_runs(parts, tmp_path / "m").parts == N


def test_a_repaired_bank_merges(runs: dict[str, object], tmp_path: Path) -> None:
    parts = _copies(runs, tmp_path)
    part = RunDir(parts[1])
    bank = sorted((part.path / "banks").glob("*__ceb*.json"))[0]
    bank.write_bytes(b"junk")
    with pytest.raises(RunError, match=rf"--resume {part.path} --shard 1/{N}"):
        merge_runs(parts, tmp_path / "m")
    _score(*runs["streams"], "--resume", str(part.path), "--shard", f"1/{N}")  # type: ignore[misc]
    merged = merge_runs(parts, tmp_path / "m")
    assert (merged.out / "banks" / bank.name).read_bytes() == (
        RunDir(runs["whole"]).path / "banks" / bank.name
    ).read_bytes()  # type: ignore[arg-type]


def test_the_repair_the_refusal_names_makes_the_part_whole(runs: dict[str, object], tmp_path: Path) -> None:
    parts = _copies(runs, tmp_path)
    part = RunDir(parts[0])
    lines = _lines(part.scores)
    part.scores.write_bytes(b"".join(lines[:-7]))  # the last rows lost, as a kill would not (a summary was written)
    part.hindsight.write_bytes(b"".join(_lines(part.hindsight)[:-1]))
    with pytest.raises(RunError, match=rf"--resume {part.path} --shard 0/{N}"):
        merge_runs(parts, tmp_path / "m")
    _score(*runs["streams"], "--resume", str(part.path), "--shard", f"0/{N}")  # type: ignore[misc]
    merged = merge_runs(parts, tmp_path / "m")
    whole = RunDir(runs["whole"])  # type: ignore[arg-type]
    assert _sorted_rows(RunDir(merged.out).scores) == _sorted_rows(whole.scores)
    assert _sorted_rows(RunDir(merged.out).hindsight) == _sorted_rows(whole.hindsight)


def test_a_merge_that_fails_midway_leaves_no_run(
    runs: dict[str, object], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(self: RunDir, doc: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(RunDir, "write_summary", full_disk)
    out = tmp_path / "merged"
    with pytest.raises(OSError, match="No space"):
        merge_runs(runs["parts"], out)  # type: ignore[arg-type]
    assert not out.exists() and not RunDir(out).building.path.exists()


def test_a_killed_merge_is_never_read_and_the_next_merge_builds_the_run(
    runs: dict[str, object], tmp_path: Path
) -> None:
    out = tmp_path / "merged"
    merge_runs(runs["parts"], out)  # type: ignore[arg-type]
    whole = _sorted_rows(RunDir(out).scores), _sorted_rows(RunDir(out).hindsight)
    # What a merge SIGKILLed while it built leaves: its staging directory, the rows written so far, no summary.
    shutil.rmtree(out)
    stage = RunDir(out).building
    stage.path.mkdir()
    shutil.copyfile(RunDir(runs["parts"][0]).config_file, stage.config_file)  # type: ignore[index]
    shutil.copyfile(RunDir(runs["parts"][0]).scores, stage.scores)  # type: ignore[index]
    for command in (["metrics", str(stage.path)], ["export", str(stage.path), "--out", str(tmp_path / "x.csv")]):
        refused = runner.invoke(app, command)
        assert refused.exit_code == EXIT_ERROR, refused.output
        assert "not a run" in refused.output and "Traceback" not in refused.output
    result = runner.invoke(app, ["merge", *map(str, runs["parts"]), "--out", str(out)])  # type: ignore[call-overload]
    assert result.exit_code == 0, result.output
    assert (_sorted_rows(RunDir(out).scores), _sorted_rows(RunDir(out).hindsight)) == whole
    assert not stage.path.exists()


def test_a_half_merge_of_an_older_ceb_is_refused_by_readers_and_merged_again(
    runs: dict[str, object], tmp_path: Path
) -> None:
    out = RunDir(tmp_path / "merged")
    merge_runs(runs["parts"], out.path)  # type: ignore[arg-type]
    whole = _sorted_rows(out.scores), _sorted_rows(out.hindsight)
    # As the issue found it: config.json (no merge mark: an older ceb), every step row, some hindsight rows, no
    # banks, no summary.
    doc = orjson.loads(out.config_file.read_bytes())
    del doc[RunDir.MERGED]
    out.config_file.write_bytes(orjson.dumps(doc))
    out.hindsight.write_bytes(b"".join(_lines(out.hindsight)[:3]))
    shutil.rmtree(out.path / RunDir.BANKS)
    out.summary_file.unlink()
    out.metrics_file.unlink(missing_ok=True)
    readers = [
        ["metrics", str(out.path)],
        ["export", str(out.path), "--out", str(tmp_path / "s.csv")],
        ["report", str(out.path), "--boot", "0"],
    ]
    for command in readers:
        refused = runner.invoke(app, command)
        assert refused.exit_code == EXIT_ERROR, (command, refused.output)
        assert "not a complete run: it has no summary.json" in refused.output, refused.output
        assert "Traceback" not in refused.output
    assert not (tmp_path / "s.csv").exists() and not out.report_dir.exists()
    again = runner.invoke(app, ["merge", *map(str, runs["parts"]), "--out", str(out.path)])  # type: ignore[call-overload]
    assert again.exit_code == 0, again.output
    assert (_sorted_rows(out.scores), _sorted_rows(out.hindsight)) == whole
    assert out.require_readable() is None


def test_another_run_in_out_is_not_merged_over(runs: dict[str, object], tmp_path: Path) -> None:
    out = tmp_path / "merged"
    shutil.copytree(runs["whole"], out, ignore=shutil.ignore_patterns(".lock"))  # type: ignore[call-overload]
    with pytest.raises(RunError, match="already holds a run"):
        merge_runs(runs["parts"], out)  # type: ignore[arg-type]
    # Incomplete, and recorded with other settings: not a merge of these parts, kept as it is. (The unsharded run
    # with its summary gone records exactly the settings these parts merge into, so a merge would build it anew.)
    RunDir(out).summary_file.unlink()
    record = orjson.loads(RunDir(out).config_file.read_bytes())
    record["order_seed"] = int(record.get("order_seed") or 0) + 1
    RunDir(out).config_file.write_bytes(orjson.dumps(record))
    with pytest.raises(RunError, match="incomplete run that is not a merge of these parts"):
        merge_runs(runs["parts"], out)  # type: ignore[arg-type]
    assert RunDir(out).scores.is_file()


def test_parts_scored_from_copies_at_other_paths_merge(runs: dict[str, object], tmp_path: Path) -> None:
    """Issue 33 item 3: shards written on nodes that mount the data at different paths."""
    node = tmp_path / "node1"
    node.mkdir()
    copies = [str(node / Path(s).name) for s in runs["streams"]]  # type: ignore[attr-defined]
    for src, dst in zip(runs["streams"], copies, strict=True):  # type: ignore[call-overload]
        shutil.copyfile(src, dst)
    part1 = tmp_path / "part1"
    _score(*copies, "--out", str(part1), "--shard", f"1/{N}")
    merged = merge_runs([runs["parts"][0], part1], tmp_path / "m")  # type: ignore[index]
    assert _sorted_rows(RunDir(merged.out).scores) == _sorted_rows(RunDir(runs["whole"]).scores)  # type: ignore[arg-type]


def test_a_merge_into_a_directory_holding_its_parts_publishes_beside_them(
    runs: dict[str, object], tmp_path: Path
) -> None:
    """The layout of ``ceb grid --ray``: OUT/parts/ holds the parts, and the merged run lands beside them."""
    out = RunDir(tmp_path / "g")
    parts = [out.part(i, N).path for i in range(N)]
    for src, dst in zip(runs["parts"], parts, strict=True):  # type: ignore[call-overload]
        shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".lock"))
    merge_runs(parts, out.path)
    assert out.require_readable() is None
    assert _sorted_rows(out.scores) == _sorted_rows(RunDir(runs["whole"]).scores)  # type: ignore[arg-type]
    assert [p.path for p in out.parts()] == parts and not out.building.path.exists()
