"""Builder of the paired-differences table: each method against Static and against the best reference."""

from __future__ import annotations

from collections.abc import Sequence

from ceb.eval.bootstrap import PAIRED_METRICS
from ceb.eval.lanes import POOLED
from ceb.eval.paired import STATIC, Comparison
from ceb.eval.reference_rules import is_reference, reference_label
from ceb.eval.tables.model import Block, Cell, Column, Row, Table, method_label, method_sort_key

__all__ = ["paired_table"]

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
        name = "pooled" if stream == POOLED else stream
        place = f"{name} / {critic}" if critic else name
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
    )
