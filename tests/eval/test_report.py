from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
import typer
from matplotlib.image import imread
from typer.testing import CliRunner

from ceb.cli.report import report as report_command
from ceb.config import BaselineConfig
from ceb.errors import RunError
from ceb.eval.bootstrap import MIN_TRAJECTORIES
from ceb.eval.metrics import summarize
from ceb.eval.report import adaptations, build_report
from ceb.pipeline.results import StepRow, read_rows

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _step(stream: str, method: str, traj: str, step: int, score: float | None, label: int | None, **kw: Any) -> StepRow:
    base: dict[str, Any] = {
        "error": None if score is not None else "timeout",
        "clipped": False,
        "raw": "",
        "latency_s": 0.0,
        "queue_s": 0.0,
        "requests": 1,
        "prompt_tokens": None,
        "completion_tokens": None,
        "bank_size": 0,
        "repetition_flag": False,
        "retrieved": [],
    }
    fields = base | kw
    if score is None:
        fields["status"] = "not_available" if fields["error"].startswith("not available") else "failed"
    return StepRow(stream, method, traj, step, score, label, **fields)


def _write_run(
    run: Path, *, alt: bool = True, orders: int = 2, methods: tuple[str, ...] = ("ceb", "static", "ppl")
) -> None:
    """Two streams x 12 trajectories x 2-7 steps; ppl is "not available" on stream web_b; one failed step."""
    rng = np.random.default_rng(0)
    rows: list[dict[str, Any]] = []
    for stream in ("web_a", "web_b"):
        trajs = [(f"{stream}/t{i}", int(rng.integers(2, 8))) for i in range(12)]
        labels = {(t, s): int(rng.random() < 0.4) for t, n in trajs for s in range(n)}
        judge = {k: 1 if v == 1 or rng.random() < 0.3 else 0 for k, v in labels.items()}
        for order in range(orders):
            perm = list(range(len(trajs))) if order == 0 else list(rng.permutation(len(trajs)))
            for pos, i in enumerate(perm):
                traj, n = trajs[i]
                for s in range(n):
                    y = labels[(traj, s)]
                    for method in methods:
                        kw: dict[str, Any] = {"order": order, "position": pos}
                        if method == "ppl" and stream == "web_b":
                            score, kw["error"] = None, "not available: the endpoint returns no logprobs"
                        elif method == "ceb":
                            score = float(np.clip(0.25 + 0.5 * y + rng.normal(0, 0.1), 0, 1))
                        else:
                            score = float(rng.uniform(0.3, 0.7))
                        if (stream, order, method, traj, s) == ("web_a", 0, "ceb", "web_a/t0", 0):
                            score = None  # a failed critic call
                        row = asdict(_step(stream, method, traj, s, score, y, **kw))
                        if alt:
                            row["alt_labels"] = [{"name": "judge", "label": judge[(traj, s)]}]
                        rows.append(row)
    rng.shuffle(rows)  # lanes interleave in the file ...
    rows.sort(key=lambda r: (r["stream"], r["order"], r["method"], r["position"], r["step"]))  # ... in stream order
    run.mkdir(parents=True, exist_ok=True)
    (run / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def _links(md: str) -> list[str]:
    return re.findall(r"\]\(([^)]+)\)", md)


def test_report_end_to_end(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run)
    path = build_report(run, n_boot=20, seed=0)
    out = run / "report"
    assert path == out / "report.md"
    md = path.read_text(encoding="utf-8")

    links = _links(md)
    assert links and all((out / link).is_file() for link in links)
    pngs = sorted(out.glob("*.png"))
    # cumulative ECE, depth and reliability for each of the two streams
    assert {p.name.split("-web")[0] for p in pngs} == {"cumulative-ece", "depth", "reliability"}
    assert len(pngs) == 6
    for png in pngs:
        assert png.name in links
        assert png.read_bytes()[:8] == PNG_MAGIC
        assert imread(png).ndim == 3
    for stem in ("main", "main-ci", "stream-averaging", "depth", "selective", "task-success", "label-shift"):
        assert f"{stem}.md" in links and f"{stem}.tex" in links
        assert (out / f"{stem}.tex").read_text().startswith("% Requires")
    assert "main-labels-judge.md" in links

    data = orjson.loads((out / "report.json").read_bytes())
    main = {(r["stream"], r["method"]): r for r in data["main"]}
    # ppl on web_b is n/a everywhere, with its reason, never a number.
    assert main[("web_b", "ppl")]["metrics"] is None
    assert main[("web_b", "ppl")]["note"].startswith("not available")
    assert "| PPL | 0." in md and "n/a (not available" in md
    # The failed step is counted and left out; the numbers are the metrics of the order-0 steps.
    ceb_a = main[("web_a", "ceb")]
    assert ceb_a["failed"] == 1
    rows = [orjson.loads(line) for line in (run / "scores.jsonl").read_bytes().splitlines()]
    lane = [r for r in rows if (r["stream"], r["method"], r["order"]) == ("web_a", "ceb", 0) and r["score"] is not None]
    expected = summarize([r["label"] for r in lane], [r["score"] for r in lane])
    assert ceb_a["n"] == expected.n == len(lane)
    assert ceb_a["metrics"]["ece"] == pytest.approx(expected.ece)
    ci = ceb_a["ci"]["ece"]
    assert ci["low"] <= ci["high"] and ci["n_valid"] == 20
    assert main[("(pooled)", "ceb")]["metrics"] is not None
    # ppl has no numbers on web_b, so it is not pooled over a different step set than the others.
    assert main[("(pooled)", "ppl")]["metrics"] is None
    assert main[("(pooled)", "ppl")]["note"] == "not pooled: no numbers on web_b"

    curves = {(c["stream"], c["method"]): c for c in data["stream_averaging"]}
    assert curves[("web_a", "ceb")]["orders"] == [0, 1]
    assert curves[("web_a", "ceb")]["task_counts"][-1] == 12
    assert curves[("web_a", "ceb")]["gap_orders"] == [0, 1]
    assert len(data["selective"]) == 6 and len(data["label_shift"]) == 2
    # Table 1 against the judge's labels has reference rows of its own: the base rate is the judge labels' rate.
    judge_refs = {(r["stream"], r["method"]): r for r in data["alt_references"]["judge"]}
    shift = {s["stream"]: s["shift"] for s in data["label_shift"]}
    rate = judge_refs[("web_a", "base-rate")]["metrics"]["positive_rate"]
    assert rate == pytest.approx(shift["web_a"]["alt_positive_rate"])
    assert judge_refs[("web_a", "base-rate")]["metrics"]["mean_score"] == pytest.approx(rate)
    assert "*reference: step position*" in (out / "main-labels-judge.md").read_text()
    # Selective execution and task success compare methods on shared steps / tasks: one base rate per stream.
    for stream in ("web_a", "web_b"):
        base_rates = {r["retained_positive_rate"][0] for r in data["selective"] if r["stream"] == stream}
        base_rates.discard(None)  # ppl on web_b
        assert len(base_rates) == 1
        tasks = [t for t in data["task_success"] if t["stream"] == stream and t["rates"][0] is not None]
        assert len({t["rates"][0] for t in tasks}) == 1 and len(tasks) >= 3  # methods + oracle
    # The failed ceb step drops task web_a/t0 for every method.
    assert {t["n_tasks"] for t in data["task_success"] if t["stream"] == "web_a"} == {11}
    assert "web_a: 1 of 12 tasks left out" in md

    # Same run, same seed: the same numbers.
    build_report(run, tmp_path / "again", n_boot=20, seed=0)
    assert (tmp_path / "again" / "report.json").read_bytes() == (out / "report.json").read_bytes()


def test_report_single_method_single_order_no_alt_labels(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, alt=False, orders=1, methods=("ceb",))
    path = build_report(run, tmp_path / "rep", n_boot=0)
    md = path.read_text(encoding="utf-8")
    assert "Skipped: the run has no alternative labels" in md
    assert "single order per stream" in md
    assert all((tmp_path / "rep" / link).is_file() for link in _links(md))
    assert "label-shift.md" not in _links(md)
    data = orjson.loads((tmp_path / "rep" / "report.json").read_bytes())
    assert data["label_shift"] == [] and data["alt_main"] == {}
    assert all(r["ci"]["ece"] is None for r in data["main"])


def test_report_errors(tmp_path: Path) -> None:
    with pytest.raises(RunError, match="no scores.jsonl"):
        build_report(tmp_path)
    (tmp_path / "scores.jsonl").write_bytes(b"")
    with pytest.raises(RunError, match="no scored step"):
        build_report(tmp_path)


def test_report_command(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, orders=1, methods=("ceb", "static"))
    (run / "config.json").write_bytes(orjson.dumps({"config": {"ece_bins": 5}}))
    # A recorded run is read once complete: its summary counts its rows (ceb.pipeline.rundir.RunDir.require_readable).
    rows = len((run / "scores.jsonl").read_bytes().splitlines())
    (run / "summary.json").write_bytes(orjson.dumps({"status": "finished", "steps_scored": rows}))
    app = typer.Typer()
    app.command()(report_command)
    runner = CliRunner()
    result = runner.invoke(app, [str(run), "--boot", "5", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "report.md" in result.output
    data = orjson.loads((run / "report" / "report.json").read_bytes())
    assert data["run"]["n_bins"] == 5 and data["run"]["n_boot"] == 5 and data["run"]["seed"] == 3
    missing = runner.invoke(app, [str(tmp_path / "nope")])
    assert missing.exit_code == 2
    assert "no scores.jsonl" in missing.output


def test_report_figures_in_the_asked_formats(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, alt=False, orders=1, methods=("ceb", "static"))
    out = run / "report"
    md = build_report(run, n_boot=0, figure_formats=("pdf", "svg")).read_text(encoding="utf-8")
    stems = {f"{kind}-{s}" for kind in ("cumulative-ece", "depth", "reliability") for s in ("web_a", "web_b")}
    assert not list(out.glob("*.png"))
    assert {p.stem for p in out.glob("*.pdf")} == {p.stem for p in out.glob("*.svg")} == stems
    for stem in stems:
        assert (out / f"{stem}.pdf").read_bytes().startswith(b"%PDF-")
        assert b"<svg" in (out / f"{stem}.svg").read_bytes()[:1000]
        # The SVG is shown (a Markdown viewer does not show PDF); both files are linked.
        assert f"]({stem}.svg)" in md and f"[{stem}.pdf]({stem}.pdf)" in md
    assert all((out / link).is_file() for link in _links(md))

    md = build_report(run, tmp_path / "pdf", n_boot=0, figure_formats=("pdf",)).read_text(encoding="utf-8")
    assert "![" not in md and "[depth-web_a.pdf](depth-web_a.pdf)" in md
    with pytest.raises(ValueError, match="figure_formats"):
        build_report(run, n_boot=0, figure_formats=("jpg",))


def test_report_command_takes_repeated_and_comma_separated_figure_formats(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, alt=False, orders=1, methods=("ceb",))
    app = typer.Typer()
    app.command()(report_command)
    runner = CliRunner()
    result = runner.invoke(app, [str(run), "--boot", "0", "--figure-format", "png,pdf", "--figure-format", "SVG"])
    assert result.exit_code == 0, result.output
    assert {p.suffix for p in (run / "report").glob("depth-web_a.*")} == {".png", ".pdf", ".svg"}
    bad = runner.invoke(app, [str(run), "--figure-format", "png,jpg"])
    assert bad.exit_code == 2 and "'jpg': choose png, pdf or svg" in bad.output


def test_report_rows_carry_the_stream_order_they_were_computed_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, orders=2, methods=("ceb", "static"))
    # web_b keeps only order 1, so its single-order analyses run on order 1 and web_a's on order 0.
    rows = [r for r in read_rows(run / "scores.jsonl") if not (r["stream"] == "web_b" and r["order"] == 0)]
    (run / "scores.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    build_report(run, n_boot=0)
    data = orjson.loads((run / "report" / "report.json").read_bytes())
    expected = {"web_a": 0, "web_b": 1, "(pooled)": None}  # the pooled rows mix orders 0 and 1
    for name in ("main", "depth", "reliability", "selective", "task_success", "label_shift"):
        entries = data[name]
        assert entries and all(e["order"] == expected[e["stream"]] for e in entries), name
        assert all("@" not in e["stream"] and "order" not in e["stream"] for e in entries)


def test_the_same_rows_in_another_file_order_give_the_same_metrics_and_report_bytes(tmp_path: Path) -> None:
    """Metrics and reports are a function of the rows' content (issue 41 item 9): shards merged, a resume or
    a rerun write the same rows in another order, and the pooled sums and the stream and method order follow."""
    from ceb.eval import run_metrics, write_metrics

    first, second = tmp_path / "first", tmp_path / "second"
    _write_run(first, orders=1)
    lines = (first / "scores.jsonl").read_bytes().splitlines(keepends=True)
    second.mkdir()
    (second / "scores.jsonl").write_bytes(b"".join(reversed(lines)))  # web_b and static first, steps last to first
    for run in (first, second):
        write_metrics(run, run_metrics(run))
        build_report(run, n_boot=20, seed=0)

    # The run's own path is the one difference allowed (the repetition-flag reference names its missing file).
    def same(path: Path) -> str:
        return path.read_text().replace(str(second), str(first)).replace("# Report: second", "# Report: first")

    assert same(second / "metrics.json") == (first / "metrics.json").read_text()
    for name in ("report.json", "report.md", "main.md", "main.tex", "main-ci.md", "paired.md", "selective.md"):
        assert same(second / "report" / name) == (first / "report" / name).read_text(), name


def test_intervals_over_few_trajectories_carry_a_caveat_naming_the_count(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write_run(run, alt=False, orders=1)  # 12 trajectories per stream, 24 pooled: under MIN_TRAJECTORIES
    build_report(run, n_boot=20, seed=0)
    caveat = f"Caveat: intervals over fewer than {MIN_TRAJECTORIES} trajectories are rough"
    for name in ("main-ci", "paired"):
        md = (run / "report" / f"{name}.md").read_text()
        assert caveat in md and "web_a (12 trajectories), web_b (12 trajectories)" in md, md
        assert caveat in (run / "report" / f"{name}.tex").read_text()
    build_report(run, n_boot=0)  # no intervals, no caveat
    assert "Caveat" not in (run / "report" / "main-ci.md").read_text()


def test_ptrue_pro_and_verbalized_rows_are_marked_and_their_difference_from_the_paper_footnoted(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    _write_run(run, alt=False, orders=1, methods=("ceb", "static", "ptrue", "pro", "verbalized"))
    build_report(run, n_boot=0)
    main = (run / "report" / "main.md").read_text()
    for label in ("P(True)†", "PRO†", "Verbalization†"):
        assert f"| {label} |" in main, main
    assert "| Static |" in main and "| CEB |" in main  # the paper's own methods stay unmarked
    assert "- † P(True): the paper reads the probability mass on the True token" in main
    assert "- † PRO: the paper scores PRO on the action it samples itself" in main
    assert "- † Verbalization: in the paper the agent emits its own action and confidence in one pass" in main
    assert r"P(True)\dag{}" in (run / "report" / "main.tex").read_text()
    adapted = orjson.loads((run / "report" / "report.json").read_bytes())["run"]["adapted_methods"]
    assert set(adapted) == {"ptrue", "pro", "verbalized"}
    assert "Verbalization† differs from the paper's definition" in (run / "report" / "report.md").read_text()
    first_token = adaptations(["ptrue", "ceb"], BaselineConfig(ptrue_forced=False))
    assert list(first_token) == ["ptrue"] and "first answer token's top log-probs" in first_token["ptrue"]
