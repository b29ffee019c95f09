"""``ceb metrics``: recompute a run directory's metrics; :func:`print_metrics` is the table ``ceb score`` prints too."""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Annotated, Any, TextIO

import orjson
import typer
from rich.console import Console
from rich.table import Table

from ceb.cli._common import err, out

__all__ = ["REFERENCE_HELP", "metrics", "print_metrics"]

REFERENCE_HELP = (
    "Show the reference rules (base rate, step position, repetition flag) per stream, not as one line of pooled AUROCs."
)
"""Help of ``--reference`` (``score``, ``metrics``)."""


def _fmt(v: object, digits: int = 3) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ordered(results: list[dict[str, Any]], pooled: str) -> list[dict[str, Any]]:
    """``results`` by stream order, critic, stream (pooled last) and method, each in its order of first appearance."""
    first: dict[tuple[str, object], int] = {}
    for r in results:
        for seen in (("stream", r["stream"]), ("method", r["method"]), ("critic", r.get("critic"))):
            first.setdefault(seen, len(first))

    def rank(r: dict[str, Any]) -> tuple[Any, ...]:
        order = r.get("order", 0)
        return (
            order is None,
            order or 0,
            first["critic", r.get("critic")],
            r["stream"] == pooled,
            first["stream", r["stream"]],
            bool(r.get("reference")),
            first["method", r["method"]],
        )

    return sorted(results, key=rank)


def print_metrics(
    metrics: dict[str, Any], console: Console = out, run_dir: Path | None = None, *, reference: bool = False
) -> None:
    """Print the entries of ``metrics`` (:func:`ceb.eval.run_metrics`) as one compact table, saying how they pool.

    A row per stream and method (pooled rows last): steps, positive rate, ECE, Brier, AUROC (and failed steps).
    Reference rows (:mod:`ceb.eval.reference_rules`) are one line under the table, or per stream with
    ``reference``. A run without labelled steps, given its ``run_dir``, gets :func:`print_label_free` instead.
    """
    from ceb.eval.lanes import POOLED
    from ceb.eval.reference_rules import REFERENCE_NOTES, REFERENCES

    if run_dir is not None and not any(r.get("n") for r in metrics["results"]):
        print_label_free(run_dir, console)
        return

    bins = metrics["n_bins"]
    every = _ordered(metrics["results"], POOLED)
    results = [r for r in every if reference or not r.get("reference")]
    orders = metrics.get("orders", 1) > 1
    critics = any(r.get("critic") for r in results)
    failed = any(r.get("failed") for r in results)
    columns = ["stream", *(["order"] if orders else []), *(["critic"] if critics else []), "method", "steps"]
    columns += ["pos. rate", "ECE", "Brier", "AUROC", *(["failed"] if failed else [])]
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
        for name in ("ece", "brier", "auroc"):
            value = "—" if ref and r.get(name) is None and r.get("n") else _fmt(r.get(name))
            cells.append(f"{value} ± {_fmt(r.get(f'{name}_sd'))}" if mean else value)
        if failed:
            cells.append(_fmt(r.get("failed")))
        table.add_row(*cells, style="italic dim" if ref else None)
    console.print(table)
    notes = [
        f"(pooled): all streams within one stream order{'; mean of R: mean ± sd over the R orders' if orders else ''}; "
        f"ECE over {bins} equal-width bins."
    ]
    present = {r["method"] for r in every if r.get("reference")}
    if reference:
        refs = [f"{name}: {REFERENCE_NOTES[name]}" for name in REFERENCES if name in present]
        if refs:
            notes.append(
                f"(reference) rows are rules to compare with, not methods: {'; '.join(refs)} (—: not applicable)."
            )
    else:
        refs_rows = [r for r in every if r.get("reference") and r.get("order", 0) in (0, None)]
        where = POOLED if any(r["stream"] == POOLED for r in refs_rows) else next((r["stream"] for r in refs_rows), "")
        summed = {r["method"]: r for r in refs_rows if r["stream"] == where}
        shown = [f"{name} {_fmt(summed[name].get('auroc'))}" for name in REFERENCES if name in summed]
        if shown:
            notes.append(
                f"Reference rules, AUROC {'pooled' if where == POOLED else f'on {where}'}: {', '.join(shown)} "
                "(--reference: per stream, and what each is)."
            )
    for name, why in (metrics.get("references_missing") or {}).items():
        notes.append(f"no {name} reference: " + "; ".join(f"{s}: {w}" if s != "*" else w for s, w in why.items()) + ".")
    if any(not r.get("n") for r in results):
        notes.append(
            "0 labelled steps: the stream has no held-out labels to measure against; its scores are in the run's rows."
        )
    console.print(" ".join(notes), style="dim", markup=False)


REVIEW_PRINTED = 5
"""Lowest-confidence steps printed per method for a run without labels (the report lists more)."""


def print_label_free(run_dir: Path, console: Console = out) -> None:
    """Print each method's score spread, lowest-confidence steps and rank agreement (:mod:`ceb.eval.label_free`)."""
    from ceb.eval.label_free import agreement, score_spreads, step_texts, steps_to_review, with_texts
    from ceb.eval.lanes import base_lanes, lanes_from_rows
    from ceb.pipeline.results import read_step_rows
    from ceb.pipeline.rundir import RunDir

    run = RunDir(run_dir)
    lanes = [lane for lane in base_lanes(lanes_from_rows(read_step_rows(run.scores))) if lane.note is None]
    spread = Table(
        "stream",
        "method",
        "steps",
        "mean",
        "sd",
        "p10",
        "median",
        "p90",
        "distinct",
        title=("No labelled step: the scores without labels"),
    )
    for s in score_spreads(lanes):
        spread.add_row(
            s.stream, s.method, str(s.n), *(f"{v:.3f}" for v in (s.mean, s.sd, *s.quantiles)), str(s.distinct)
        )
    console.print(spread)
    steps, _ = steps_to_review(lanes, {}, REVIEW_PRINTED)
    texts, _ = step_texts(run, {(r.stream, r.trajectory, r.step) for r in steps})
    steps = with_texts(steps, texts)
    review = Table("method", "stream", "trajectory", "step", "score", "action", title="Steps to review (lowest first)")
    for r in steps:
        review.add_row(r.method, r.stream, r.trajectory, str(r.step), f"{r.score:.3f}", r.action[:80])
    console.print(review)
    pairs = [a for a in agreement(lanes) if a.rho is not None]
    if pairs:
        console.print(
            "Rank agreement (Spearman): "
            + "; ".join(f"{a.stream} {a.first} vs {a.second} {a.rho:+.3f} over {a.n} steps" for a in pairs),
            markup=False,
        )
    console.print(
        f"Labels are read only for evaluation: with none, calibration cannot be measured. `ceb report {run_dir}` lists "
        "more steps to review and what each selective-execution budget would defer.",
        style="dim",
        markup=False,
    )


def metrics(
    run_dir: Annotated[Path, typer.Argument(help="A run directory written by `ceb score`.")],
    bins: Annotated[
        int | None,
        typer.Option(min=1, max=10_000, help="ECE bins, 1 to 10,000 (default: the run's own ece_bins)."),
    ] = None,
    reference: Annotated[bool, typer.Option("--reference", help=REFERENCE_HELP)] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the run's metrics document (every figure, every row) as JSON instead.")
    ] = False,
    as_csv: Annotated[
        bool, typer.Option("--csv", help="Print one CSV row per stream, method and order instead (every figure).")
    ] = False,
) -> None:
    """Recompute and print the metrics of a run directory (and write them to its metrics.json).

    An interrupted run, or one being scored now, is read as it stands (noted partial); an incomplete run (no
    summary.json, or rows lost or doubled) is refused, naming what is missing and how to continue it.
    """
    from ceb.pipeline.rundir import RunDir

    if as_json and as_csv:
        raise typer.BadParameter("give --json or --csv, not both")
    run = RunDir(run_dir)
    note = run.require_readable()  # before the metrics' imports (scikit-learn): a missing run is refused at once
    if note is not None:
        err.print(f"note: {note}", soft_wrap=True)
    from ceb.eval import run_metrics, write_metrics

    if bins is None:
        bins = run.recorded_or_default()[0].ece_bins
    m = run_metrics(run_dir, n_bins=bins)
    write_metrics(run_dir, m)
    if as_json:
        sys.stdout.write(orjson.dumps(m, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif as_csv:
        _write_csv(m["results"], sys.stdout)
    else:
        print_metrics(m, run_dir=run_dir, reference=reference)


def _write_csv(results: list[dict[str, Any]], stream: TextIO) -> None:
    """One CSV row per result, a column per figure any row has (first seen first); an empty cell for none."""
    columns = list(dict.fromkeys(key for r in results for key in r))
    writer = csv.DictWriter(stream, columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in results)
