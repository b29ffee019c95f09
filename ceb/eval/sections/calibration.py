"""Report sections on calibration: the main table (1), depth (3), reliability diagrams (4), label shift (7)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from ceb.eval.ablations import headline_rows
from ceb.eval.calibration import DepthBucket, LabelShift, depth_calibration, label_shift, metric_rows
from ceb.eval.lanes import alt_label_names, base_lanes, reference_method, relabel
from ceb.eval.metrics import ReliabilityBins, ece, reliability_bins
from ceb.eval.plots import plot_depth, plot_reliability
from ceb.eval.reference_rules import REPETITION_FLAG, reference_lanes, reference_rows, repetition_flags
from ceb.eval.sections.base import (
    ReportContext,
    ReportWriter,
    by_stream,
    figure_methods,
    lane_orders,
    metric_json,
    na_notes,
    section,
    where,
)
from ceb.eval.tables import depth_table, label_shift_table, main_table, metric_detail_table
from ceb.pipeline.rundir import RunDir

__all__ = ["depth", "label_shift_section", "main_results", "reliability"]


@section(
    "Main results (Table 1, section 4.2)",
    needs=("run", "lanes", "base", "n_bins", "n_boot", "seed"),
    yields=("rows", "headline", "references", "reference_rows"),
)
def main_results(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Table 1 (section 4.2), with the reference rows (:mod:`ceb.eval.reference_rules`)."""
    lanes, n_bins, n_boot, seed = ctx.lanes, ctx.n_bins, ctx.n_boot, ctx.seed
    rep.intro(
        "ECE (equal width), Brier and AUC per stream and critic, with each method pooled over streams when it "
        "ran on more than one. Bold marks the best value per column within a critic block (lower is better for "
        "ECE and Brier, higher for AUC). Each block closes with reference rows (italic, beyond the paper): rules "
        "without a model on the same labelled steps, which a method should beat; they never compete for bold.",
    )
    rows = metric_rows(lanes, n_bins=n_bins, n_boot=n_boot, seed=seed)
    flags = repetition_flags(RunDir(ctx.run))
    references = reference_lanes(ctx.base, flags)
    ref_rows = reference_rows(references, n_bins=n_bins, n_boot=n_boot, seed=seed)
    notes = na_notes(rows)
    missing = [f"no {REPETITION_FLAG} reference on {stream}: {why}" for stream, why in flags.missing.items()]
    rep.table(main_table(rows, notes=[*notes, *missing], references=ref_rows))
    rep.table(metric_detail_table(rows, references=ref_rows))
    rep.data["main"] = [metric_json(r) for r in rows]
    rep.data["references"] = [metric_json(r) | {"reference": True} for r in ref_rows]
    rep.data["references_missing"] = {REPETITION_FLAG: dict(flags.missing)} if flags.missing else {}
    ctx.rows = rows
    ctx.headline = headline_rows(rows)
    ctx.references = references
    ctx.reference_rows = ref_rows


@section("Calibration by within-trajectory depth (Figure 1)", needs=("base", "n_bins", "colors"))
def depth(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Calibration by within-trajectory depth (Figure 1)."""
    base, n_bins, colors = ctx.base, ctx.n_bins, ctx.colors
    rep.intro(
        "ECE, mean confidence and positive rate of the steps at step index 0, 1, 2, 3, 4 and 5 or later of "
        "their trajectory. The positive rate is the steps' own, one line (those of the reference method, CEB "
        "else Static).",
    )
    depth: dict[tuple[str, str, str], list[DepthBucket]] = {
        (lane.stream, lane.critic, lane.method): depth_calibration(lane.label, lane.score, lane.step, n_bins=n_bins)
        for lane in base
    }
    rep.table(depth_table(depth))
    shown = figure_methods([lane.method for lane in base], rep)
    for (stream, critic), per_method in by_stream(depth).items():
        usable = {m: buckets for m, buckets in per_method.items() if any(b.n for b in buckets) and m in shown}
        if usable:
            title = f"Calibration by depth, {where(stream, critic)}"
            rep.figure(plot_depth(usable, title=title, colors=colors), f"depth-{rep.slug(stream, critic)}", title)
    orders = lane_orders(base)
    rep.data["depth"] = [
        {"stream": s, "order": orders[(s, c, m)], "critic": c, "method": m, "buckets": [asdict(b) for b in buckets]}
        for (s, c, m), buckets in depth.items()
    ]


@section("Reliability diagrams (appendix E)", needs=("base", "n_bins", "colors"))
def reliability(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Reliability diagrams (appendix E)."""
    base, n_bins, colors = ctx.base, ctx.n_bins, ctx.colors
    rep.intro(
        f"Positive rate per confidence bin ({n_bins} equal-width bins), with the calibration gap to the bin's "
        "mean confidence as a red hatched box beside each bar; the dashed diagonal is perfect calibration and the "
        "panel below each diagram gives the steps per bin.",
    )
    bins: dict[tuple[str, str, str], ReliabilityBins] = {}
    eces: dict[tuple[str, str, str], float] = {}
    for lane in base:
        use = lane.usable
        if use.any():
            key = (lane.stream, lane.critic, lane.method)
            bins[key] = reliability_bins(lane.label[use], lane.score[use], n_bins=n_bins)
            eces[key] = ece(lane.label[use], lane.score[use], n_bins=n_bins)
    if not bins:
        rep.note("Skipped: no lane has a step with both a score and a label.")
    shown = figure_methods([m for _, _, m in bins], rep)
    for (stream, critic), per_method in by_stream(bins).items():
        per_method = {m: b for m, b in per_method.items() if m in shown}
        panel_eces = {m: eces[(stream, critic, m)] for m in per_method}
        title = f"Reliability, {where(stream, critic)}"
        fig = plot_reliability(per_method, title=title, eces=panel_eces, colors=colors)
        rep.figure(fig, f"reliability-{rep.slug(stream, critic)}", title)
    orders = lane_orders(base)
    rep.data["reliability"] = [
        {
            "stream": s,
            "order": orders[(s, c, m)],
            "critic": c,
            "method": m,
            "edges": b.edges,
            "counts": b.counts,
            "mean_confidence": b.mean_confidence,
            "accuracy": b.accuracy,
        }
        for (s, c, m), b in bins.items()
    ]


@section("LLM-as-judge label shift (appendix A)", needs=("run", "lanes", "n_bins", "n_boot", "seed"))
def label_shift_section(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: LLM-as-judge label shift (appendix A)."""
    lanes, n_bins, n_boot, seed = ctx.lanes, ctx.n_bins, ctx.n_boot, ctx.seed
    rep.intro(
        "Strict labels against each alternative label column (`alt_labels`, e.g. an LLM-as-judge relabelling), "
        "over the steps of the reference method (CEB, else Static) carrying both labels; then Table 1 recomputed "
        "against the alternative labels.",
    )
    names = alt_label_names(lanes)
    rep.data["label_shift"] = []
    rep.data["alt_main"] = {}
    if not names:
        rep.note(f"Skipped: the run has no alternative labels (`alt_labels` is absent or empty in {RunDir.SCORES}).")
        return
    base = base_lanes(lanes)
    shifts: dict[tuple[str, str, str], LabelShift | None] = {}
    orders: dict[tuple[str, str], int] = {}
    for (stream, critic), per_method in by_stream({(la.stream, la.critic, la.method): la for la in base}).items():
        ref = per_method[reference_method(per_method)]
        orders[(stream, critic)] = ref.order
        for name in names:
            alt = ref.alt_labels.get(name, np.full(ref.n_rows, np.nan))
            shifts[(stream, critic, name)] = label_shift(ref.label, alt)
    rep.table(label_shift_table(shifts))
    rep.data["label_shift"] = [
        {"stream": s, "order": orders[(s, c)], "critic": c, "labels": name, "shift": None if v is None else asdict(v)}
        for (s, c, name), v in shifts.items()
    ]
    flags = repetition_flags(RunDir(ctx.run))
    rep.data["alt_references"] = {}
    for name in names:
        rows = metric_rows([relabel(lane, name) for lane in lanes], n_bins=n_bins, n_boot=n_boot, seed=seed)
        # The reference rules scored against these labels (the base rate is theirs), on the steps they label.
        refs = reference_lanes([relabel(lane, name) for lane in base], flags)
        ref_rows = reference_rows(refs, n_bins=n_bins, n_boot=n_boot, seed=seed)
        label = f"main-{rep.slug('labels', name)}"
        caption = f"Step-level confidence estimation against the alternative labels '{name}' (ECE, Brier, AUC)."
        rep.table(main_table(rows, caption=caption, label=label, notes=na_notes(rows), references=ref_rows))
        rep.data["alt_main"][name] = [metric_json(r) for r in rows]
        rep.data["alt_references"][name] = [metric_json(r) | {"reference": True} for r in ref_rows]
