"""Report sections on deployment: selective execution (5) and task success under a review budget (6)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict

from ceb.eval.deployment import (
    REVIEW_BUDGETS,
    SELECTIVE_BUDGETS,
    TaskSuccess,
    oracle_task_success,
    selective_execution,
    task_success,
)
from ceb.eval.lanes import comparable_masks, reference_method
from ceb.eval.render import Cell, Column, Data, Part, Row, Table
from ceb.eval.sections.base import ReportContext, grid, group_by, lane_orders, section, where

__all__ = ["selective_table", "task_success_table"]


def _shared_note(kept: int, total: int, unit: str, where: str) -> str | None:
    if kept == 0 and total:
        return f"{where}: the methods share no {unit} id, so each is evaluated on its own {unit}s."
    if kept < total:
        return f"{where}: {total - kept} of {total} {unit}s left out (a method lacks a score or label there)."
    return None


@section(
    "Selective execution (section 4.5)",
    needs=("base",),
    intro="GT positive rate among the retained steps after deferring the floor(b·N/100) lowest-confidence steps. "
    "Ties at the cut are broken uniformly at random and the expected rate is reported, so a constant "
    "confidence keeps the base rate (b=0) at every budget. All methods of a stream are evaluated on the "
    "steps that every method scored and that carry a label, so they share the base rate.",
)
def _selective(ctx: ReportContext) -> Iterator[Part]:
    base = ctx.base
    budgets = SELECTIVE_BUDGETS
    rates: dict[tuple[str, str, str], list[float | None]] = {}
    notes = []
    for (stream, critic), group in group_by(base, lambda lane: (lane.stream, lane.critic)).items():
        masks, kept, total = comparable_masks(group, whole_trajectories=False)
        for lane, m in zip(group, masks, strict=True):
            rates[(stream, critic, lane.method)] = selective_execution(lane.label[m], lane.score[m], budgets)
        note = _shared_note(kept, total, "step", where(stream, critic))
        if note:
            notes.append(note)
    yield selective_table(rates, budgets, notes=notes)
    orders = lane_orders(base)
    yield Data(
        "selective",
        [
            {
                "stream": s,
                "order": orders[(s, c, m)],
                "critic": c,
                "method": m,
                "budgets": list(budgets),
                "retained_positive_rate": r,
            }
            for (s, c, m), r in rates.items()
        ],
    )


@section(
    "Task success under a per-task review budget (section 4.5)",
    needs=("base",),
    intro="A task succeeds when all its steps are correct after its m lowest-confidence steps are reviewed and "
    "fixed (ties broken uniformly at random, expected rate reported); Oracle reviews exactly the wrong steps "
    "(success iff at most m are wrong), using the step labels of the reference method (CEB, else Static). "
    "A task is judged on its labelled steps (AMEX labels TAP steps only; an unlabelled step neither fails nor "
    "drops its task). All methods of a stream are evaluated on the tasks whose every labelled step every "
    "method scored; other tasks are left out and counted.",
)
def _task_success_section(ctx: ReportContext) -> Iterator[Part]:
    base = ctx.base
    success: dict[tuple[str, str, str], TaskSuccess] = {}
    oracle: dict[tuple[str, str], TaskSuccess] = {}
    oracle_order: dict[tuple[str, str], int] = {}
    notes = []
    for (stream, critic), group in group_by(base, lambda lane: (lane.stream, lane.critic)).items():
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
    yield task_success_table(success, oracle, notes=notes)
    orders = lane_orders(base)
    yield Data(
        "task_success",
        [
            {"stream": s, "order": orders[(s, c, m)], "critic": c, "method": m} | asdict(t)
            for (s, c, m), t in success.items()
        ]
        + [
            {"stream": s, "order": oracle_order[(s, c)], "critic": c, "method": "oracle"} | asdict(t)
            for (s, c), t in oracle.items()
        ],
    )


def selective_table(
    rates: Mapping[tuple[str, str, str], Sequence[float | None]],
    budgets: Sequence[int],
    *,
    notes: Sequence[str] = (),
) -> Table:
    """Selective execution (section 4.5, table "gating"): retained GT positive rate per abstention budget.

    ``rates`` maps ``(stream, critic, method)`` to :func:`ceb.eval.deployment.selective_execution`'s output.
    """
    columns = tuple(
        Column(f"b={b}%" if b else "b=0", "higher", latex=f"$b{{=}}{b}\\%$" if b else "$b{=}0$") for b in budgets
    )

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        got = rates.get((stream, critic, method))
        return None if got is None else tuple(Cell(v) for v in got)

    return grid(
        list(rates),
        columns,
        cells,
        caption="Selective execution: GT positive rate among retained steps after deferring the lowest-confidence "
        "b% of steps (higher is better; b=0 is the base rate).",
        label="selective",
        notes=notes,
    )


def task_success_table(
    success: Mapping[tuple[str, str, str], TaskSuccess],
    oracle: Mapping[tuple[str, str], TaskSuccess],
    *,
    notes: Sequence[str] = (),
) -> Table:
    """Task success rate (%) under a per-task review budget ``m`` (section 4.5, table "tasksucc").

    ``success`` maps ``(stream, critic, method)`` to :func:`ceb.eval.deployment.task_success`; ``oracle`` maps
    ``(stream, critic)`` to :func:`ceb.eval.deployment.oracle_task_success`, printed as the reference row
    *Oracle* at the end of each block.
    """
    budgets = next(iter(success.values())).budgets if success else ()
    columns = tuple(Column(f"m={m}", "higher", digits=1, scale=100.0, latex=f"$m{{={m}}}$") for m in budgets)

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        got = success.get((stream, critic, method))
        return None if got is None else tuple(Cell(v) for v in got.rates)

    def oracle_rows(critic: str, streams: Sequence[str]) -> list[Row]:
        found = [oracle.get((s, critic)) for s in streams]
        if all(o is None for o in found):
            return []
        row: list[Cell] = []
        for o in found:
            row += [Cell(v) for v in o.rates] if o is not None else [Cell() for _ in columns]
        return [Row("Oracle", tuple(row), compete=False)]

    return grid(
        list(success),
        columns,
        cells,
        caption="Task success rate (%) when each task's m lowest-confidence steps are reviewed and fixed "
        "(higher is better; m=0 is the un-reviewed base rate; Oracle reviews exactly the wrong steps).",
        label="task-success",
        extra_rows=oracle_rows,
        notes=notes,
    )
