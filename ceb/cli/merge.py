"""``ceb merge``: join the parts of a sharded run (``--shard i/N``) into the run directory one run would write."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ceb.cli._common import out
from ceb.cli.metrics import print_metrics

__all__ = ["merge", "report_merged"]


def merge(
    parts: Annotated[
        list[Path],
        typer.Argument(help="The N run directories of `ceb score --shard i/N` (or `ceb grid --shard i/N`), any order."),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="New directory for the merged run.")],
) -> None:
    """Merge the shards of one run into OUT, then print its metrics.

    The parts must be one run split N ways (the same settings, streams and limit, each shard i of N once, each
    finished). OUT gets config.json, scores.jsonl and hindsight.jsonl (rows grouped by lane), banks/,
    summary.json (counts summed) and metrics.json. Parts that disagree, overlap, leave a shard out, did not
    finish or are damaged are refused, naming the part and what differs (and the --resume that repairs it), as is
    a part a live ceb holds. OUT is built beside it (.OUT.building) and published whole.
    """
    from ceb.pipeline.merge import merge_runs

    report_merged(merge_runs(parts, out_dir))


def report_merged(merged: Any) -> None:
    """Compute and write the merged run's metrics.json, print them and a line of counts (also after ``grid --ray``).

    Args:
        merged: What :func:`ceb.pipeline.merge.merge_runs` wrote (a :class:`~ceb.pipeline.merge.MergeResult`).
    """
    from ceb.eval import run_metrics, write_metrics
    from ceb.pipeline.provenance import scored_by

    metrics = run_metrics(merged.out, n_bins=merged.config.ece_bins)
    write_metrics(merged.out, metrics)
    print_metrics(metrics, run_dir=Path(merged.out))
    out.print(
        f"merged {merged.parts} shards: {merged.lanes} lanes, {merged.step_rows} step rows, "
        f"{merged.hindsight_rows} hindsight rows, {merged.banks} banks. Results in {merged.out}/"
    )
    out.print(scored_by(merged.summary.provenance), soft_wrap=True)
