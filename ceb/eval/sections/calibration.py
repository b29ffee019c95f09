"""Report sections on calibration: the main table (1), depth (3), reliability diagrams (4), label shift (7)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict

import numpy as np

from ceb.eval.ablations import headline_rows
from ceb.eval.bootstrap import Interval
from ceb.eval.calibration import DepthBucket, LabelShift, MetricRow, depth_calibration, label_shift, metric_rows
from ceb.eval.lanes import POOLED, alt_label_names, base_lanes, method_label, method_sort_key, reference_method, relabel
from ceb.eval.metrics import ReliabilityBins, ece, reliability_bins
from ceb.eval.plots import plot_depth, plot_reliability
from ceb.eval.reference_rules import (
    REFERENCE_NOTES,
    REFERENCES,
    REPETITION_FLAG,
    is_reference,
    reference_label,
    reference_lanes,
    reference_rows,
    repetition_flags,
)
from ceb.eval.render import Block, Cell, Column, Data, Figure, Note, Part, Row, Table, Text
from ceb.eval.sections.base import (
    AUC,
    BRIER,
    ECE,
    ReportContext,
    by_stream,
    few_trajectories,
    figure_methods,
    grid,
    group_by,
    lane_orders,
    metric_cells,
    metric_json,
    na_notes,
    section,
    where,
)
from ceb.pipeline.rundir import RunDir

__all__ = ["depth_table", "label_shift_table", "main_table", "metric_detail_table", "reference_notes"]


@section(
    "Main results (Table 1, section 4.2)",
    needs=("run", "lanes", "base", "n_bins", "n_boot", "seed"),
    yields=("rows", "headline", "references", "reference_rows"),
    intro="ECE (equal width), Brier and AUC per stream and critic, with each method pooled over streams when it "
    "ran on more than one. Bold marks the best value per column within a critic block (lower is better for "
    "ECE and Brier, higher for AUC). Each block closes with reference rows (italic, beyond the paper): rules "
    "without a model on the same labelled steps, which a method should beat; they never compete for bold.",
)
def _main_results(ctx: ReportContext) -> Iterator[Part]:
    lanes, n_bins, n_boot, seed = ctx.lanes, ctx.n_bins, ctx.n_boot, ctx.seed
    rows = metric_rows(lanes, n_bins=n_bins, n_boot=n_boot, seed=seed)
    flags = repetition_flags(RunDir(ctx.run))
    references = reference_lanes(ctx.base, flags)
    ref_rows = reference_rows(references, n_bins=n_bins, n_boot=n_boot, seed=seed)
    notes = na_notes(rows)
    missing = [f"no {REPETITION_FLAG} reference on {stream}: {why}" for stream, why in flags.missing.items()]
    yield main_table(rows, notes=[*notes, *missing], references=ref_rows)
    yield metric_detail_table(rows, references=ref_rows)
    yield Data("main", [metric_json(r) for r in rows])
    yield Data("references", [metric_json(r) | {"reference": True} for r in ref_rows])
    yield Data("references_missing", {REPETITION_FLAG: dict(flags.missing)} if flags.missing else {})
    ctx.rows = rows
    ctx.headline = headline_rows(rows)
    ctx.references = references
    ctx.reference_rows = ref_rows


@section(
    "Calibration by within-trajectory depth (Figure 1)",
    needs=("base", "n_bins", "colors"),
    intro="ECE, mean confidence and positive rate of the steps at step index 0, 1, 2, 3, 4 and 5 or later of "
    "their trajectory. The positive rate is the steps' own, one line (those of the reference method, CEB "
    "else Static).",
)
def _depth(ctx: ReportContext) -> Iterator[Part]:
    base, n_bins, colors = ctx.base, ctx.n_bins, ctx.colors
    depth: dict[tuple[str, str, str], list[DepthBucket]] = {
        (lane.stream, lane.critic, lane.method): depth_calibration(lane.label, lane.score, lane.step, n_bins=n_bins)
        for lane in base
    }
    yield depth_table(depth)
    shown, note = figure_methods([lane.method for lane in base])
    yield from note
    for (stream, critic), per_method in by_stream(depth).items():
        usable = {m: buckets for m, buckets in per_method.items() if any(b.n for b in buckets) and m in shown}
        if usable:
            title = f"Calibration by depth, {where(stream, critic)}"
            yield Figure(plot_depth(usable, title=title, colors=colors), f"depth-{ctx.slug(stream, critic)}", title)
    orders = lane_orders(base)
    yield Data(
        "depth",
        [
            {"stream": s, "order": orders[(s, c, m)], "critic": c, "method": m, "buckets": [asdict(b) for b in buckets]}
            for (s, c, m), buckets in depth.items()
        ],
    )


@section("Reliability diagrams (appendix E)", needs=("base", "n_bins", "colors"))
def _reliability(ctx: ReportContext) -> Iterator[Part]:
    base, n_bins, colors = ctx.base, ctx.n_bins, ctx.colors
    yield Text(
        f"Positive rate per confidence bin ({n_bins} equal-width bins), with the calibration gap to the bin's "
        "mean confidence as a red hatched box beside each bar; the dashed diagonal is perfect calibration and the "
        "panel below each diagram gives the steps per bin."
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
        yield Note("Skipped: no lane has a step with both a score and a label.")
    shown, note = figure_methods([m for _, _, m in bins])
    yield from note
    for (stream, critic), per_method in by_stream(bins).items():
        per_method = {m: b for m, b in per_method.items() if m in shown}
        panel_eces = {m: eces[(stream, critic, m)] for m in per_method}
        title = f"Reliability, {where(stream, critic)}"
        fig = plot_reliability(per_method, title=title, eces=panel_eces, colors=colors)
        yield Figure(fig, f"reliability-{ctx.slug(stream, critic)}", title)
    orders = lane_orders(base)
    yield Data(
        "reliability",
        [
            {
                "stream": s,
                "order": orders[(s, c, m)],
                "critic": c,
                "method": m,
                **asdict(b),
            }
            for (s, c, m), b in bins.items()
        ],
    )


@section(
    "LLM-as-judge label shift (appendix A)",
    needs=("run", "lanes", "n_bins", "n_boot", "seed"),
    intro="Strict labels against each alternative label column (`alt_labels`, e.g. an LLM-as-judge relabelling), "
    "over the steps of the reference method (CEB, else Static) carrying both labels; then Table 1 recomputed "
    "against the alternative labels.",
)
def _label_shift_section(ctx: ReportContext) -> Iterator[Part]:
    lanes, n_bins, n_boot, seed = ctx.lanes, ctx.n_bins, ctx.n_boot, ctx.seed
    names = alt_label_names(lanes)
    if not names:
        yield Note(f"Skipped: the run has no alternative labels (`alt_labels` is absent or empty in {RunDir.SCORES}).")
        yield from (Data("label_shift", []), Data("alt_main", {}))
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
    yield label_shift_table(shifts)
    yield Data(
        "label_shift",
        [
            {
                "stream": s,
                "order": orders[(s, c)],
                "critic": c,
                "labels": name,
                "shift": None if v is None else asdict(v),
            }
            for (s, c, name), v in shifts.items()
        ],
    )
    flags = repetition_flags(RunDir(ctx.run))
    alt_main, alt_references = {}, {}
    for name in names:
        rows = metric_rows([relabel(lane, name) for lane in lanes], n_bins=n_bins, n_boot=n_boot, seed=seed)
        # The reference rules scored against these labels (the base rate is theirs), on the steps they label.
        refs = reference_lanes([relabel(lane, name) for lane in base], flags)
        ref_rows = reference_rows(refs, n_bins=n_bins, n_boot=n_boot, seed=seed)
        label = f"main-{ctx.slug('labels', name)}"
        caption = f"Step-level confidence estimation against the alternative labels '{name}' (ECE, Brier, AUC)."
        yield main_table(rows, caption=caption, label=label, notes=na_notes(rows), references=ref_rows)
        alt_main[name] = [metric_json(r) for r in rows]
        alt_references[name] = [metric_json(r) | {"reference": True} for r in ref_rows]
    yield from (Data("alt_main", alt_main), Data("alt_references", alt_references))


def main_table(
    rows: Sequence[MetricRow],
    *,
    caption: str | None = None,
    label: str = "main",
    notes: Sequence[str] = (),
    references: Sequence[MetricRow] = (),
) -> Table:
    """The paper's Table 1: ECE, Brier and AUC per stream (column groups) and critic (blocks).

    Pooled rows (``stream == POOLED``) become a last column group named ``"pooled"``. Methods with no
    numbers print ``n/a``. ``references`` (:func:`ceb.eval.reference_rules.reference_rows`) close each critic's block
    as reference rows: italic, never bold, a note under the table saying what each is.
    """
    by_key = {(r.stream, r.critic, r.method): r for r in rows}
    keys = [k for k in by_key if k[0] != POOLED] + [k for k in by_key if k[0] == POOLED]
    ref_key = {(r.stream, r.critic, r.method): r for r in references}

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        row = by_key.get((stream, critic, method))
        return None if row is None or row.summary is None else metric_cells(row)

    def reference_rows(critic: str, streams: Sequence[str]) -> list[Row]:
        out = []
        for name in REFERENCES:
            found = [ref_key.get((stream, critic, name)) for stream in streams]
            if any(found):
                cells = tuple(c for r in found for c in metric_cells(r))
                out.append(Row(reference_label(name), cells, compete=False))
        return out

    table = grid(
        keys,
        (ECE, BRIER, AUC),
        cells,
        extra_rows=reference_rows if references else None,
        caption=caption
        or (
            "Step-level confidence estimation: ECE (equal width), Brier and AUC per stream, in the first stream "
            f"order; pooled: all streams of that order, each step once (mean and sd over orders: {RunDir.METRICS})."
        ),
        label=label,
        notes=[*notes, *reference_notes(references)],
    )
    groups = tuple(("pooled" if g == POOLED else g, cols) for g, cols in table.groups)
    return Table(table.caption, table.label, groups, table.blocks, notes=table.notes)


def metric_detail_table(
    rows: Sequence[MetricRow],
    *,
    caption: str | None = None,
    label: str = "main-ci",
    notes: Sequence[str] = (),
    references: Sequence[MetricRow] = (),
) -> Table:
    """Every metric row with its counts and 95% bootstrap intervals; one block per (stream, critic).

    ``references`` close the block of their (stream, critic) as reference rows (never bold).
    """
    blocks = group_by(rows, lambda r: (r.stream, r.critic))
    refs = group_by(references, lambda r: (r.stream, r.critic))
    columns = (Column("steps", digits=0), Column("failed", digits=0), Column("trajectories", digits=0), ECE, BRIER, AUC)
    out = []
    for (stream, critic), group in blocks.items():
        block_rows = []
        ordered = sorted(group, key=lambda x: method_sort_key(x.method))
        ordered += sorted(refs.get((stream, critic), []), key=lambda x: REFERENCES.index(x.method))
        for r in ordered:
            s, ci = r.summary, r.ci
            counts = (Cell(r.n), Cell(r.failed), Cell(r.n_trajectories))
            metrics = (
                (Cell(), Cell(), Cell())
                if s is None
                else tuple(
                    Cell(getattr(s, m), *_bounds(getattr(ci, m) if ci else None)) for m in ("ece", "brier", "auroc")
                )
            )
            if is_reference(r.method):
                block_rows.append(Row(reference_label(r.method), counts + metrics, compete=False))
            else:
                block_rows.append(Row(method_label(r.method), counts + metrics))
        out.append(Block(where(stream, critic, pooled="pooled"), tuple(block_rows)))
    sampled = [(where(r.stream, r.critic, pooled="pooled"), r.n_trajectories) for r in rows if r.ci and r.ci.ece]
    return Table(
        caption=caption or "Metrics with 95% percentile bootstrap intervals over trajectories.",
        label=label,
        groups=(("", columns),),
        blocks=tuple(out),
        block_header="Stream",
        notes=(*notes, *reference_notes(references)),
        footnotes=few_trajectories(sampled),
    )


def reference_notes(references: Sequence[MetricRow]) -> list[str]:
    """A note naming the reference rows present and what each is (:data:`ceb.eval.reference_rules.REFERENCE_NOTES`)."""
    present = {r.method for r in references}
    described = [f"{reference_label(m)}: {REFERENCE_NOTES[m]}" for m in REFERENCES if m in present]
    if not described:
        return []
    return [
        "Reference rows (italic) are rules to compare with, not methods, and are never bold. "
        + "; ".join(described)
        + "."
    ]


def _bounds(interval: Interval | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval.low, interval.high)


def depth_table(depth: Mapping[tuple[str, str, str], Sequence[DepthBucket]], *, notes: Sequence[str] = ()) -> Table:
    """Calibration by within-trajectory depth (Figure 1): per bucket, ECE and mean score / positive rate.

    ``depth`` maps ``(stream, critic, method)`` to :func:`ceb.eval.calibration.depth_calibration`'s buckets.
    Blocks are (stream, critic) pairs.
    """
    labels = list(dict.fromkeys(b.label for buckets in depth.values() for b in buckets))
    groups = tuple((f"step {lab}", (Column("ECE", "lower"), Column("conf. / acc."))) for lab in labels)
    blocks: dict[tuple[str, str], list[tuple[str, Sequence[DepthBucket]]]] = {}
    for (stream, critic, method), buckets in depth.items():
        blocks.setdefault((stream, critic), []).append((method, buckets))
    out = []
    for (stream, critic), group in blocks.items():
        rows = []
        for method, buckets in sorted(group, key=lambda x: method_sort_key(x[0])):
            by_label = {b.label: b for b in buckets}
            cells: list[Cell] = []
            for lab in labels:
                b = by_label.get(lab)
                if b is None or b.n == 0:
                    cells += [Cell(), Cell()]
                else:
                    cells += [Cell(b.ece), Cell(text=f"{b.mean_score:.2f} / {b.positive_rate:.2f} (n={b.n})")]
            rows.append(Row(method_label(method), tuple(cells)))
        out.append(Block(where(stream, critic), tuple(rows)))
    return Table(
        caption="Calibration by within-trajectory depth (Figure 1): ECE and mean confidence / positive rate "
        "per step-index bucket.",
        label="depth",
        groups=groups,
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )


def label_shift_table(shifts: Mapping[tuple[str, str, str], LabelShift | None], *, notes: Sequence[str] = ()) -> Table:
    """Strict vs alternative labels (appendix A, table "judge-shift-main"); one block per label column.

    ``shifts`` maps ``(stream, critic, alt label name)`` to :func:`ceb.eval.calibration.label_shift`.
    """
    columns = (
        Column("steps", digits=0),
        Column("strict pos."),
        Column("alt pos."),
        Column("agreement %", digits=1, scale=100.0, latex=r"agreement (\%)"),
        Column("0→1 %", digits=1, scale=100.0, latex=r"$0{\to}1$ (\%)"),
        Column("1→0 %", digits=1, scale=100.0, latex=r"$1{\to}0$ (\%)"),
    )
    blocks: dict[str, list[Row]] = {}
    for (stream, critic, name), s in shifts.items():
        label = where(stream, critic)
        if s is None:
            cells = (Cell(0), *(Cell() for _ in columns[1:]))
        else:
            cells = (
                Cell(s.n),
                Cell(s.strict_positive_rate),
                Cell(s.alt_positive_rate),
                Cell(s.agreement),
                Cell(s.zero_to_one),
                Cell(s.one_to_zero),
            )
        blocks.setdefault(name, []).append(Row(label, cells))
    return Table(
        caption="Strict labels vs alternative labels: positive rates, agreement and the share of steps "
        "relabelled 0→1 and 1→0.",
        label="label-shift",
        groups=(("", columns),),
        blocks=tuple(Block(name, tuple(rows)) for name, rows in blocks.items()),
        row_header="Stream",
        block_header="Labels",
        notes=tuple(notes),
    )
