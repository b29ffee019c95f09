"""Builders of the deployment tables: selective execution and task success under a review budget (4.5)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ceb.eval.deployment import TaskSuccess
from ceb.eval.tables._common import grid
from ceb.eval.tables.model import Cell, Column, Row, Table

__all__ = ["selective_table", "task_success_table"]


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
