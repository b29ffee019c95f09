"""What the installed benchmarks' command lines share: their parser, the user's server, where data and results go.

Every tool runs from an installed ``ceb`` (``ceb bench NAME``) against the user's own endpoint (``--base-url`` and
``--model``) or the simulator: results go to ``benchmarks/results`` under the working directory unless ``--out``
says otherwise, and the InterCode data is read from ``$CEB_SHARED/data/intercode`` (by default ``../shared``
beside the checkout, or beside the working directory outside one). Starting the tests' CPU vLLM server is the
checkout's business (``python benchmarks/tiny_vllm.py``), never an installed module's.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results
from ceb.data import Trajectory, convert_intercode, read_stream
from ceb.logs import configure_logging

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "RESULTS",
    "add_server_options",
    "bench_parser",
    "default_intercode",
    "load_intercode_streams",
    "run_and_save",
]

RESULTS = Path("benchmarks") / "results"
"""Where results go by default, relative to the working directory (:func:`ceb.bench.result_files.save_results`)."""


def default_intercode() -> Path:
    """``$CEB_SHARED/data/intercode``; without ``CEB_SHARED``, ``../shared`` beside the checkout or the working dir."""
    shared = os.environ.get("CEB_SHARED")
    if shared:
        return Path(shared) / "data" / "intercode"
    root = Path(__file__).resolve().parents[2]
    beside = root if (root / "pyproject.toml").is_file() else Path.cwd()
    return beside.parent / "shared" / "data" / "intercode"


def load_intercode_streams(
    root: Path, work: Path, datasets: Sequence[str] = ("bash", "sql")
) -> dict[str, list[Trajectory]]:
    """Convert the real InterCode results into ``work`` and read every stream back (name -> trajectories)."""
    converted = convert_intercode(root, work, datasets=tuple(datasets))
    return {c.path.stem: read_stream([c.path]) for c in converted}


def bench_parser(
    name: str, doc: str | None, *, sim_port: bool = False, prog: str | None = None
) -> argparse.ArgumentParser:
    """The parser of ``ceb bench <name>``, with ``doc`` as its description and the ``--intercode``/``--out`` options.

    Args:
        name: The benchmark's registered name (:data:`ceb.bench.registry.BENCHMARKS`).
        doc: What it measures and an example command.
        sim_port: Also ``--port``, the simulated server's port (0: a free one).
        prog: The command shown in usage (default ``ceb bench <name>``; a checkout script's ``python benchmarks/...``).
    """
    ap = argparse.ArgumentParser(
        prog=prog or f"ceb bench {name}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--intercode", type=Path, default=default_intercode(), help="InterCode data root")
    ap.add_argument(
        "--out", type=Path, default=RESULTS, help="directory for the results (default: ./benchmarks/results)"
    )
    if sim_port:
        ap.add_argument("--port", type=int, default=0, help="the simulator's port on 127.0.0.1 (0: a free one)")
    return ap


def add_server_options(ap: argparse.ArgumentParser) -> None:
    """``--base-url`` (a running OpenAI-compatible server's API root) and ``--model`` (its served name), required."""
    ap.add_argument("--base-url", required=True, help="the server's API root, e.g. http://127.0.0.1:8000/v1")
    ap.add_argument("--model", required=True, help="the served model name")


def run_and_save(
    kind: str,
    bench: Callable[[argparse.Namespace, Path], Awaitable[DataclassInstance | Mapping[str, Any]]],
    args: argparse.Namespace,
    *,
    machine: Mapping[str, Any] | None = None,
) -> int:
    """Run ``bench(args, work)`` in a temporary ``work`` folder, add the machine, save it as ``<kind>-<UTC>.json``.

    Args:
        kind: The results file's prefix (:func:`ceb.bench.result_files.save_results`), e.g. ``early-score``.
        bench: The async benchmark; returns its result record (a frozen dataclass).
        args: The parsed command line (``args.out``: the results folder).
        machine: The ``machine`` entry; by default :func:`~ceb.bench.machine.machine_info`.

    Returns:
        0 (the exit status).
    """
    configure_logging("error")
    with tempfile.TemporaryDirectory() as tmp:
        result = anyio.run(bench, args, Path(tmp))
    print(f"\nwrote {save_results(args.out, kind, result, machine if machine is not None else machine_info())}")
    return 0
