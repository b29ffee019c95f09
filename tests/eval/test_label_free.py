"""What the scores say without labels: spreads, steps to review, deferrals, agreement; and an unlabelled run's
report and ``ceb score`` output, which show them instead of tables of n/a (issue 34.3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from ceb.cli import app
from ceb.data.reader import write_stream
from ceb.eval.label_free import agreement, deferrals, score_spreads, steps_to_review
from ceb.eval.lanes import lanes_from_rows
from ceb.eval.report import build_report
from tests.support.builders import step, step_rows, trajectory

NAN = float("nan")


def _row(method: str, traj: str, t: int, score: float | None, stream: str = "s") -> dict[str, object]:
    return {"stream": stream, "method": method, "trajectory": traj, "step": t, "score": score, "label": None}


def _lanes() -> list:
    rows = [
        _row("ceb", "A", 0, 0.9),
        _row("ceb", "A", 1, 0.2),
        _row("ceb", "B", 0, 0.4),
        _row("ceb", "B", 1, None),
        _row("ceb", "C", 0, 0.1),
        _row("static", "A", 0, 0.8),
        _row("static", "A", 1, 0.3),
        _row("static", "B", 0, 0.5),
        _row("static", "B", 1, 0.5),
        _row("static", "C", 0, 0.2),
    ]
    return lanes_from_rows(step_rows(rows))


def test_spreads_leave_out_failed_steps() -> None:
    ceb, static = score_spreads(_lanes())
    assert (ceb.method, ceb.n, ceb.low, ceb.high, ceb.distinct) == ("ceb", 4, 0.1, 0.9, 4)
    assert ceb.mean == pytest.approx(0.4) and ceb.quantiles[1] == pytest.approx(0.3)
    assert (static.n, static.distinct) == (5, 4)


def test_steps_to_review_are_the_lowest_and_trajectories_are_ranked_by_their_weakest_step() -> None:
    texts = {("s", "C", 0): ("task C", "rm -rf /")}
    steps, trajectories = steps_to_review(_lanes(), texts, k=2)
    assert [(r.method, r.trajectory, r.step, r.score) for r in steps] == [
        ("ceb", "C", 0, 0.1),
        ("ceb", "A", 1, 0.2),
        ("static", "C", 0, 0.2),
        ("static", "A", 1, 0.3),
    ]
    assert (steps[0].task, steps[0].action) == ("task C", "rm -rf /") and steps[1].action == ""
    # A's weakest step (0.2) ranks it before B (0.4); each trajectory once, given by that step.
    assert [(r.method, r.trajectory, r.step) for r in trajectories] == [
        ("ceb", "C", 0),
        ("ceb", "A", 1),
        ("static", "C", 0),
        ("static", "A", 1),
    ]


def test_deferrals_count_the_floor_of_b_percent_and_give_the_cut() -> None:
    got = {(d.method, d.budget): (d.deferred, d.cut) for d in deferrals(_lanes(), budgets=(0, 25, 50))}
    assert got[("ceb", 25)] == (1, 0.1) and got[("ceb", 50)] == (2, 0.2)
    assert got[("static", 25)] == (1, 0.2) and got[("static", 50)] == (2, 0.3)
    assert ("ceb", 0) not in got


def test_agreement_is_spearman_on_the_shared_steps_and_undefined_for_a_constant() -> None:
    (pair,) = agreement(_lanes())
    # Shared steps: A0, A1, B0, C0 (ceb failed B1): ceb 0.9, 0.2, 0.4, 0.1 and static 0.8, 0.3, 0.5, 0.2 rank alike.
    assert (pair.first, pair.second, pair.n, pair.rho) == ("ceb", "static", 4, pytest.approx(1.0))
    flat = [_row("a", "A", t, 0.5) for t in range(4)] + [_row("b", "A", t, 0.1 * t) for t in range(4)]
    assert agreement(lanes_from_rows(step_rows(flat)))[0].rho is None


def _unlabelled_stream(tmp_path: Path) -> Path:
    trajectories = [
        trajectory(
            f"t{i}",
            step("ls", "a.txt"),
            step("cat a.txt", "cat: a.txt: No such file"),
            step("cat a.txt", "cat: a.txt: No such file"),
            task=f"show file {i}",
        )
        for i in range(6)
    ]
    return write_stream(tmp_path / "mine.jsonl", trajectories)


def test_an_unlabelled_run_prints_and_reports_what_the_scores_say(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    stream = _unlabelled_stream(tmp_path)
    runner = CliRunner()
    scored = runner.invoke(app, ["score", str(stream), "--methods", "ceb,static", "--out", "run"], terminal_width=200)
    assert scored.exit_code == 0, scored.output
    assert "No labelled step: the scores without labels" in scored.output and "Steps to review" in scored.output
    assert "n/a" not in scored.output
    assert "cat a.txt" in scored.output  # the action of a lowest-confidence step

    report = build_report(tmp_path / "run", n_boot=0).read_text()
    assert "No scored step carries a label" in report
    assert "## 1. Without labels" in report and "## 2." not in report
    assert "### Steps to review" in report and "show file" in report and "n/a" not in report.split("## 1.")[1][:200]
    assert "### What selective execution would defer" in report and "### How the methods agree" in report


def test_a_labelled_report_ends_with_the_label_free_views(tmp_path: Path) -> None:
    trajectories = [
        trajectory(f"t{i}", step("ls", "a.txt", label=1), step("cat a.txt", "nope", label=0), task=f"task {i}")
        for i in range(4)
    ]
    path = write_stream(tmp_path / "lab.jsonl", trajectories)
    result = CliRunner().invoke(app, ["score", str(path), "--methods", "ceb,static", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    assert "Step-level confidence vs. held-out labels" in result.output
    report = build_report(tmp_path / "run", n_boot=0).read_text()
    assert "## 1. Main results" in report and "## 15. Without labels" in report


def test_tasks_and_actions_reach_the_report_escaped(tmp_path: Path) -> None:
    """A task or an action holding HTML is shown as text in report.md, never run as HTML (issue 41 item 7)."""
    evil = [
        trajectory(
            f"t{i}<b>",
            step("<img src=x onerror=alert(1)>", "a.txt"),
            step("cat a.txt | grep `x` && echo <i>", "cat: a.txt: No such file"),
            task="<script>alert(1)</script> & friends",
        )
        for i in range(3)
    ]
    stream = write_stream(tmp_path / "evil.jsonl", evil)
    scored = CliRunner().invoke(app, ["score", str(stream), "--methods", "ceb,static", "--out", str(tmp_path / "run")])
    assert scored.exit_code == 0, scored.output
    report = build_report(tmp_path / "run", n_boot=0).read_text()
    review = report.split("### Steps to review")[1].split("### What selective")[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; friends" in review
    assert (
        "&lt;img src=x onerror=alert(1)&gt;" in review
        and r"cat a.txt \| grep \`x\` &amp;&amp; echo &lt;i&gt;" in review
    )
    assert "t0&lt;b&gt;" in review
    assert "<script" not in report and "<img" not in report and "<b>" not in report and "<i>" not in report
