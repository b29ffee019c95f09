"""Builder of the multi-order stream-averaging table (section 4.4)."""

from __future__ import annotations

from collections.abc import Sequence

from ceb.eval.averaging import STREAM_CHECKPOINTS, OrderCurves
from ceb.eval.tables._common import finite_or_none
from ceb.eval.tables.model import Block, Cell, Column, Row, Table, method_label, method_sort_key

__all__ = ["averaging_table"]


def averaging_table(curves: Sequence[OrderCurves], *, notes: Sequence[str] = ()) -> Table:
    """Multi-order stream averaging (section 4.4): cumulative ECE mean ± std over orders at checkpoints.

    Columns: the number of orders and tasks, the cumulative ECE after the checkpoint task counts of
    :data:`ceb.eval.averaging.STREAM_CHECKPOINTS` that some stream reaches, the final cumulative ECE (whole
    stream) and the final gap to the reference (``ECE(static) - ECE(method)``, higher is better).
    """
    reached = [c for c in STREAM_CHECKPOINTS if any(c in cv.task_counts for cv in curves)]
    columns = (
        Column("orders", digits=0),
        Column("tasks", digits=0),
        *(Column(f"ECE@{c}", "lower") for c in reached),
        Column("final ECE", "lower"),
        Column("gap vs Static", "higher", latex=r"$\Delta$ vs Static"),
    )
    blocks: dict[tuple[str, str], list[OrderCurves]] = {}
    for cv in curves:
        blocks.setdefault((cv.stream, cv.critic), []).append(cv)
    out = []
    for (stream, critic), group in blocks.items():
        rows = []
        for cv in sorted(group, key=lambda x: method_sort_key(x.method)):
            final = int(cv.task_counts[-1])
            cells = [Cell(len(cv.orders)), Cell(final)]
            for c in reached:
                at = cv.at(c)
                cells.append(Cell() if at is None else Cell(finite_or_none(at[0]), std=finite_or_none(at[1])))
            mean, std = finite_or_none(cv.mean[-1]), finite_or_none(cv.std[-1])
            cells.append(Cell(mean, std=std))
            gap = Cell(finite_or_none(cv.gap_mean[-1]), std=finite_or_none(cv.gap_std[-1]))
            cells.append(gap if cv.gap_orders else Cell(text="—"))
            rows.append(Row(method_label(cv.method), tuple(cells)))
        out.append(Block(f"{stream} / {critic}" if critic else stream, tuple(rows)))
    return Table(
        caption="Cumulative ECE over the stream, mean ± std over stream orders (section 4.4).",
        label="stream-averaging",
        groups=(("", columns),),
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )
