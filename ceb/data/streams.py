"""Stream names: how ``ceb score`` arguments and a grid's ``streams`` list name their streams.

For each spec: ``NAME=FILES`` names the stream ``NAME`` (:data:`STREAM_NAME`) unless the whole spec is a file;
one existing file is that file even with ``+`` or ``=`` in its name; else ``a.jsonl+b.jsonl`` joins files;
else (grids only) a glob gives a stream per file. Unnamed streams take their files' stems joined by ``+``. Two
specs giving one name are refused, both named. :func:`check_streams` is the one check of what a run scores,
whoever built it (``ceb score``, a grid, the notebook API).
"""

from __future__ import annotations

import glob
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ceb.data.trajectory import Trajectory
from ceb.errors import ConfigError, DataError, Problem

__all__ = ["STREAM_NAME", "check_stream_name", "check_streams", "parse_stream_specs"]

STREAM_NAME = re.compile(r"(?!\.\.?\Z)[\w.+=-]{1,128}")
"""1 to 128 letters, digits, ``_ . + = -``, not ``.`` or ``..``: part of bank file names and result rows."""

_RULE = "1 to 128 letters, digits, '_', '.', '+', '=', '-'"


def check_stream_name(name: object, what: str = "stream") -> str:
    """``name``, when it is a :data:`STREAM_NAME`; ``what`` names its origin in the message.

    Raises:
        ConfigError: It is not.
    """
    if not isinstance(name, str) or not STREAM_NAME.fullmatch(name):
        raise ConfigError(f"{what} name {name!r} cannot name a stream: a stream name is {_RULE}")
    return name


def check_streams(streams: Mapping[str, Sequence[Trajectory]]) -> None:
    """Refuse a name that is no :data:`STREAM_NAME`, or an id twice in a stream.

    Raises:
        ConfigError: A bad name.
        DataError: A repeated id (names the stream, the id and both places).
    """
    for name, trajectories in streams.items():
        check_stream_name(name)
        seen: dict[str, int] = {}
        for i, traj in enumerate(trajectories):
            first = seen.setdefault(traj.id, i)
            if first != i:
                there = trajectories[first].source or f"trajectory {first}"
                where, _, line = (traj.source or f"<stream {name}>:{i + 1}").rpartition(":")
                raise DataError(
                    Problem(
                        where,
                        int(line) if line.isdigit() else 0,
                        "id",
                        f"duplicate id {traj.id!r} in stream {name!r}: first at {there}",
                        traj.id,
                    )
                )


def _files(spec: str, base: Path, *, globs: bool, what: str) -> list[list[Path]]:
    """The file groups (one per stream) of a spec without ``NAME=``."""
    whole = base / spec
    if whole.is_file():
        return [[whole]]
    parts = spec.split("+")
    if len(parts) > 1:
        missing = [p for p in parts if not (base / p).is_file()]
        if missing:
            raise ConfigError(f"{what} {spec!r}: no such file, and {missing[0]!r} of its '+'-joined parts is none")
        return [[base / p for p in parts]]
    if globs and glob.has_magic(spec):
        matched = sorted(glob.glob(str(whole)))
        if not matched:
            raise ConfigError(f"{what} {spec!r} matches no file (relative to {base})")
        return [[Path(m)] for m in matched]
    return [[whole]]  # the reader names it when it is missing


def parse_stream_specs(
    specs: Sequence[object], *, base: Path | None = None, globs: bool = False, what: str = "stream"
) -> dict[str, list[Path]]:
    """Stream name -> its files, in order, by this module's rule.

    ``specs`` are command-line arguments or a grid's ``streams``; relative paths are read from ``base`` (a grid
    file's folder); ``globs`` expands patterns (grids: the shell does it for the command line); ``what`` names a
    spec in messages (``"grid stream"``).

    Raises:
        ConfigError: A non-string spec, a bad ``NAME``, no such file, or two specs with one name.
    """
    root = base if base is not None else Path()
    streams: dict[str, list[Path]] = {}
    given: dict[str, str] = {}
    for spec in specs:
        if not isinstance(spec, str) or not spec:
            raise ConfigError(f"{what} {spec!r} is not a file name (give paths as strings)")
        name, eq, rest = spec.partition("=")
        explicit = bool(eq) and not (root / spec).is_file()
        if explicit:
            check_stream_name(name, f"{what} {spec!r}: the")
        groups = _files(rest if explicit else spec, root, globs=globs, what=what)
        for files in groups:
            key = name if explicit else "+".join(f.stem for f in files)
            if explicit and len(groups) > 1:
                key = f"{name}.{files[0].stem}"
            if not explicit and not STREAM_NAME.fullmatch(key):
                raise ConfigError(
                    f"{what} {spec!r}: its files name it {key!r}, but a stream name is {_RULE}; name it with NAME=path"
                )
            shown = "+".join(str(f) for f in files)
            if key in streams:
                raise ConfigError(
                    f"{what}s {given[key]} and {shown} are both named {key!r}; tell them apart with NAME=path, "
                    f"e.g. {key}-2={shown}"
                )
            streams[key] = files
            given[key] = shown
    return streams
