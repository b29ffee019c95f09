"""``ceb batch export`` and ``ceb batch import``: the bank-free baselines as an OpenAI Batch file, and back.

The flow (``docs/scale-out.md``, "The bank-free baselines as a Batch file")::

    ceb batch export streams/a.jsonl --model gpt-4o-mini --out batch/     # writes batch/round-1.jsonl
    # submit batch/round-1.jsonl to OpenAI / Azure Batch, or: vllm run-batch -i batch/round-1.jsonl -o out.jsonl
    ceb batch import batch/ out.jsonl --out runs/a                        # rows, summary.json, metrics.json

The work is :mod:`ceb.pipeline.batch`; this module reads the options and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from ceb.cli._common import EXIT_FAILED, Command, CommandGroup, Limit, ModelName, config_option, err, out
from ceb.cli.metrics import print_metrics

__all__ = ["BATCH_METHODS", "batch_app"]

BATCH_METHODS = ("ppl", "me", "ptrue", "cot", "verbalized", "pro")
"""The methods ``ceb batch export`` exports unless the config or ``--methods`` says otherwise."""

batch_app = typer.Typer(
    cls=CommandGroup,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="The bank-free baselines (ppl, me, ptrue, cot, verbalized, pro) through a Batch API: export their "
    "requests as an OpenAI Batch file, import its output as an ordinary run.",
)


@batch_app.command("export", cls=Command)
def export(
    out_dir: Annotated[Path, typer.Option("--out", help="New directory for the export (batch.json, round-1.jsonl).")],
    streams: Annotated[
        list[str] | None,
        typer.Argument(
            help="Trajectory JSONL files, one stream each (as for ceb score: NAME=FILE, a.jsonl+b.jsonl); or --grid."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML or JSON config file (flags override it).")] = None,
    grid: Annotated[
        Path | None,
        typer.Option(
            help="A grid file (as for ceb grid): its streams and settings; its bank-free baselines are exported, "
            "the other methods left to ceb grid."
        ),
    ] = None,
    methods: Annotated[
        str | None,
        config_option("methods", "--methods", help="Comma-separated bank-free baselines", base=BATCH_METHODS),
    ] = None,
    model: ModelName = None,
    limit: Limit = None,
) -> None:
    """Write the requests of the bank-free baselines on STREAMS (or a --grid) as a Batch input file, OUT/round-1.jsonl.

    Each line is {"custom_id", "method": "POST", "url": "/v1/chat/completions", "body"}, the body exactly what
    `ceb score` would send to the endpoint online. Submit the file to OpenAI's or Azure's Batch API, or run it
    with `vllm run-batch`, then read the output back with `ceb batch import OUT OUTPUT --out RUN_DIR`.
    """
    from ceb.config import load_config
    from ceb.data import read_stream
    from ceb.data.streams import parse_stream_specs

    overrides = {
        "backend": {"model": model},
        "methods": None if methods is None else tuple(m.strip() for m in methods.split(",") if m.strip()),
        "max_trajectories": limit,
    }
    if grid is not None:
        if streams or config is not None:
            raise typer.BadParameter("--grid names the streams and the settings: give no STREAMS and no --config")
        from ceb.pipeline.batch import batchable
        from ceb.pipeline.grid import load_grid

        spec = load_grid(grid, {k: v for k, v in overrides.items() if v is not None})
        left = [m for m in spec.config.methods if not batchable(m)]
        kept = tuple(m for m in spec.config.methods if batchable(m))
        if not kept:
            raise typer.BadParameter(f"{grid} has no bank-free baseline to export (methods: {', '.join(left)})")
        if left:
            verb = "needs" if len(left) == 1 else "need"
            err.print(
                f"note: {', '.join(left)} {verb} the bank and stay online (ceb grid); exporting {', '.join(kept)}",
                soft_wrap=True,
            )
        cfg = spec.config.model_copy(update={"methods": kept})
        specs: dict[str, list[Any]] = dict(spec.streams)
    else:
        if not streams:
            raise typer.BadParameter("give the STREAMS to export, or --grid FILE")
        cfg = load_config(config, overrides, base={"methods": BATCH_METHODS})
        specs = dict(parse_stream_specs(streams))
    data = {name: read_stream(paths) for name, paths in specs.items()}
    from ceb.pipeline.batch import export_batch  # the stages, the bank, aiohttp: once the input reads

    done = anyio.run(lambda: export_batch(data, specs, cfg, out_dir))
    out.print(
        f"{done.requests} requests of {', '.join(cfg.methods)} in {done.path}; submit it to a Batch API "
        f"(or: vllm run-batch -i {done.path} -o OUTPUT), then: ceb batch import {out_dir} OUTPUT --out RUN_DIR",
        soft_wrap=True,
    )


@batch_app.command("import", cls=Command)
def import_(
    batch_dir: Annotated[Path, typer.Argument(help="The directory `ceb batch export` wrote.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Directory for the run's results (as ceb score --out).")],
    outputs: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Batch output files of any round (OpenAI's output file and its error file, together or apart, in "
            "either order); each line is added to what was imported for its request's round (a request answered "
            "again takes the new line); leave out to use the outputs imported before."
        ),
    ] = None,
    overwrite: Annotated[
        bool, typer.Option(help="Replace the results of an earlier import in OUT, rebuilt from every round's replies.")
    ] = False,
) -> None:
    """Read a Batch output back into a run directory: rows, summary.json and metrics.json as `ceb score` writes.

    Each baseline reads its replies with the code it uses online; a request the Batch failed is a failed step
    with its error. A step that asks a follow-up request only after reading a reply (pro's teacher forcing, a cot
    re-ask) waits for the next round: its requests go into BATCH_DIR/round-<k+1>.jsonl, which is printed; import
    that round's output with --overwrite. An output of an earlier round (OpenAI's error file after round 2 was
    written) may be imported at any time with --overwrite.
    """
    from ceb.data import read_stream
    from ceb.eval import run_metrics, write_metrics
    from ceb.pipeline.batch import BatchDir, import_batch
    from ceb.pipeline.provenance import scored_by
    from ceb.pipeline.rundir import RunDir

    src = BatchDir(batch_dir)
    data = {name: read_stream(paths) for name, paths in src.streams().items()}
    done = anyio.run(lambda: import_batch(data, batch_dir, outputs or [], out_dir, overwrite=overwrite))
    cfg = src.config()
    metrics = run_metrics(out_dir, n_bins=cfg.ece_bins)
    write_metrics(out_dir, metrics)
    print_metrics(metrics, run_dir=Path(out_dir))
    s = done.summary
    if s is not None:
        out.print(
            f"{s.steps_scored} steps scored, {s.steps_failed} failed, from {done.replies} Batch output lines. "
            f"Results in {out_dir}/",
            soft_wrap=True,
        )
    if done.unanswered:
        err.print(f"warning: {done.unanswered} requests have no line in the Batch output: their steps failed")
    for k, n in done.waiting.items():
        out.print(
            f"round {k}: {n} follow-up requests wait in {src.round_file(k)}; submit it, then: "
            f"ceb batch import {batch_dir} OUTPUT --out {out_dir} --overwrite",
            soft_wrap=True,
        )
    if s is not None:
        out.print(scored_by(s.provenance), soft_wrap=True)
    if done.path is None and s is not None and s.steps_failed and not s.steps_scored:  # as ceb score: all refused
        err.print(f"error: every step failed (no score); the reasons are in {RunDir(out_dir).scores}")
        raise typer.Exit(EXIT_FAILED)
