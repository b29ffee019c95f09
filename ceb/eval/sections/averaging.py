"""Report section: multi-order stream averaging, its table and cumulative-ECE figures."""

from __future__ import annotations

from ceb.eval.averaging import OrderCurves, stream_averaging
from ceb.eval.plots import plot_cumulative_ece
from ceb.eval.sections.base import (
    ReportContext,
    ReportWriter,
    figure_methods,
    section,
    where,
)
from ceb.eval.tables import averaging_table

__all__ = ["stream_averaging_section"]


@section("Multi-order stream averaging (section 4.4)", needs=("lanes", "n_bins", "colors"))
def stream_averaging_section(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Multi-order stream averaging (section 4.4)."""
    lanes, n_bins, colors = ctx.lanes, ctx.n_bins, ctx.colors
    rep.intro(
        "Cumulative ECE of all steps of the first n trajectories of the stream, as the bank fills, at task counts "
        "n = round(linspace(1, N, min(50, N))) plus 30, 50 and 150 when within the stream (N: trajectories in the "
        "shortest lane of the stream). Mean and sample std (ddof=1) over every stream order present; the gap is "
        "ECE(Static) - ECE(method) on the identical step stream (same stream and order), averaged over orders.",
    )
    curves = stream_averaging(lanes, n_bins=n_bins)
    if not curves:
        rep.note("Skipped: no lane has a step with both a score and a label.")
        rep.data["stream_averaging"] = []
        return
    notes = []
    if all(len(cv.orders) == 1 for cv in curves):
        notes.append("The run scored a single order per stream, so there is no spread over orders (std n/a).")
    if not any(cv.gap_orders for cv in curves):
        notes.append("No Static lane shares a stream and order with another method, so there is no gap (—).")
    for note in notes:
        rep.note(note)
    rep.table(averaging_table(curves))
    groups: dict[tuple[str, str], list[OrderCurves]] = {}
    for cv in curves:
        groups.setdefault((cv.stream, cv.critic), []).append(cv)
    shown = figure_methods([cv.method for cv in curves], rep)
    for (stream, critic), group in groups.items():
        title = f"Cumulative ECE, {where(stream, critic)}"
        drawn = [cv for cv in group if cv.method in shown]
        fig = plot_cumulative_ece(drawn, title=title, colors=colors)
        rep.figure(fig, f"cumulative-ece-{rep.slug(stream, critic)}", title)
    rep.data["stream_averaging"] = [
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
    ]
