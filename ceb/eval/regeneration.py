"""The regeneration analysis (appendix "Offline Confidence-Gated Regeneration", table and figure "closed-loop").

Each flagged step of a selection (:func:`ceb.pipeline.regenerate.plan_regeneration`) takes its regenerated label;
every other step, and a flagged one whose regeneration failed (counted), keeps its own. Per selection and budget:
the per-step positive rate and the mean per-task step accuracy; Random is the mean over its seeds, budget 0 the
logged actions. :func:`regenerate_run` is all of ``ceb regenerate``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from ceb.eval.plots import method_colors, save_figure
from ceb.eval.render import Block, Cell, Column, Row, Table, method_label, method_sort_key, to_markdown
from ceb.pipeline.regenerate import (
    ORACLE,
    RANDOM,
    Regeneration,
    RegenerationPlan,
    RegenerationSettings,
    RegenerationSummary,
    StepKey,
    regeneration,
)

__all__ = [
    "RegenerationCurve",
    "RegenerationReport",
    "plot_regeneration",
    "regenerate_run",
    "regeneration_curves",
    "regeneration_doc",
    "regeneration_table",
    "selection_label",
    "write_regeneration_report",
]


@dataclass(frozen=True, slots=True)
class RegenerationCurve:
    """One selection's rates per budget (budget 0 first), in [0, 1].

    Attributes:
        selection: A method (``method`` or ``method@critic``), ``random`` or ``oracle``.
        positive_rate_std: Standard deviation over Random's seeds (zeros for the others).
        changed: Of the flagged steps, those whose label changed; Random: the mean.
        failed: Of the flagged steps, those without a regenerated action (kept as logged).
    """

    selection: str
    budgets: tuple[float, ...]
    positive_rate: tuple[float, ...]
    task_accuracy: tuple[float, ...]
    positive_rate_std: tuple[float, ...]
    task_accuracy_std: tuple[float, ...]
    flagged: tuple[int, ...]
    changed: tuple[float, ...]
    failed: tuple[float, ...]


def _rates(plan: RegenerationPlan, labels: Mapping[StepKey, int]) -> tuple[float, float]:
    values = np.array([labels[s] for s in plan.steps], dtype=float)
    groups: dict[str, list[int]] = {}
    for s in plan.steps:
        groups.setdefault(s[0], []).append(labels[s])
    return float(values.mean()), float(np.mean([np.mean(g) for g in groups.values()]))


def regeneration_curves(plan: RegenerationPlan, records: Mapping[StepKey, Regeneration]) -> list[RegenerationCurve]:
    """A curve per method of ``plan`` (paper order), then Random's and Oracle's; a step not in ``records`` failed."""
    base_rate, base_task = _rates(plan, plan.labels)

    def measure(ranking: Sequence[StepKey], budget: float) -> tuple[float, float, int, int, int]:
        flagged = plan.flagged(ranking, budget)
        labels = dict(plan.labels)
        changed = failed = 0
        for s in flagged:
            record = records.get(s)
            if record is None or record.label is None:
                failed += 1
                continue
            changed += record.label != labels[s]
            labels[s] = record.label
        rate, task = _rates(plan, labels)
        return rate, task, len(flagged), changed, failed

    def curve(name: str, rankings: Sequence[Sequence[StepKey]]) -> RegenerationCurve:
        per_budget = [[measure(r, b) for r in rankings] for b in plan.budgets]
        zero = (0.0,)
        return RegenerationCurve(
            selection=name,
            budgets=(0.0, *plan.budgets),
            positive_rate=(base_rate, *(float(np.mean([m[0] for m in ms])) for ms in per_budget)),
            task_accuracy=(base_task, *(float(np.mean([m[1] for m in ms])) for ms in per_budget)),
            positive_rate_std=zero + tuple(float(np.std([m[0] for m in ms])) for ms in per_budget),
            task_accuracy_std=zero + tuple(float(np.std([m[1] for m in ms])) for ms in per_budget),
            flagged=(0, *(ms[0][2] for ms in per_budget)),
            changed=zero + tuple(float(np.mean([m[3] for m in ms])) for ms in per_budget),
            failed=zero + tuple(float(np.mean([m[4] for m in ms])) for ms in per_budget),
        )

    curves = [curve(name, [plan.methods[name]]) for name in sorted(plan.methods, key=_sort_key)]
    curves.append(curve(RANDOM, list(plan.random.values())))
    curves.append(curve(ORACLE, [plan.oracle]))
    return curves


def _sort_key(selection: str) -> tuple[tuple[int, int, str], str]:
    method, _, critic = selection.partition("@")
    return method_sort_key(method), critic


def selection_label(selection: str) -> str:
    """A selection's name in the table and the figure: the method's (``@ critic`` after it), Random's or Oracle's."""
    if selection == RANDOM:
        return "Random (lower bound)"
    if selection == ORACLE:
        return "Oracle (upper bound)"
    method, _, critic = selection.partition("@")
    return method_label(method) + (f" @ {critic}" if critic else "")


def regeneration_table(curves: Sequence[RegenerationCurve], *, notes: Sequence[str] = ()) -> Table:
    """The paper's Table "closed-loop" with a second group: positive rate and per-task accuracy per budget."""
    budgets = curves[0].budgets
    cols = tuple(
        Column(f"b={b:g}%" if b else "b=0", "higher", latex=f"$b{{=}}{b:g}\\%$" if b else "$b{=}0$") for b in budgets
    )

    def row(c: RegenerationCurve) -> Row:
        rate = tuple(
            Cell(v, std=s if c.selection == RANDOM and b else None)
            for v, s, b in zip(c.positive_rate, c.positive_rate_std, c.budgets, strict=True)
        )
        task = tuple(
            Cell(v, std=s if c.selection == RANDOM and b else None)
            for v, s, b in zip(c.task_accuracy, c.task_accuracy_std, c.budgets, strict=True)
        )
        return Row(selection_label(c.selection), rate + task, compete=c.selection not in (RANDOM, ORACLE))

    methods = tuple(row(c) for c in curves if c.selection not in (RANDOM, ORACLE))
    references = tuple(row(c) for c in curves if c.selection in (RANDOM, ORACLE))
    return Table(
        caption="Offline confidence-gated regeneration: per-step positive rate and mean per-task step accuracy "
        "after replacing the lowest-confidence b% of steps with regenerated actions (higher is better; b=0 is "
        "the baseline).",
        label="closed-loop",
        groups=(("Positive rate", cols), ("Per-task accuracy", cols)),
        blocks=(Block("", methods), Block("", references)),
        row_header="Selection",
        notes=tuple(notes),
    )


def regeneration_doc(
    plan: RegenerationPlan, curves: Sequence[RegenerationCurve], about: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON form: ``about`` (machine, backend, command), the population, and every curve."""
    return {
        "about": dict(about),
        "steps": len(plan.steps),
        "trajectories": len({s[0] for s in plan.steps}),
        "budgets": list(plan.budgets),
        "seeds": list(plan.seeds),
        "curves": [asdict(c) for c in curves],
    }


def plot_regeneration(curves: Sequence[RegenerationCurve], *, title: str, footer: str = "") -> Figure:
    """Figure "closed-loop": (a) per-step positive rate, (b) mean per-task accuracy vs budget, ``footer`` below."""
    references = {RANDOM: ("grey", "--"), ORACLE: ("black", ":")}
    methods = [c.selection for c in curves if c.selection not in references]
    colors = method_colors([m.partition("@")[0] for m in methods])
    fig = Figure(figsize=(11.0, 4.2))
    panels = fig.subplots(1, 2)
    for ax, field, std, ylabel in (
        (panels[0], "positive_rate", "positive_rate_std", "(a) per-step positive rate"),
        (panels[1], "task_accuracy", "task_accuracy_std", "(b) mean per-task step accuracy"),
    ):
        for c in curves:
            x = np.array(c.budgets)
            y = np.array(getattr(c, field))
            color, style = references.get(c.selection) or (colors.get(c.selection.partition("@")[0], "black"), "-")
            ax.plot(x, y, marker="o", color=color, linestyle=style, label=selection_label(c.selection))
            spread = np.array(getattr(c, std))
            if c.selection == RANDOM and spread.any():
                ax.fill_between(x, y - spread, y + spread, color=color, alpha=0.15, linewidth=0)
        ax.set_xlabel("regeneration budget b (% of steps, lowest confidence first)")
        ax.set_ylabel(ylabel)
        ax.set_xticks(curves[0].budgets if curves else [])
        ax.grid(alpha=0.3)
    panels[0].legend(fontsize="small")
    fig.suptitle(title)
    if footer:
        fig.text(0.5, -0.02, footer, ha="center", va="top", fontsize="x-small", wrap=True)
    return fig


@dataclass(frozen=True, slots=True)
class RegenerationReport:
    """What :func:`write_regeneration_report` wrote of ``summary``: every selection's curve, and the table."""

    summary: RegenerationSummary
    curves: list[RegenerationCurve]
    table: Table


def write_regeneration_report(summary: RegenerationSummary) -> RegenerationReport:
    """Write ``regeneration.json``, ``.md`` and ``.png`` into the regeneration's directory; ``OSError`` if one fails."""
    plan, s, about = summary.plan, summary, summary.about
    curves = regeneration_curves(plan, s.records)
    notes = (
        f"{len(plan.steps)} labelled steps in {len({k[0] for k in plan.steps})} trajectories; Random averaged "
        f"over {len(plan.seeds)} seeds (± std); {s.flagged} distinct steps flagged, {s.flagged - s.failed} "
        f"regenerated, {s.failed} kept as logged (no readable action).",
        f"Machine: {about['machine']}. Actor: {about['backend']}.",
        f"Command: {about['command']}",
    )
    table = regeneration_table(curves, notes=notes)
    s.out.write_table(regeneration_doc(plan, curves, about), to_markdown(table))
    figure = plot_regeneration(
        curves,
        title="Offline confidence-gated regeneration",
        footer=f"{about['machine']} | actor: {about['backend']} | {about['command']}",
    )
    save_figure(figure, s.out.figure.with_suffix(""))
    return RegenerationReport(summary, curves, table)


def regenerate_run(settings: RegenerationSettings, *, note: Callable[[str], None] | None = None) -> RegenerationReport:
    """All of ``ceb regenerate``: :func:`~ceb.pipeline.regenerate.regeneration`, then its report, the dir still held.

    Raises:
        RunError, DataError, ConfigError, FatalBackendError, OSError: As ``regeneration`` raises them.
    """
    with regeneration(settings, note=note) as summary:
        return write_regeneration_report(summary)
