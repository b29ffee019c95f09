"""Report section: multi-order stream averaging, its table and cumulative-ECE figures."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ceb.eval.averaging import STREAM_CHECKPOINTS, OrderCurves, stream_averaging
from ceb.eval.lanes import method_label, method_sort_key
from ceb.eval.plots import plot_cumulative_ece
from ceb.eval.render import Block, Cell, Column, Data, Figure, Note, Part, Row, Table
from ceb.eval.sections.base import ReportContext, figure_methods, finite_or_none, group_by, section, where

__all__ = ["averaging_table"]


@section(
    "Multi-order stream averaging (section 4.4)",
    needs=("lanes", "n_bins", "colors"),
    intro="Cumulative ECE of all steps of the first n trajectories of the stream, as the bank fills, at task counts "
    "n = round(linspace(1, N, min(50, N))) plus 30, 50 and 150 when within the stream (N: trajectories in the "
    "shortest lane of the stream). Mean and sample std (ddof=1) over every stream order present; the gap is "
    "ECE(Static) - ECE(method) on the identical step stream (same stream and order), averaged over orders.",
)
def _stream_averaging_section(ctx: ReportContext) -> Iterator[Part]:
    lanes, n_bins, colors = ctx.lanes, ctx.n_bins, ctx.colors
    curves = stream_averaging(lanes, n_bins=n_bins)
    if not curves:
        yield Note("Skipped: no lane has a step with both a score and a label.")
        yield Data("stream_averaging", [])
        return
    if all(len(cv.orders) == 1 for cv in curves):
        yield Note("The run scored a single order per stream, so there is no spread over orders (std n/a).")
    if not any(cv.gap_orders for cv in curves):
        yield Note("No Static lane shares a stream and order with another method, so there is no gap (—).")
    yield averaging_table(curves)
    groups = group_by(curves, lambda cv: (cv.stream, cv.critic))
    shown, note = figure_methods([cv.method for cv in curves])
    yield from note
    for (stream, critic), group in groups.items():
        title = f"Cumulative ECE, {where(stream, critic)}"
        drawn = [cv for cv in group if cv.method in shown]
        fig = plot_cumulative_ece(drawn, title=title, colors=colors)
        yield Figure(fig, f"cumulative-ece-{ctx.slug(stream, critic)}", title)
    yield Data(
        "stream_averaging",
        [
            {
                "stream": cv.stream,
                "critic": cv.critic,
                "method": cv.method,
                "orders": list(cv.orders),
                "task_counts": cv.task_counts,
                "ece": cv.ece,
                "mean": cv.mean,
                "std": cv.std,
                "reference": cv.reference,
                "gap_orders": list(cv.gap_orders),
                "gap": cv.gap,
                "gap_mean": cv.gap_mean,
                "gap_std": cv.gap_std,
            }
            for cv in curves
        ],
    )


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
    blocks = group_by(curves, lambda cv: (cv.stream, cv.critic))
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
        out.append(Block(where(stream, critic), tuple(rows)))
    return Table(
        caption="Cumulative ECE over the stream, mean ± std over stream orders (section 4.4).",
        label="stream-averaging",
        groups=(("", columns),),
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )
