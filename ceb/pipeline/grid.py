"""Grid runs: methods x streams x orders x critics (x V/k sweep cells) in one process, one run directory.

A grid file is a run configuration (:class:`~ceb.config.RunConfig`, TOML or JSON) plus a ``[grid]`` table::

    methods = ["ceb", "static", "ptrue", "ceb-positives-only"]
    orders = 3

    [grid]
    streams = ["streams/intercode-bash-*.jsonl"]   # paths, globs, "a.jsonl+b.jsonl" (one stream), "NAME=path"
    out = "runs/grid-bash"
    sweep_votes = [1, 2, 3, 5]                     # optional: adds ceb-V<v>-k<k> for every pair
    sweep_k = [1, 2, 3, 5]

    [[critics]]                                    # optional critic axis
    name = "qwen"
    base_url = "http://127.0.0.1:8000/v1"
    model = "Qwen/Qwen3-32B"

All lanes share one scheduler and one ``scores.jsonl`` (one row per step per method). :func:`resolve_grid` is what
``ceb grid`` runs.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ceb.config import RunConfig, load_config, merge_settings, read_settings_file
from ceb.data.streams import parse_stream_specs
from ceb.errors import ConfigError
from ceb.pipeline.ray_launch import recorded_plan
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.shard import Shard
from ceb.stages.methods import sweep_methods

__all__ = ["GridSpec", "load_grid", "pick_streams", "resolve_grid"]


@dataclass(frozen=True, slots=True)
class GridSpec:
    """A loaded grid file: ``config`` with the sweep cells expanded, ``streams`` (name -> files), ``out``."""

    config: RunConfig
    streams: dict[str, list[Path]]
    out: Path


def load_grid(path: str | Path, overrides: dict[str, Any] | None = None) -> GridSpec:
    """Read a grid file; paths in it are relative to the file's folder.

    Raises:
        ConfigError: Unreadable file, no ``[grid]`` table, no streams, or a bad setting (named).
    """
    p = Path(path)
    data = read_settings_file(p, "grid file")
    if not isinstance(data.get("grid"), dict):
        raise ConfigError(f"grid file {p}: needs a [grid] table with streams and out")
    grid = data.pop("grid")
    unknown = set(grid) - {"streams", "out", "sweep_votes", "sweep_k"}
    if unknown:
        raise ConfigError(f"grid file {p}: unknown [grid] keys {sorted(unknown)}")
    if not grid.get("streams") or not grid.get("out"):
        raise ConfigError(f"grid file {p}: [grid] needs streams (a list) and out (a directory)")
    if not isinstance(grid["streams"], list) or not isinstance(grid["out"], str):
        raise ConfigError(f"grid file {p}: [grid] streams must be a list of paths and out a directory (a string)")
    if bool(grid.get("sweep_votes")) != bool(grid.get("sweep_k")):
        given, missing = ("sweep_votes", "sweep_k") if grid.get("sweep_votes") else ("sweep_k", "sweep_votes")
        raise ConfigError(
            f"grid file {p}: {given} without {missing} adds no cell (the sweep is every (V, k) pair); "
            f"give both, e.g. sweep_votes = [1, 3, 5] and sweep_k = [1, 2]"
        )
    cells = sweep_methods(grid.get("sweep_votes", []), grid.get("sweep_k", []))
    methods = list(data.get("methods", RunConfig().methods))
    data["methods"] = methods + [m for m in cells if m not in methods]
    config = load_config(None, merge_settings(data, overrides or {}))
    # Each spec is a path, a glob, ``a.jsonl+b.jsonl`` or ``NAME=path`` (ceb.data.streams), relative to the file.
    streams = parse_stream_specs(grid["streams"], base=p.parent, globs=True, what=f"grid file {p}: stream")
    return GridSpec(config=config, streams=streams, out=p.parent / grid["out"])


def pick_streams(
    streams: Mapping[str, list[Path]], patterns: Sequence[str], *, recorded: bool = False
) -> dict[str, list[Path]]:
    """The streams of a grid (in grid order) whose names match any of ``patterns`` (:mod:`fnmatch`).

    Raises:
        ConfigError: A pattern matches no stream (lists the grid's; ``recorded`` says they came from a run).
    """
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in streams):
            what = "the run's recorded stream" if recorded else "--streams"
            raise ConfigError(
                f"{what} {pattern!r} matches no stream of the grid; its streams are: {', '.join(streams)}"
            )
    return {name: files for name, files in streams.items() if any(fnmatch.fnmatchcase(name, p) for p in patterns)}


def resolve_grid(
    path: str | Path,
    *,
    out: Path | None = None,
    streams: Sequence[str] | None = None,
    limit: int | None = None,
    resume: bool = False,
    shard: Shard | None = None,
    ray: bool = False,
) -> GridSpec:
    """The grid a ``ceb grid`` run scores: :func:`load_grid` with the command's choices applied.

    ``out`` replaces the run directory (shard ``i/N`` else goes to ``OUT-shard<i>of<N>``); ``streams`` are names or
    patterns; ``limit`` trajectories per stream. A resume keeps the recorded streams and limit (``ray``: its parts').

    Raises:
        ConfigError: As :func:`load_grid`, a pattern or recorded stream matching none, or an unreadable record.
        RunError: A resume without a run there, or over parts of several launches.
    """
    spec = load_grid(path, {"max_trajectories": limit})
    target = out if out is not None else spec.out
    if out is None and shard is not None and not ray:
        target = spec.out.with_name(f"{spec.out.name}-shard{shard.index}of{shard.count}")
    run = RunDir(target)
    plan = recorded_plan(target) if resume and ray else None  # the parts' shard count and streams
    if resume and not ray:
        run.require_run()  # before the streams are read and the grid is announced
    picked = spec.streams
    if streams is not None:
        picked = pick_streams(spec.streams, streams)
    elif plan is not None:
        picked = pick_streams(spec.streams, plan[1], recorded=True)
    elif resume and not ray and (recorded := run.recorded_streams()):
        picked = pick_streams(spec.streams, recorded, recorded=True)
    config = spec.config
    if resume and limit is None and (plan is not None or not ray):
        source = run.parts()[0] if ray else run
        config = config.model_copy(update={"max_trajectories": source.recorded_config().max_trajectories})
    return GridSpec(config=config, streams=picked, out=target)
