"""Report section: what the scores say without labels (beyond the paper; the only analysis of an unlabelled run)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
from ceb.eval.lanes import method_label
from ceb.eval.render import Data, Grid, Heading, Note, Part, Text
from ceb.eval.sections.base import ReportContext, section, where
from ceb.pipeline.rundir import RunDir

__all__ = ["REVIEW_STEPS"]

REVIEW_STEPS = 10
"""Steps (and trajectories) listed per method under "Steps to review"."""

_TEXT_CHARS = 100


@section(
    "Without labels: score spread, steps to review, deferrals, agreement",
    needs=("run", "base"),
    labelled=False,
    intro="These read the scores alone, so they hold for steps with or without labels. A score is the method's "
    "confidence that the step is productive: the lowest ones are where a reviewer's time goes first.",
)
def _label_free(ctx: ReportContext) -> Iterator[Part]:
    base = [lane for lane in ctx.base if lane.note is None]
    spreads = score_spreads(base)
    yield Heading("Score distribution")
    yield Grid(
        ("Method", "Stream", "steps", "mean", "sd", "p10", "median", "p90", "min", "max", "distinct"),
        ("---", "---", *["---:"] * 9),
        tuple(
            (method_label(s.method), where(s.stream, s.critic), str(s.n), f"{s.mean:.3f}", f"{s.sd:.3f}")
            + tuple(f"{q:.3f}" for q in (*s.quantiles, s.low, s.high))
            + (str(s.distinct),)
            for s in spreads
        ),
    )
    steps, trajectories = steps_to_review(base, {}, REVIEW_STEPS)
    texts, missing = step_texts(RunDir(ctx.run), {(r.stream, r.trajectory, r.step) for r in (*steps, *trajectories)})
    steps, trajectories = with_texts(steps, texts), with_texts(trajectories, texts)
    yield Heading("Steps to review")
    yield Text(f"Each method's {REVIEW_STEPS} lowest-confidence steps over all streams, lowest first:")
    yield _review_table(steps)
    yield Text(f"Each method's {REVIEW_STEPS} trajectories whose weakest step scored lowest, with that step:")
    yield _review_table(trajectories)
    if missing:
        yield Note(f"Task and action are left blank where the stream files could not be read: {missing}.")
    cuts = deferrals(base)
    budgets = sorted({d.budget for d in cuts})
    rows: dict[tuple[str, str, str], dict[int, str]] = {}
    sizes: dict[tuple[str, str, str], int] = {}
    for d in cuts:
        key = (d.stream, d.critic, d.method)
        sizes[key] = d.n
        rows.setdefault(key, {})[d.budget] = f"{d.deferred} (≤ {d.cut:.3f})" if d.cut is not None else "0"
    yield Heading("What selective execution would defer")
    yield Text(
        "Steps deferred at each budget b (the floor(b·N/100) lowest-confidence ones of the stream) and the score "
        "at the cut:"
    )
    yield Grid(
        ("Method", "Stream", "N", *(f"b={b}%" for b in budgets)),
        ("---", "---", "---:", *["---:"] * len(budgets)),
        tuple(
            (method_label(method), where(stream, critic), str(sizes[(stream, critic, method)]))
            + tuple(cells.get(b, "") for b in budgets)
            for (stream, critic, method), cells in rows.items()
        ),
    )
    yield Heading("How the methods agree")
    pairs = agreement(base)
    if pairs:
        yield Text(
            "Spearman's rank correlation on the steps both methods scored (1: the same ranking; 0: unrelated; "
            "n/a: fewer than 3 shared steps, or one method gives them all one score):"
        )
        yield Grid(
            ("Stream", "Methods", "shared steps", "Spearman ρ"),
            ("---", "---", "---:", "---:"),
            tuple(
                (
                    where(a.stream, a.critic),
                    f"{method_label(a.first)} vs {method_label(a.second)}",
                    str(a.n),
                    "n/a" if a.rho is None else f"{a.rho:+.3f}",
                )
                for a in pairs
            ),
        )
    else:
        yield Text("One method per stream: nothing to compare.")
    yield Data(
        "label_free",
        {
            "spreads": [asdict(s) for s in spreads],
            "steps_to_review": [asdict(r) for r in steps],
            "trajectories_to_review": [asdict(r) for r in trajectories],
            "deferrals": [asdict(d) for d in cuts],
            "agreement": [asdict(a) for a in pairs],
        },
    )


def _review_table(rows: Sequence[ReviewStep]) -> Grid:
    return Grid(
        ("Method", "Stream", "Trajectory", "Step", "Score", "Task", "Action"),
        ("---", "---", "---", "---:", "---:", "---", "---"),
        tuple(
            (
                method_label(r.method),
                where(r.stream, r.critic),
                _cell(r.trajectory),
                str(r.step),
                f"{r.score:.3f}",
                _cell(r.task),
                _cell(r.action),
            )
            for r in rows
        ),
    )


def _cell(text: str) -> str:
    """``text`` on one line, cut to its budget (the renderer escapes it)."""
    one = " ".join(text.split())
    return one[: _TEXT_CHARS - 1] + "…" if len(one) > _TEXT_CHARS else one
