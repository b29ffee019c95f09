"""Reference rows: known AUROCs on a hand-made run, marked as references in metrics.json, the CLI and the report."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.config import load_config
from ceb.data import read_stream, write_stream
from ceb.eval import POOLED, run_metrics
from ceb.eval.reference_rules import BASE_RATE, REPETITION_FLAG, STEP_POSITION
from ceb.eval.report import build_report
from ceb.pipeline import run_scoring
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio

# rho_t (window 3): t0 step 1 repeats "ls a", t1 step 2 repeats "rm y", t2 step 2 repeats "echo".
STREAM = [
    trajectory("t0", step("ls a", label=1), step("ls a", label=0), step("cat b", label=1)),
    trajectory("t1", step("cd x", label=1), step("rm y", label=1), step("rm y", label=0)),
    trajectory("t2", step("echo", label=0), step("pwd", label=1), step("echo", label=0)),
]
# Repetition flag, 1 - rho: the 5 positives all score 1; the negatives score 0, 0, 1, 0: (3 + 3 ties / 2) / 4 each.
FLAG_AUROC = 0.875
# Step position 1 / (1 + t): positives at steps 0, 2, 0, 1, 1; negatives at 1, 2, 0, 2: 13 of 20 pairs won (ties 1/2).
POSITION_AUROC = 0.65


async def scored_run(tmp_path: Path, methods: list[str], *, from_file: bool = True) -> Path:
    path = write_stream(tmp_path / "s.jsonl", STREAM)
    stream = read_stream([path]) if from_file else STREAM  # read back: the run records the file
    run = tmp_path / "run"
    await run_scoring({"s": stream}, load_config(overrides={"methods": methods}), run)
    return run


async def test_reference_aurocs_are_the_hand_computed_ones_in_a_run_without_ceb(tmp_path: Path) -> None:
    run = await scored_run(tmp_path, ["static"])
    m = run_metrics(run)
    refs = {e["method"]: e for e in m["results"] if e.get("reference")}
    assert set(refs) == {BASE_RATE, STEP_POSITION, REPETITION_FLAG}
    assert refs[REPETITION_FLAG]["auroc"] == pytest.approx(FLAG_AUROC)
    assert refs[STEP_POSITION]["auroc"] == pytest.approx(POSITION_AUROC)
    assert refs[BASE_RATE]["auroc"] == 0.5 and refs[BASE_RATE]["ece"] == pytest.approx(0.0)
    for name in (STEP_POSITION, REPETITION_FLAG):  # rankings: AUROC only
        assert refs[name]["n"] == 9
        assert refs[name]["ece"] is None and refs[name]["brier"] is None and refs[name]["ece_equal_mass"] is None
    assert not any(e.get("reference") for e in m["results"] if e["method"] == "static")
    assert "references_missing" not in m


async def test_without_readable_stream_files_the_flag_reference_is_missing_and_says_why(tmp_path: Path) -> None:
    run = await scored_run(tmp_path, ["static"], from_file=False)
    m = run_metrics(run)
    assert {e["method"] for e in m["results"] if e.get("reference")} == {BASE_RATE, STEP_POSITION}
    assert set(m["references_missing"]) == {REPETITION_FLAG}


async def test_references_pool_over_streams(tmp_path: Path) -> None:
    a, b = write_stream(tmp_path / "a.jsonl", STREAM[:2]), write_stream(tmp_path / "b.jsonl", STREAM[2:])
    run = tmp_path / "run"
    streams = {"a": read_stream([a]), "b": read_stream([b])}
    await run_scoring(streams, load_config(overrides={"methods": ["static"]}), run)
    (pooled,) = (e for e in run_metrics(run)["results"] if e["method"] == STEP_POSITION and e["stream"] == POOLED)
    assert pooled["n"] == 9 and pooled["auroc"] == pytest.approx(POSITION_AUROC)


async def test_the_cli_marks_reference_rows(tmp_path: Path) -> None:
    run = await scored_run(tmp_path, ["static", "ceb"])
    result = CliRunner().invoke(app, ["metrics", str(run), "--reference"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "step-position (reference)" in text and "repetition-flag (reference)" in text
    assert "rules to compare with, not methods" in text and "a ranking, so AUROC only" in text
    # Without --reference: no reference row, one line of their pooled AUROCs instead.
    compact = " ".join(CliRunner().invoke(app, ["metrics", str(run)]).output.split())
    assert "(reference)" not in compact and "Reference rules, AUROC on s: base-rate 0.500, step-position" in compact


async def test_the_report_shows_references_that_never_win_and_pairs_against_them(tmp_path: Path) -> None:
    run = await scored_run(tmp_path, ["static", "ceb"])
    build_report(run, n_boot=50)
    doc = orjson.loads((run / "report" / "report.json").read_bytes())
    refs = {(r["stream"], r["method"]): r for r in doc["references"]}
    assert all(r["reference"] for r in doc["references"])
    assert refs[("s", STEP_POSITION)]["metrics"]["auroc"] == pytest.approx(POSITION_AUROC)
    assert refs[("s", STEP_POSITION)]["metrics"]["ece"] is None  # NaN in the row: n/a, null in JSON
    main = (run / "report" / "main.md").read_text()
    flag_row = next(line for line in main.splitlines() if "reference: repetition flag" in line)
    assert flag_row.startswith("| *reference: repetition flag* |") and "**" not in flag_row
    # A reference row is never bold, whatever its value.
    assert "Reference rows (italic) are rules to compare with" in main
    paired = [p for p in doc["paired"] if p["stream"] == "s"]
    against = {(p["method"], p["against"], p["metric"]) for p in paired}
    assert ("ceb", "static", "auroc") in against and ("ceb", "static", "ece") in against
    assert ("ceb", BASE_RATE, "brier") in against and ("static", BASE_RATE, "ece") in against
    best = max((STEP_POSITION, REPETITION_FLAG), key=lambda m: refs[("s", m)]["metrics"]["auroc"])
    assert ("ceb", best, "auroc") in against and not any(a == STEP_POSITION and m != "auroc" for _, a, m in against)
    report = (run / "report" / "report.md").read_text()
    assert "## 2. Paired differences against Static and the references" in report
    assert "no evidence of a difference" in report or "every interval excludes 0" in report
