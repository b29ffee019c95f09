"""``ceb grid``: methods x streams x orders x critics of a grid file, in one process and one run directory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from ceb.cli._common import Limit, ShardOption, err, parse_shard
from ceb.cli.score import score_and_report

__all__ = ["grid"]


def grid(
    config: Annotated[Path, typer.Argument(help="Grid file: a run config plus a [grid] table (streams, out).")],
    resume: Annotated[
        bool, typer.Option(help="Continue the grid's run directory where it stopped (one with no run is refused).")
    ] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace the results of an earlier run there.")] = False,
    streams: Annotated[
        str | None,
        typer.Option(
            "--streams",
            help="Run only these streams of the grid: comma-separated names or shell patterns "
            "('intercode-bash-gpt-4,*sql*'). A --resume keeps the run's own streams unless this is given.",
        ),
    ] = None,
    limit: Limit = None,
    shard: ShardOption = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Run directory instead of the grid file's out. With --shard i/N and no --out: OUT-shard<i>of<N> "
            "beside the grid's out.",
        ),
    ] = None,
) -> None:
    """Run methods x streams x orders x critics (and V/k sweep cells) of a grid file in one process.

    Every lane shares the scheduler, so baselines fill the server while CEB lanes follow their order; all rows
    land in one run directory (scores.jsonl, one row per step per method) that `ceb report` reads.
    """
    from ceb.data import read_stream
    from ceb.pipeline.grid import load_grid, pick_streams
    from ceb.pipeline.rundir import RunDir

    part = parse_shard(shard)
    spec = load_grid(config, {"max_trajectories": limit})
    if out_dir is not None:
        spec = replace(spec, out=out_dir)
    elif part is not None:
        spec = replace(spec, out=spec.out.with_name(f"{spec.out.name}-shard{part.index}of{part.count}"))
    if resume:
        RunDir(spec.out).require_run()  # before the streams are read and the grid is announced
    picked = spec.streams
    if streams is not None:
        picked = pick_streams(spec.streams, [p.strip() for p in streams.split(",") if p.strip()])
    elif resume and (recorded := RunDir(spec.out).recorded_streams()):
        picked = pick_streams(spec.streams, recorded, recorded=True)
    data = {name: read_stream(paths) for name, paths in picked.items()}
    cfg = spec.config
    if resume and limit is None:
        cfg = cfg.model_copy(update={"max_trajectories": RunDir(spec.out).recorded_config().max_trajectories})
    limited = f", first {cfg.max_trajectories} trajectories of each" if cfg.max_trajectories else ""
    again = f"ceb grid {config} --resume" + (f" --shard {part}" if part is not None else "")
    again += f" --out {out_dir}" if out_dir is not None else ""
    shard_note = f", shard {part}" if part is not None else ""
    err.print(
        f"grid: {len(data)} streams{limited} x {cfg.orders} orders x {len(cfg.methods)} methods x "
        f"{max(1, len(cfg.critics))} critics{shard_note} -> {spec.out}"
    )
    score_and_report(data, cfg, spec.out, overwrite=overwrite, resume=resume, resume_hint=again, shard=part)
