"""Report section: paired differences of each method against Static and the best reference (beyond the paper)."""

from __future__ import annotations

from collections.abc import Sequence

from ceb.eval.paired import Comparison, paired_comparisons
from ceb.eval.reference_rules import is_reference, reference_label
from ceb.eval.sections.base import ReportContext, ReportWriter, section, where
from ceb.eval.tables import method_label, paired_table

__all__ = ["paired", "zero_sentences"]

_METRIC = {"ece": "ECE", "brier": "Brier", "auroc": "AUROC"}


@section(
    "Paired differences against Static and the references (beyond the paper)",
    needs=("base", "references", "reference_rows", "n_bins", "n_boot", "seed"),
)
def paired(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: each method minus Static and minus the best reference, with paired bootstrap intervals."""
    rep.intro(
        "Each method's ECE, Brier and AUROC minus those of Static and of the best reference row, on the steps both "
        "scored with a label. The intervals are paired: each of the "
        f"{ctx.n_boot} replicates (seed {ctx.seed}) resamples trajectories once and scores both rows on the same "
        "steps, so they are intervals of the difference itself. The reference for ECE and Brier is the base rate "
        "(the rankings have neither); for AUROC it is the reference with the highest AUROC on that stream. "
        "Negative is better for ΔECE and ΔBrier, positive for ΔAUC.",
    )
    comparisons = paired_comparisons(
        ctx.base, ctx.references, ctx.reference_rows, n_bins=ctx.n_bins, n_boot=ctx.n_boot, seed=ctx.seed
    )
    rep.data["paired"] = [_json(c) for c in comparisons]
    if not comparisons:
        rep.note("Skipped: no method has labelled steps shared with Static or a reference row.")
        return
    rep.table(paired_table(comparisons))
    rep.lines += zero_sentences(comparisons, ctx.n_boot)


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
