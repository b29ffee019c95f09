"""Report section: what the scores say without labels (beyond the paper; the only analysis of an unlabelled run)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from ceb.eval.label_free import (
    ReviewStep,
    agreement,
    deferrals,
    score_spreads,
    step_texts,
    steps_to_review,
    with_texts,
)
from ceb.eval.sections.base import ReportContext, ReportWriter, section, where
from ceb.eval.tables import method_label
from ceb.pipeline.rundir import RunDir

__all__ = ["REVIEW_STEPS", "label_free"]

REVIEW_STEPS = 10
"""Steps (and trajectories) listed per method under "Steps to review"."""

_TEXT_CHARS = 100


@section("Without labels: score spread, steps to review, deferrals, agreement", needs=("run", "base"), labelled=False)
def label_free(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: the label-free views of :mod:`ceb.eval.label_free` on the lowest-order lanes."""
    base = [lane for lane in ctx.base if lane.note is None]
    rep.intro(
        "These read the scores alone, so they hold for steps with or without labels. A score is the method's "
        "confidence that the step is productive: the lowest ones are where a reviewer's time goes first."
    )
    spreads = score_spreads(base)
    rep.lines += [
        "### Score distribution",
        "",
        "| Method | Stream | steps | mean | sd | p10 | median | p90 | min | max | distinct |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {method_label(s.method)} | {where(s.stream, s.critic)} | {s.n} | {s.mean:.3f} | {s.sd:.3f} | "
            + " | ".join(f"{q:.3f}" for q in (*s.quantiles, s.low, s.high))
            + f" | {s.distinct} |"
            for s in spreads
        ),
        "",
    ]
    steps, trajectories = steps_to_review(base, {}, REVIEW_STEPS)
    texts, missing = step_texts(RunDir(ctx.run), {(r.stream, r.trajectory, r.step) for r in (*steps, *trajectories)})
    steps, trajectories = with_texts(steps, texts), with_texts(trajectories, texts)
    rep.lines += [
        "### Steps to review",
        "",
        f"Each method's {REVIEW_STEPS} lowest-confidence steps over all streams, lowest first:",
        "",
        *_review_table(steps),
        f"Each method's {REVIEW_STEPS} trajectories whose weakest step scored lowest, with that step:",
        "",
        *_review_table(trajectories),
    ]
    if missing:
        rep.note(f"Task and action are left blank where the stream files could not be read: {missing}.")
    cuts = deferrals(base)
    budgets = sorted({d.budget for d in cuts})
    rep.lines += [
        "### What selective execution would defer",
        "",
        "Steps deferred at each budget b (the floor(b·N/100) lowest-confidence ones of the stream) and the score "
        "at the cut:",
        "",
        "| Method | Stream | N | " + " | ".join(f"b={b}%" for b in budgets) + " |",
        "|---|---|---:|" + "---:|" * len(budgets),
    ]
    rows: dict[tuple[str, str, str], dict[int, str]] = {}
    sizes: dict[tuple[str, str, str], int] = {}
    for d in cuts:
        key = (d.stream, d.critic, d.method)
        sizes[key] = d.n
        rows.setdefault(key, {})[d.budget] = f"{d.deferred} (≤ {d.cut:.3f})" if d.cut is not None else "0"
    for (stream, critic, method), cells in rows.items():
        rep.lines.append(
            f"| {method_label(method)} | {where(stream, critic)} | {sizes[(stream, critic, method)]} | "
            + " | ".join(cells.get(b, "") for b in budgets)
            + " |"
        )
    pairs = agreement(base)
    rep.lines += ["", "### How the methods agree", ""]
    if pairs:
        rep.lines += [
            "Spearman's rank correlation on the steps both methods scored (1: the same ranking; 0: unrelated; "
            "n/a: fewer than 3 shared steps, or one method gives them all one score):",
            "",
            "| Stream | Methods | shared steps | Spearman ρ |",
            "|---|---|---:|---:|",
            *(
                f"| {where(a.stream, a.critic)} | {method_label(a.first)} vs {method_label(a.second)} | {a.n} | "
                + ("n/a" if a.rho is None else f"{a.rho:+.3f}")
                + " |"
                for a in pairs
            ),
            "",
        ]
    else:
        rep.lines += ["One method per stream: nothing to compare.", ""]
    rep.data["label_free"] = {
        "spreads": [asdict(s) for s in spreads],
        "steps_to_review": [asdict(r) for r in steps],
        "trajectories_to_review": [asdict(r) for r in trajectories],
        "deferrals": [asdict(d) for d in cuts],
        "agreement": [asdict(a) for a in pairs],
    }


def _review_table(rows: Sequence[ReviewStep]) -> list[str]:
    return [
        "| Method | Stream | Trajectory | Step | Score | Task | Action |",
        "|---|---|---|---:|---:|---|---|",
        *(
            f"| {method_label(r.method)} | {where(r.stream, r.critic)} | {_cell(r.trajectory)} | {r.step} | "
            f"{r.score:.3f} | {_cell(r.task)} | {_cell(r.action)} |"
            for r in rows
        ),
        "",
    ]


def _cell(text: str) -> str:
    """``text`` on one line, cut to its budget, with the pipes and backticks of a Markdown cell escaped."""
    one = " ".join(text.split())
    if len(one) > _TEXT_CHARS:
        one = one[: _TEXT_CHARS - 1] + "…"
    return one.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
