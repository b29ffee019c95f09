"""The checkout scripts' command line: argparse with the ``--intercode`` and ``--out`` every script takes.

The installed ``ceb bench`` tools make their options from their settings (:mod:`ceb.cli.bench`); these proof
scripts keep a plain parser of their own.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ceb.bench.options import RESULTS, default_intercode


def bench_parser(
    name: str, doc: str | None, *, sim_port: bool = False, prog: str | None = None
) -> argparse.ArgumentParser:
    """The parser of script ``name`` with ``doc`` as its description, ``--intercode``, ``--out`` (and ``--port``)."""
    ap = argparse.ArgumentParser(
        prog=prog or f"python benchmarks/{name}.py",
        description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--intercode", type=Path, default=default_intercode(), help="InterCode data root")
    ap.add_argument(
        "--out", type=Path, default=RESULTS, help="directory for the results (default: ./benchmarks/results)"
    )
    if sim_port:
        ap.add_argument("--port", type=int, default=0, help="the simulator's port on 127.0.0.1 (0: a free one)")
    return ap
