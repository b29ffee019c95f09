"""Report sections on deployment: selective execution (5) and task success under a review budget (6)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from ceb.eval.deployment import (
    REVIEW_BUDGETS,
    SELECTIVE_BUDGETS,
    TaskSuccess,
    oracle_task_success,
    selective_execution,
    task_success,
)
from ceb.eval.lanes import ScoredLane, comparable_masks, reference_method
from ceb.eval.sections.base import (
    ReportContext,
    ReportWriter,
    lane_orders,
    section,
    where,
)
from ceb.eval.tables import selective_table, task_success_table

__all__ = ["selective", "task_success_section"]


def _groups(base: Sequence[ScoredLane]) -> dict[tuple[str, str], list[ScoredLane]]:
    out: dict[tuple[str, str], list[ScoredLane]] = {}
    for lane in base:
        out.setdefault((lane.stream, lane.critic), []).append(lane)
    return out


def _shared_note(kept: int, total: int, unit: str, where: str) -> str | None:
    if kept == 0 and total:
        return f"{where}: the methods share no {unit} id, so each is evaluated on its own {unit}s."
    if kept < total:
        return f"{where}: {total - kept} of {total} {unit}s left out (a method lacks a score or label there)."
    return None


@section("Selective execution (section 4.5)", needs=("base",))
def selective(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Selective execution (section 4.5)."""
    base = ctx.base
    budgets = SELECTIVE_BUDGETS
    rep.intro(
        "GT positive rate among the retained steps after deferring the floor(b·N/100) lowest-confidence steps. "
        "Ties at the cut are broken uniformly at random and the expected rate is reported, so a constant "
        "confidence keeps the base rate (b=0) at every budget. All methods of a stream are evaluated on the "
        "steps that every method scored and that carry a label, so they share the base rate.",
    )
    rates: dict[tuple[str, str, str], list[float | None]] = {}
    notes = []
    for (stream, critic), group in _groups(base).items():
        masks, kept, total = comparable_masks(group, whole_trajectories=False)
        for lane, m in zip(group, masks, strict=True):
            rates[(stream, critic, lane.method)] = selective_execution(lane.label[m], lane.score[m], budgets)
        note = _shared_note(kept, total, "step", where(stream, critic))
        if note:
            notes.append(note)
    rep.table(selective_table(rates, budgets, notes=notes))
    orders = lane_orders(base)
    rep.data["selective"] = [
        {
            "stream": s,
            "order": orders[(s, c, m)],
            "critic": c,
            "method": m,
            "budgets": list(budgets),
            "retained_positive_rate": r,
        }
        for (s, c, m), r in rates.items()
    ]


@section("Task success under a per-task review budget (section 4.5)", needs=("base",))
def task_success_section(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Task success under a per-task review budget (section 4.5)."""
    base = ctx.base
    rep.intro(
        "A task succeeds when all its steps are correct after its m lowest-confidence steps are reviewed and "
        "fixed (ties broken uniformly at random, expected rate reported); Oracle reviews exactly the wrong steps "
        "(success iff at most m are wrong), using the step labels of the reference method (CEB, else Static). "
        "A task is judged on its labelled steps (AMEX labels TAP steps only; an unlabelled step neither fails nor "
        "drops its task). All methods of a stream are evaluated on the tasks whose every labelled step every "
        "method scored; other tasks are left out and counted.",
    )
    success: dict[tuple[str, str, str], TaskSuccess] = {}
    oracle: dict[tuple[str, str], TaskSuccess] = {}
    oracle_order: dict[tuple[str, str], int] = {}
    notes = []
    for (stream, critic), group in _groups(base).items():
        masks, kept, total = comparable_masks(group, whole_trajectories=True)
        for lane, m in zip(group, masks, strict=True):
            success[(stream, critic, lane.method)] = task_success(
                lane.label[m], lane.score[m], lane.trajectory[m], REVIEW_BUDGETS
            )
        ref = reference_method(lane.method for lane in group)
        i = next(j for j, lane in enumerate(group) if lane.method == ref)
        m = masks[i]
        oracle[(stream, critic)] = oracle_task_success(group[i].label[m], group[i].trajectory[m], REVIEW_BUDGETS)
        oracle_order[(stream, critic)] = group[i].order
        note = _shared_note(kept, total, "task", where(stream, critic))
        if note:
            notes.append(note)
    rep.table(task_success_table(success, oracle, notes=notes))
    orders = lane_orders(base)
    rep.data["task_success"] = [
        {"stream": s, "order": orders[(s, c, m)], "critic": c, "method": m} | asdict(t)
        for (s, c, m), t in success.items()
    ] + [
        {"stream": s, "order": oracle_order[(s, c)], "critic": c, "method": "oracle"} | asdict(t)
        for (s, c), t in oracle.items()
    ]
