"""``ceb metrics``: recompute a run directory's metrics; :func:`print_metrics` is the table ``ceb score`` prints too."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ceb.cli._common import err, out

__all__ = ["metrics", "print_metrics"]


def _fmt(v: object, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def print_metrics(metrics: dict[str, Any], console: Console = out) -> None:
    """Print the entries of ``metrics`` (:func:`ceb.eval.run_metrics`) as one table, saying how they pool.

    Reference rows (``"reference": true``, :mod:`ceb.eval.reference_rules`) are marked ``(reference)`` and explained
    under the table.
    """
    from ceb.eval.reference_rules import REFERENCE_NOTES, REFERENCES

    bins = metrics["n_bins"]
    results = metrics["results"]
    orders = metrics.get("orders", 1) > 1
    critics = any(r.get("critic") for r in results)
    columns = ["stream", *(["order"] if orders else []), *(["critic"] if critics else []), "method", "labelled steps"]
    columns += ["pos. rate", "mean score", f"ECE ({bins} bins)", "ECE (equal mass)", "Brier", "AUROC", "failed"]
    table = Table(*columns, title="Step-level confidence vs. held-out labels")
    for r in results:
        mean = r.get("order", 0) is None
        cells = [r["stream"]]
        if orders:
            cells.append(f"mean of {r['orders']}" if mean else str(r.get("order", 0)))
        if critics:
            cells.append(r.get("critic") or "")
        ref = bool(r.get("reference"))
        method = f"{r['method']} (reference)" if ref else r["method"]
        cells += [method, _fmt(r.get("n")), _fmt(r.get("positive_rate"))]
        for name in ("mean_score", "ece", "ece_equal_mass", "brier", "auroc"):
            value = "—" if ref and r.get(name) is None and r.get("n") else _fmt(r.get(name))
            cells.append(f"{value} ± {_fmt(r.get(f'{name}_sd'))}" if mean and name != "mean_score" else value)
        cells.append(_fmt(r.get("failed")))
        table.add_row(*cells, style="italic dim" if ref else None)
    console.print(table)
    notes = [
        f"(pooled): all streams within one stream order{'; mean of R: mean ± sd over the R orders' if orders else ''}."
    ]
    present = {r["method"] for r in results if r.get("reference")}
    refs = [f"{name}: {REFERENCE_NOTES[name]}" for name in REFERENCES if name in present]
    if refs:
        notes.append(f"(reference) rows are rules to compare with, not methods: {'; '.join(refs)} (—: not applicable).")
    for name, why in (metrics.get("references_missing") or {}).items():
        notes.append(f"no {name} reference: " + "; ".join(f"{s}: {w}" if s != "*" else w for s, w in why.items()) + ".")
    if any(not r.get("n") for r in results):
        notes.append(
            "0 labelled steps: the stream has no held-out labels to measure against; its scores are in the run's rows."
        )
    console.print(" ".join(notes), style="dim", markup=False)


def metrics(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `ceb score`.")],
    bins: Annotated[
        int | None,
        typer.Option(min=1, max=10_000, help="ECE bins, 1 to 10,000 (default: the run's own ece_bins)."),
    ] = None,
) -> None:
    """Recompute and print the metrics of a run directory.

    A run that ended interrupted, or one being scored now, is read as it stands, with a note that it is partial;
    a run that is not complete (killed before its summary.json, or rows lost or doubled since) is refused, naming
    what is missing and how to continue it.
    """
    from ceb.eval import run_metrics, write_metrics
    from ceb.pipeline.rundir import RunDir

    run = RunDir(run_dir)
    note = run.require_readable()
    if note is not None:
        err.print(f"note: {note}", soft_wrap=True)
    if bins is None:
        bins = run.recorded_or_default()[0].ece_bins
    m = run_metrics(run_dir, n_bins=bins)
    write_metrics(run_dir, m)
    print_metrics(m)
