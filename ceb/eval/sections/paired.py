"""Report section: paired differences of each method against Static and the best reference (beyond the paper)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ceb.eval.bootstrap import PAIRED_METRICS
from ceb.eval.lanes import method_label, method_sort_key
from ceb.eval.paired import STATIC, Comparison, paired_comparisons
from ceb.eval.reference_rules import is_reference, reference_label
from ceb.eval.render import Block, Cell, Column, Data, Lines, Note, Part, Row, Table, Text
from ceb.eval.sections.base import ReportContext, few_trajectories, section, where

__all__ = ["paired_table", "zero_sentences"]

_METRIC = {"ece": "ECE", "brier": "Brier", "auroc": "AUROC"}


@section(
    "Paired differences against Static and the references (beyond the paper)",
    needs=("base", "references", "reference_rows", "n_bins", "n_boot", "seed"),
)
def _paired(ctx: ReportContext) -> Iterator[Part]:
    yield Text(
        "Each method's ECE, Brier and AUROC minus those of Static and of the best reference row, on the steps both "
        "scored with a label. The intervals are paired: each of the "
        f"{ctx.n_boot} replicates (seed {ctx.seed}) resamples trajectories once and scores both rows on the same "
        "steps, so they are intervals of the difference itself. The reference for ECE and Brier is the base rate "
        "(the rankings have neither); for AUROC it is the reference with the highest AUROC on that stream. "
        "Negative is better for ΔECE and ΔBrier, positive for ΔAUC."
    )
    comparisons = paired_comparisons(
        ctx.base, ctx.references, ctx.reference_rows, n_bins=ctx.n_bins, n_boot=ctx.n_boot, seed=ctx.seed
    )
    yield Data("paired", [_json(c) for c in comparisons])
    if not comparisons:
        yield Note("Skipped: no method has labelled steps shared with Static or a reference row.")
        return
    yield paired_table(comparisons)
    yield Lines(tuple(zero_sentences(comparisons, ctx.n_boot)))


def zero_sentences(comparisons: Sequence[Comparison], n_boot: int) -> list[str]:
    """The report's words on the intervals: per (stream, critic), the comparisons whose interval contains 0."""
    if n_boot == 0:
        return ["No intervals: the report ran with 0 bootstrap replicates.", ""]
    blocks: dict[tuple[str, str], list[str]] = {}
    for c in comparisons:
        said = blocks.setdefault((c.stream, c.critic), [])
        if c.difference.contains_zero:
            other = reference_label(c.against) if is_reference(c.against) else method_label(c.against)
            said.append(f"{method_label(c.method)} vs {other}, {_METRIC[c.metric]}")
    lines = []
    for (stream, critic), said in blocks.items():
        if said:
            lines.append(
                f"- {where(stream, critic)}: the interval contains 0, so no evidence of a difference, for "
                + "; ".join(said)
                + "."
            )
        else:
            lines.append(f"- {where(stream, critic)}: every interval excludes 0.")
    return [*lines, ""]


def _json(c: Comparison) -> dict[str, object]:
    d = c.difference
    return {
        "stream": c.stream,
        "critic": c.critic,
        "method": c.method,
        "against": c.against,
        "metric": c.metric,
        "n": c.n,
        "n_trajectories": c.n_trajectories,
        "difference": d.point,
        "low": d.low,
        "high": d.high,
        "n_valid": d.n_valid,
        "contains_zero": d.contains_zero,
    }


_NAMES = {"ece": "ΔECE", "brier": "ΔBrier", "auroc": "ΔAUC"}


def paired_table(comparisons: Sequence[Comparison], *, label: str = "paired", notes: Sequence[str] = ()) -> Table:
    """Differences ``method - other`` with their paired 95% intervals; one block per (stream, critic).

    Column groups: against Static, and against the reference (ECE and Brier against the base rate, AUC against
    the best AUROC reference of the block, named in the block label). No cell is bold: these are differences.
    """
    columns = tuple(Column(_NAMES[m], signed=True) for m in PAIRED_METRICS)
    blocks: dict[tuple[str, str], dict[str, dict[tuple[str, str], Comparison]]] = {}
    for c in comparisons:
        side = "static" if c.against == STATIC else "reference"
        blocks.setdefault((c.stream, c.critic), {}).setdefault(c.method, {})[(side, c.metric)] = c
    out = []
    for (stream, critic), per_method in blocks.items():
        rows = []
        auroc_refs = set()
        for method in sorted(per_method, key=method_sort_key):
            found = per_method[method]
            cells = []
            for side in ("static", "reference"):
                for metric in PAIRED_METRICS:
                    got = found.get((side, metric))
                    if got is None:
                        cells.append(Cell())
                        continue
                    d = got.difference
                    cells.append(Cell(d.point, d.low, d.high))
                    if side == "reference" and metric == "auroc":
                        auroc_refs.add(got.against)
            rows.append(Row(method_label(method), tuple(cells)))
        place = where(stream, critic, pooled="pooled")
        refs = ", ".join(reference_label(r).removeprefix("reference: ") for r in sorted(auroc_refs) if is_reference(r))
        out.append(Block(f"{place} (AUC reference: {refs})" if refs else place, tuple(rows)))
    return Table(
        caption=(
            "Paired differences, method minus other, with 95% percentile bootstrap intervals resampling trajectories "
            "(the same resampled steps for both): against Static, and against the reference rows (ECE and Brier: "
            "base rate; AUC: the reference with the highest AUROC on the block)."
        ),
        label=label,
        groups=(("vs Static", columns), ("vs reference", columns)),
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
        footnotes=few_trajectories(
            (where(c.stream, c.critic, pooled="pooled"), c.n_trajectories)
            for c in comparisons
            if c.difference.low is not None
        ),
    )
