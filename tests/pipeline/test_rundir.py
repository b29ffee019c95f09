"""The run directory has one owner: :class:`RunDir` names its files and reads what a run recorded."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import orjson
import pytest
import structlog.testing

import ceb
from ceb.config import load_config
from ceb.errors import ConfigError, RunError
from ceb.pipeline.rundir import RunDir
from ceb.stages.methods import resolve_method

ROOT = Path(ceb.__file__).parent
OWNER = ROOT / "pipeline" / "rundir.py"
NAMES = re.compile(r"(?<![\w.])(" + "|".join(re.escape(n) for n in (*RunDir.RESULTS, RunDir.LOCK)) + r")(?!\w)")
FOLDERS = {RunDir.BANKS, RunDir.REPORT}
"""Folder names of a run directory: caught where a path is joined with them (``run / "banks"``), as the words
are also a JSON key and a command's name."""


def _docstrings(tree: ast.AST) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        # attribute docstrings: a string expression right after an assignment
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    out.add(id(stmt.value))
    return out


def run_dir_names_outside_owner(root: Path = ROOT) -> list[str]:
    """``file:line 'literal'`` for each string in code (docstrings aside) that names a run-directory file."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        if path == OWNER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                if NAMES.search(node.value):
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value!r}")
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                right = node.right
                if isinstance(right, ast.Constant) and right.value in FOLDERS:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {right.value!r}")
    return found


def test_no_module_but_rundir_names_a_run_directory_file() -> None:
    assert run_dir_names_outside_owner() == []


def test_the_scan_finds_a_file_name_in_code_and_in_a_message(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        '"""Reads scores.jsonl (a docstring may say so)."""\n'
        "from pathlib import Path\n"
        'def f(d: Path) -> Path:\n    """From config.json."""\n    return d / "scores.jsonl"\n'
        'def g(d: Path) -> str:\n    return f"{d} has no config.json"\n'
        'def h(d: Path) -> Path:\n    return d / "banks"\n'
        'KEY = "banks"\n'
    )
    found = run_dir_names_outside_owner(pkg)
    assert sorted(f.split(" ", 1)[0] for f in found) == ["pkg/m.py:5", "pkg/m.py:7", "pkg/m.py:9"]


def _record(run: RunDir, config: dict[str, object] | None, streams: dict[str, object] | None = None) -> None:
    run.path.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {"fingerprints": {"config": {}, "streams": {}}, "streams": streams or {}}
    if config is not None:
        doc["config"] = config
    run.config_file.write_bytes(orjson.dumps(doc))


def test_recorded_config_and_streams_come_from_one_record(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert (run.recorded_streams(), run.started) == ([], False)
    config = load_config(overrides={"ece_bins": 7, "max_trajectories": 3})
    _record(run, config.model_dump(mode="json"), {"a": {}, "b": {}})
    assert run.recorded_config().ece_bins == 7
    assert run.recorded_streams() == ["a", "b"]
    assert run.recorded_fingerprints() == ({"config": {}, "streams": {}}, 3)
    run.record_limit(5)
    assert run.recorded_config().max_trajectories == 5


def test_a_missing_or_broken_record_falls_back_to_the_defaults_for_readers(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.recorded_or_default()[1] is False
    with pytest.raises(ConfigError, match="config.json"):
        run.recorded_config()
    _record(run, {"ece_bins": "many"})
    with pytest.raises(ConfigError, match=r"invalid setting ece_bins"):
        run.recorded_config()
    config, recorded = run.recorded_or_default()
    assert (config.ece_bins, recorded) == (10, False)


def test_missing_scores_and_fingerprints_are_named(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with pytest.raises(RunError, match=r"has no scores\.jsonl; is it a run directory"):
        run.require_scores()
    with pytest.raises(RunError, match=r"cannot resume .*config\.json is missing"):
        run.recorded_fingerprints()


def test_remove_results_keeps_what_is_not_a_result(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    for name in RunDir.RESULTS:
        (tmp_path / name).write_text("{}")
    (tmp_path / "banks").mkdir()
    (tmp_path / run.bank_file(("s", 1, "ceb", "big"))).write_text("{}")
    (tmp_path / "notes.txt").write_text("mine")
    run.remove_results()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert run.bank_file(("s", 1, "ceb", "big")) == "banks/s__ceb__o1__big.json"


def test_an_older_runs_config_json_still_loads_with_its_old_keys_noted(tmp_path: Path) -> None:
    # tests/fixtures/old_run/config.json was recorded by the config of main before issue 22's renames: the hindsight
    # temperature under ceb.tau, usefulness_k written out, the V=1 ablation under its old name ceb-v1.
    fixture = Path(__file__).parents[1] / "fixtures" / "old_run" / "config.json"
    (tmp_path / "config.json").write_bytes(fixture.read_bytes())
    with structlog.testing.capture_logs() as logs:
        config = RunDir(tmp_path).recorded_config()
    assert config.hindsight.temperature == 0.9 and config.bank.usefulness_k == 2
    assert config.methods == ("ceb", "static", "ceb-v1")
    assert [(e["key"], e["use"]) for e in logs if e["event"] == "config.deprecated_key"] == [
        ("ceb.tau", "hindsight.temperature"),
        ("baselines.format_retries", "critic.format_retries"),
    ]
    assert config.critic.format_retries == 2
    assert resolve_method("ceb-v1").votes == 1


def test_the_new_key_wins_over_its_old_one() -> None:
    config = load_config(overrides={"ceb": {"tau": 0.9}, "hindsight": {"temperature": 0.5}})
    assert config.hindsight.temperature == 0.5
    assert "tau" not in config.model_dump()["ceb"]
    moved = load_config(overrides={"baselines": {"format_retries": 0}})
    assert moved.critic.format_retries == 0 and "format_retries" not in moved.model_dump()["baselines"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run: two trajectories, CEB (a bank lane) and Static."""
    from functools import partial

    import anyio

    from ceb.pipeline import run_scoring
    from tests.support.builders import step, trajectory

    out = tmp_path_factory.mktemp("finished") / "run"
    trajs = [trajectory(f"t{i}", step("ls", "a", label=1), step("rm x", "denied", label=0)) for i in range(2)]
    config = load_config(overrides={"methods": ["ceb", "static"]})
    anyio.run(partial(run_scoring, {"s": trajs}, config, out))
    return out


def _copy(finished: Path, tmp_path: Path) -> RunDir:
    import shutil

    shutil.copytree(finished, tmp_path / "run", ignore=shutil.ignore_patterns(".lock"))
    return RunDir(tmp_path / "run")


def test_a_finished_run_is_readable_and_rows_alone_read_as_rows(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    assert run.require_readable() is None
    run.config_file.unlink()
    run.summary_file.unlink()
    assert run.require_readable() is None  # rows copied without their record: read as rows, as before


@pytest.mark.parametrize(
    ("damage", "refusal"),
    [
        ("no-summary", r"not a complete run: it has no summary\.json \(it was killed before it ended\)"),
        ("row-lost", r"not a complete run: summary\.json counts 8 rows of scores\.jsonl, which holds 7"),
        ("row-twice", r"not a complete run: summary\.json counts 8 rows of scores\.jsonl, which holds 9"),
        ("hindsight-emptied", r"summary\.json counts 2 rows of hindsight\.jsonl, which holds 0"),
        ("bank-gone", r"1 bank file\(s\) it lists are missing \(banks/s__ceb\.json"),
    ],
)
def test_an_incomplete_run_is_refused_naming_what_is_missing(
    finished: Path, tmp_path: Path, damage: str, refusal: str
) -> None:
    run = _copy(finished, tmp_path)
    lines = run.scores.read_bytes().splitlines(keepends=True)
    if damage == "no-summary":
        run.summary_file.unlink()
    elif damage == "row-lost":
        run.scores.write_bytes(b"".join(lines[1:]))
    elif damage == "row-twice":
        run.scores.write_bytes(b"".join([*lines, lines[0]]))
    elif damage == "hindsight-emptied":
        run.hindsight.write_bytes(b"")
    elif damage == "bank-gone":
        (run.path / run.bank_file(("s", 0, "ceb", ""))).unlink()
    with pytest.raises(RunError, match=refusal) as refused:
        run.require_readable()
    assert f"continue it with `ceb score <its streams> --resume {run.path}`" in str(refused.value)


def test_a_live_or_interrupted_run_is_read_with_a_note(finished: Path, tmp_path: Path) -> None:
    run = _copy(finished, tmp_path)
    run.summary_file.unlink()  # a run being scored has no summary yet
    with run.lock():  # held as a scoring process holds it
        note = run.require_readable()
    assert note is not None and "is being written now (ceb process" in note and "partial" in note
    with pytest.raises(RunError, match="no summary"):
        run.require_readable()  # the same directory once its process is gone (killed)
    finished_run = _copy(finished, tmp_path / "i")
    doc = orjson.loads(finished_run.summary_file.read_bytes())
    finished_run.summary_file.write_bytes(orjson.dumps(doc | {"status": "interrupted"}))
    note = finished_run.require_readable()
    assert note is not None and "the run ended interrupted, so its results are partial" in note


def test_a_sharded_runs_way_on_names_its_shard_and_the_staging_directory_is_no_run(
    finished: Path, tmp_path: Path
) -> None:
    run = _copy(finished, tmp_path)
    doc = orjson.loads(run.config_file.read_bytes())
    run.config_file.write_bytes(orjson.dumps(doc | {RunDir.SHARD: {"index": 1, "count": 3}}))
    run.summary_file.unlink()
    with pytest.raises(RunError, match=rf"--resume {re.escape(str(run.path))} --shard 1/3`"):
        run.require_readable()
    stage = RunDir(tmp_path / "merged").building
    (tmp_path / "run").rename(stage.path)
    with pytest.raises(RunError, match=r"is where a merge into .*merged is built, not a run"):
        stage.require_readable()
