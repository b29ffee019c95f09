"""Requests of a multi-order grid with and without ``reuse_bank_free``, against the SIMULATED server.

The workload is a grid file (by default ``configs/grid-intercode-bash.toml``: every method of the paper, its
V / k sweep cells included, in ``R = 3`` stream orders) on the real InterCode-Bash streams, each cut to its first
``N`` trajectories (the orders permute those ``N``, as the paper's grid permutes whole streams). The grid file is
read as ``ceb grid`` reads it (:func:`~ceb.pipeline.grid.load_grid`, its stream globs over the cut streams), with
the backend pointed at the simulator. It is scored twice through the `openai` backend against one simulator (a
SIMULATOR, not a model; replies are a function of the prompt, so both runs get the same answers): every order
asked (``reuse_bank_free = false``, the behaviour before), then bank-free methods asked once per stream and
copied to the other orders (the default). It reports the requests of each run in total and per method (from the
rows' ``requests``; the client's attempt count beside them), the ratio, the wall times, and whether every row's
score and every metric came out the same.

Measured: ``benchmarks/results/reuse-20261123T145826Z.json`` at commit ``a888108``, as docs/methods.md cites it.
It proved ``reuse_bank_free`` once, so it lives in the checkout.
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bench.machine import machine_info
from ceb.bench.processes import sim_process
from ceb.bench.result_files import save_results
from ceb.bench.scale import timed_scoring
from ceb.config import RunConfig
from ceb.data import Trajectory, convert_intercode, read_stream, write_stream
from ceb.eval import run_metrics
from ceb.logs import configure_logging
from ceb.pipeline import read_rows
from ceb.pipeline.grid import load_grid
from ceb.pipeline.rundir import RunDir
from ceb.sim import SimConfig
from ceb.stages.methods import resolve_method

__all__ = ["main", "run_reuse_bench"]

ARMS = {"every_order_asked": False, "bank_free_reused": True}
"""Run name -> ``reuse_bank_free``, in the order they run."""


def _config(grid: Path, url: str, sim: SimConfig, *, orders: int | None, reuse: bool, skip: Sequence[str]) -> RunConfig:
    spec = load_grid(grid)
    overrides: dict[str, Any] = {
        "backend": {"name": "openai", "base_url": url, "model": sim.model, "max_concurrency": sim.max_num_seqs},
        "methods": [m for m in spec.config.methods if m not in skip],
        "orders": orders or spec.config.orders,
        "reuse_bank_free": reuse,
        "allow_unavailable": True,
        "critic": {"count_tokens": False},  # changes no request; spares the shared CPU
    }
    return load_grid(grid, overrides).config


def _grid_workload(
    intercode: Path, work: Path, grid: Path, trajectories: int
) -> tuple[Path, dict[str, list[Trajectory]]]:
    """Cut InterCode-Bash streams where ``grid``'s stream globs find them; the grid's copy and its streams."""
    converted = convert_intercode(intercode, work / "converted", datasets=("bash",))
    (work / "streams").mkdir(parents=True, exist_ok=True)
    for c in converted:
        write_stream(work / "streams" / c.path.name, read_stream([c.path])[:trajectories])
    copy = work / "grid" / grid.name  # the grid files name their streams as ../streams/...
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes(grid.read_bytes())
    return copy, {name: read_stream(files) for name, files in load_grid(copy).streams.items()}


async def _run(
    streams: Mapping[str, Sequence[Trajectory]], config: RunConfig, out: Path
) -> tuple[float, int, dict[str, Any]]:
    wall_s, attempts, summary = await timed_scoring(streams, config, out)
    counts = {"requests": summary.requests, "steps_scored": summary.steps_scored, "steps_reused": summary.steps_reused}
    counts |= {"steps_failed": summary.steps_failed, "steps_unavailable": summary.steps_unavailable}
    return wall_s, len(attempts), counts


def _requests_by_method(run_dir: Path) -> dict[str, int]:
    out: Counter[str] = Counter()
    for path in (RunDir(run_dir).scores, RunDir(run_dir).hindsight):
        for r in read_rows(path):
            out[r["method"]] += r["requests"]
    return dict(sorted(out.items()))


def _scores(run_dir: Path) -> dict[tuple[Any, ...], Any]:
    return {
        (r["stream"], r["order"], r["method"], r["critic"], r["trajectory"], r["step"]): (r["score"], r["error"])
        for r in read_rows(RunDir(run_dir).scores)
    }


def run_reuse_bench(
    intercode: Path,
    work: Path,
    *,
    grid: Path,
    trajectories: int = 4,
    orders: int | None = None,
    skip: Sequence[str] = (),
    sim: SimConfig | None = None,
    port: int | None = None,
) -> dict[str, Any]:
    """Score ``grid`` on InterCode-Bash streams cut to ``trajectories`` each, reuse off then on; compare.

    Args:
        intercode: The InterCode data root (``ceb convert intercode``'s input).
        work: Scratch directory for the streams and the two run directories.
        grid: The grid file run (methods, sweep cells, orders, streams globs ``../streams/intercode-bash-*``).
        trajectories: Trajectories kept from the start of each stream.
        orders: Stream orders ``R``; the grid's when ``None``.
        skip: Methods of the grid left out (e.g. ``ceb-dense-retrieval`` where its model cannot be loaded).
        sim: The simulator's load model; an instant one (``time_scale = 0``) when ``None``.
        port: The simulator's port; ``None`` takes a free one.

    Returns:
        Both runs' requests (total and per method), attempts, row counts and wall times, the ratio of requests,
        and whether scores and metrics are identical (JSON-ready).
    """
    sim = sim or SimConfig(max_num_seqs=128, time_scale=0.0)
    copy, streams = _grid_workload(intercode, work, grid, trajectories)
    runs: dict[str, Any] = {}
    with sim_process(sim, port=port) as url:
        for name, reuse in ARMS.items():
            config = _config(copy, url, sim, orders=orders, reuse=reuse, skip=skip)
            wall, attempts, counts = anyio.run(_run, streams, config, work / name)
            runs[name] = {"wall_s": wall, "attempts": attempts, **counts}
            runs[name]["requests_by_method"] = _requests_by_method(work / name)
    off, on = runs["every_order_asked"], runs["bank_free_reused"]
    bank_free = sorted(m for m in off["requests_by_method"] if resolve_method(m).order_free)
    return {
        "grid": str(grid),
        "orders": config.orders,
        "methods": list(off["requests_by_method"]),
        "bank_free_methods": bank_free,
        "skipped_methods": list(skip),
        "workload": {
            "streams": len(streams),
            "trajectories": sum(len(t) for t in streams.values()),
            "steps": sum(len(t.steps) for trajs in streams.values() for t in trajs),
        },
        "sim": {"max_num_seqs": sim.max_num_seqs, "time_scale": sim.time_scale, "seed": sim.seed},
        **runs,
        "requests_saved": off["requests"] - on["requests"],
        "ratio_requests_off_over_on": off["requests"] / on["requests"] if on["requests"] else None,
        "bank_free_requests": {
            "every_order_asked": sum(off["requests_by_method"][m] for m in bank_free),
            "bank_free_reused": sum(on["requests_by_method"][m] for m in bank_free),
        },
        "identical_scores": _scores(work / "every_order_asked") == _scores(work / "bank_free_reused"),
        "identical_metrics": run_metrics(work / "every_order_asked") == run_metrics(work / "bank_free_reused"),
    }


# --- command line: python benchmarks/reuse.py -------------------------------------------------------------------------

_HELP = """Requests of the paper's grid (3 orders, every method) on the SIMULATED server, with the bank-free methods
asked in every order, then scored once and copied.

    python benchmarks/reuse.py --trajectories 4

Prints both runs' requests and whether scores and metrics are identical; writes ``reuse-<UTC>.json`` with the
settings and the machine (see ``benchmarks/reuse.py``).
"""


def _default_grid() -> Path:
    return Path(__file__).resolve().parents[1] / "configs" / "grid-intercode-bash.toml"


def main(argv: Sequence[str] | None = None) -> int:
    """``python benchmarks/reuse.py``: :func:`run_reuse_bench` on the paper's grid (``--help`` lists options)."""
    ap = bench_parser("reuse", _HELP, prog="python benchmarks/reuse.py", sim_port=True)
    ap.add_argument("--trajectories", type=int, default=30, help="trajectories kept per stream")
    ap.add_argument(
        "--grid",
        type=Path,
        default=_default_grid(),
        help="the grid file run (default: configs/ of the checkout)",
    )
    ap.add_argument(
        "--skip",
        default="ceb-dense-retrieval",
        help="methods of the grid left out, comma-separated (dense retrieval needs its embedding model)",
    )
    args = ap.parse_args(argv)
    configure_logging("error")
    skip = [m.strip() for m in args.skip.split(",") if m.strip()]
    with tempfile.TemporaryDirectory() as tmp:
        result = run_reuse_bench(
            args.intercode, Path(tmp), grid=args.grid, trajectories=args.trajectories, skip=skip, port=args.port or None
        )
    doc = {"benchmark": "reuse", "shared_machine": True, **result, "machine": machine_info()}
    for name in ("every_order_asked", "bank_free_reused"):
        r = result[name]
        print(
            f"{name}: {r['requests']} requests ({r['attempts']} attempts), {r['steps_scored']} steps asked, "
            f"{r['steps_reused']} copied, {r['steps_unavailable']} not available, {r['wall_s']:.1f} s"
        )
    bf = result["bank_free_requests"]
    print(
        f"{len(result['methods'])} methods x {result['orders']} orders on {result['workload']}; bank-free "
        f"methods {bf['every_order_asked']} -> {bf['bank_free_reused']} requests; all methods "
        f"ratio {result['ratio_requests_off_over_on']:.3f}x; identical scores {result['identical_scores']}, "
        f"identical metrics {result['identical_metrics']}"
    )
    print(f"saved {save_results(args.out, 'reuse', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
