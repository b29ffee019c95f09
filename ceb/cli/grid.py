"""``ceb grid``: methods x streams x orders x critics of a grid file, in one process and one run directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ceb.cli._common import EXIT_FAILED, EXIT_INTERRUPTED, Limit, ShardOption, err, fail, out, parse_shard
from ceb.cli.score import score_and_report, sigterm_as_ctrl_c
from ceb.errors import ConfigError

if TYPE_CHECKING:
    from ceb.pipeline.grid import GridSpec

__all__ = ["grid"]

_RAY = "Ray (--ray)"


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
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Run the grid on Ray, one task per shard, then merge into OUT (shards in OUT/parts/): local (a Ray "
            "instance on this machine), auto (the cluster this machine joined), HOST:PORT or ray://HOST:PORT. "
            "Needs pip install -e '.[ray]' in ceb's checkout.",
            rich_help_panel=_RAY,
        ),
    ] = None,
    shards: Annotated[
        int | None,
        typer.Option(
            "--shards",
            min=1,
            help="With --ray: N shards (default: the cluster's CPUs, at most one per lane).",
            rich_help_panel=_RAY,
        ),
    ] = None,
    ray_retries: Annotated[
        int,
        typer.Option(
            "--ray-retries",
            min=0,
            max=100,
            help="With --ray: runs of a shard again after its worker died; each resumes the shard's part.",
            rich_help_panel=_RAY,
        ),
    ] = 3,
) -> None:
    """Run methods x streams x orders x critics (and V/k sweep cells) of a grid file in one process.

    Every lane shares the scheduler, so baselines fill the server while CEB lanes follow their order; all rows
    land in one run directory (scores.jsonl, one row per step per method) that `ceb report` reads. With --ray
    ADDRESS the lanes are split into N shards, one Ray task each running this same runner into OUT/parts/; a task
    whose worker dies is retried and resumes its part, and the parts are merged into OUT as `ceb merge` does.
    """
    from ceb.data import read_stream
    from ceb.pipeline.grid import resolve_grid

    part = parse_shard(shard)
    address = None
    if ray is not None:
        from ceb.pipeline.ray_launch import parse_address

        if part is not None:
            raise typer.BadParameter("--ray makes its own shards; leave out --shard (or give --shards N)")
        try:
            address = parse_address(ray)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from None
    elif shards is not None:
        raise typer.BadParameter("--shards N goes with --ray; for one shard of a run give --shard i/N")
    patterns = [p.strip() for p in streams.split(",") if p.strip()] if streams is not None else None
    spec = resolve_grid(
        config, out=out_dir, streams=patterns, limit=limit, resume=resume, shard=part, ray=address is not None
    )
    if address is not None:
        _grid_on_ray(spec, config, address, out_dir, shards, ray_retries, resume=resume, overwrite=overwrite)
        return
    cfg = spec.config
    data = {name: read_stream(paths) for name, paths in spec.streams.items()}
    limited = f", first {cfg.max_trajectories} trajectories of each" if cfg.max_trajectories else ""
    again = f"ceb grid {config} --resume" + (f" --shard {part}" if part is not None else "")
    again += f" --out {out_dir}" if out_dir is not None else ""
    shard_note = f", shard {part}" if part is not None else ""
    err.print(
        f"grid: {len(data)} streams{limited} x {cfg.orders} orders x {len(cfg.methods)} methods x "
        f"{max(1, len(cfg.critics))} critics{shard_note} -> {spec.out}"
    )
    score_and_report(data, cfg, spec.out, overwrite=overwrite, resume=resume, resume_hint=again, shard=part)


def _grid_on_ray(
    spec: GridSpec,
    config: Path,
    address: str,
    out_dir: Path | None,
    shards: int | None,
    retries: int,
    *,
    resume: bool,
    overwrite: bool,
) -> None:
    """``ceb grid --ray``: launch the shards (:func:`ceb.pipeline.ray_launch.run_on_ray`), report, print metrics."""
    from ceb.cli.merge import report_merged
    from ceb.pipeline.ray_launch import ShardDone, ShardFailed, run_on_ray
    from ceb.pipeline.rundir import RunDir

    target, cfg = spec.out, spec.config
    again = f"ceb grid {config} --ray {address} --resume" + (f" --out {out_dir}" if out_dir is not None else "")
    err.print(
        f"grid on Ray ({address}): {len(spec.streams)} streams x {cfg.orders} orders x {len(cfg.methods)} methods -> "
        f"{target} (shards in {target}/{RunDir.PARTS}/)",
        soft_wrap=True,
    )

    def on_shard(outcome: ShardDone | ShardFailed) -> None:
        if isinstance(outcome, ShardDone):
            kept = f", resumed with {outcome.steps_kept} steps kept from an earlier attempt" if outcome.resumed else ""
            err.print(
                f"shard {outcome.shard} done: {outcome.steps_scored} steps, {outcome.steps_failed} failed, "
                f"{outcome.trajectories_voted} trajectories voted{kept}; {outcome.wall_s:.1f} s",
                soft_wrap=True,
            )
        else:
            err.print(f"shard {outcome.shard} failed: {outcome.error}", soft_wrap=True)

    try:
        with sigterm_as_ctrl_c():
            result = run_on_ray(
                spec.streams,
                cfg,
                target,
                address=address,
                shards=shards,
                retries=retries,
                resume=resume,
                overwrite=overwrite,
                on_shard=on_shard,
            )
    except KeyboardInterrupt:
        err.print(
            f"interrupted: every finished step is in the parts under {target}/{RunDir.PARTS}; continue with {again}",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    if result.failed:
        for f in result.failed:
            if f.cause is not None:  # the run's own error (bad input): the same in every shard, reported as itself
                raise fail(f.cause)
        names = ", ".join(str(f.shard) for f in result.failed)
        # --resume only where the part recorded a run: a shard lost before that (its node gone while it read the
        # streams) has nothing to resume, and --resume refuses a directory without a run.
        by_hand = "; ".join(
            f"ceb grid {config} --shard {f.shard} --out {f.part}" + (" --resume" if RunDir(f.part).started else "")
            for f in result.failed
        )
        parts = " ".join(str(RunDir(target).part(i, result.count).path) for i in range(result.count))
        err.print(
            f"error: shard{'s' if len(result.failed) > 1 else ''} {names} failed after {retries} retries; every "
            f"finished step is kept in {target}/{RunDir.PARTS}. Continue with {again}, or by hand: {by_hand}; then "
            f"ceb merge {parts} --out {target}",
            soft_wrap=True,
        )
        raise typer.Exit(EXIT_FAILED)
    resumed = [str(d.shard) for d in result.done if d.resumed]
    out.print(
        f"{result.count} shards on {result.cpus} CPUs; "
        + (f"resumed after a lost worker or --resume: {', '.join(resumed)}" if resumed else "no shard was resumed")
    )
    assert result.merged is not None
    report_merged(result.merged)
