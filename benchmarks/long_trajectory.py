"""One very long trajectory through ``ceb score`` (issue 24 item 8): seconds per step against its length.

The workload is synthetic and the worst case for anything that compares a step with the earlier ones: one
shell trajectory of ``N`` steps whose actions are all different (``cat /testbed/dir<t % 97>/file<t>.txt``), each
with a one-line output, scored by the default methods (``ceb`` and ``static``) with the default ``offline``
backend. Each size is scored by ``ceb score`` in a fresh child process of this interpreter, timed around the
command inside the child (imports excluded); the same child first scores a 10-step trajectory twice (the first run
loads the modules imported lazily), and the second run's time (opening the run directory, config, metrics) is
subtracted, so the figure is ``(T(N) - T(10)) / (N - 10)`` seconds per step, each time the least of
:func:`repeats_for` runs (20 up to 1,000 steps, 2 at 10,000). Per-step work that is bounded gives a ratio to the
100-step figure near 1; a quadratic part gives a ratio that grows with ``N``.

``--before CHECKOUT`` times the same files with another checkout's ``ceb`` in the same run (its commit is
recorded), e.g. ``/work/main`` before the fix.

Measured: ``benchmarks/results/long-trajectory-20261127T142712Z.json`` and ``long-trajectory-20261127T140430Z.json``
at commit ``c1121a9``, as docs/performance.md cites them. It proved the fix once, so it lives in the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results

__all__ = ["main", "time_sizes", "write_trajectory"]

_HELP = """Seconds per step of one N-step trajectory through `ceb score` (offline backend), and the ratio to N=100.

    python benchmarks/long_trajectory.py --sizes 100 1000 10000 20000 --before /work/main

Prints a Markdown table and writes ``long-trajectory-<UTC timestamp>.json``.
"""

# Run in the child: score each file with `ceb score`, timing the command alone (the imports come first).
_CHILD = """
import json, sys, tempfile, time
from ceb.cli import app
out = []
for path in sys.argv[1:]:
    with tempfile.TemporaryDirectory() as tmp:
        began = time.perf_counter()
        try:
            app(["score", path, "--out", tmp + "/run"], prog_name="ceb")
        except SystemExit as exc:
            if exc.code:
                raise
        out.append(time.perf_counter() - began)
print(json.dumps({"seconds": out, "ceb": __import__("ceb").__file__}))
"""


_BASE = 10
"""Steps of the base trajectory whose run is subtracted."""


def repeats_for(steps: int) -> int:
    """Runs of one size (the least is taken): 20 up to 1,000 steps, whose run lasts a fraction of a second.

    Then fewer as the runs lengthen: 2 at 10,000 steps, 1 from 20,000.
    """
    return max(1, min(20, 20_000 // steps))


def write_trajectory(path: Path, steps: int) -> Path:
    """Write a stream of one shell trajectory of ``steps`` steps, every action different; returns ``path``."""
    rows = []
    previous = ""
    for t in range(steps):
        output = f"line {t}: contents of file {t}\n"
        rows.append(
            {
                "state": previous,
                "action": f"cat /testbed/dir{t % 97}/file{t}.txt",
                "observation": output,
                "label": t % 2,
            }
        )
        previous = output
    doc = {"id": f"long-{steps}", "task": "read every file", "domain": "shell", "steps": rows}
    path.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return path


def time_sizes(
    sizes: Sequence[int], work: Path, checkout: Path | None = None, repeats: int | None = None
) -> dict[int, float]:
    """Seconds per step of ``ceb score`` on one trajectory of each size (see the module docstring).

    Args:
        sizes: Trajectory lengths, each > 1.
        work: A folder for the stream files.
        checkout: Run another checkout's ``ceb`` (put first on ``PYTHONPATH``); ``None``: this one.
        repeats: Runs per size; ``None``: :func:`repeats_for`.

    Raises:
        RuntimeError: A child run failed (its stderr's tail in the message).
    """
    # The base run has both labels, like every size, so the metrics' fixed cost (AUROC needs two classes) is in it.
    one = write_trajectory(work / f"steps-{_BASE}.jsonl", _BASE)
    out: dict[int, float] = {}
    for n in sizes:
        path = work / f"steps-{n}.jsonl"
        if not path.exists():
            write_trajectory(path, n)
        # The child imports ceb from `root` alone: run from `work`, since `python -c` puts its working folder first.
        root = checkout if checkout is not None else Path(__file__).resolve().parents[1]  # holds ceb/
        env = dict(os.environ, PYTHONPATH=str(root))
        runs_of_n = repeats or repeats_for(n)
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(one), *[str(p) for _ in range(runs_of_n) for p in (one, path)]],
            capture_output=True,
            text=True,
            env=env,
            cwd=work,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"ceb score on {n} steps failed: {proc.stderr[-2000:]}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        if not Path(got["ceb"]).resolve().is_relative_to(root.resolve()):
            raise RuntimeError(f"the child imported {got['ceb']}, not the ceb of {root}")
        runs = got["seconds"][1:]  # the first run loads what is imported lazily
        # The least of the repeats: what other jobs on a shared machine add is never negative.
        total = min(runs[1::2])
        out[n] = (total - min(runs[0::2])) / (n - _BASE)
        who = f" ({checkout})" if checkout is not None else ""
        print(f"{n:>7,} steps{who}: {total:.2f} s, {out[n] * 1e3:.3f} ms per step", file=sys.stderr, flush=True)
    return out


def _commit(checkout: Path) -> str:
    proc = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: seconds per step by trajectory length, now and (``--before``) before."""
    ap = bench_parser("long-trajectory", _HELP, prog="python benchmarks/long_trajectory.py")
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000, 20000], help="trajectory lengths")
    ap.add_argument("--before", type=Path, help="another checkout to time on the same files (e.g. /work/main)")
    ap.add_argument("--before-sizes", type=int, nargs="+", help="lengths for --before (default: --sizes)")
    ap.add_argument("--repeats", type=int, help="runs per size, the least kept (default: 20 up to 1,000 steps)")
    args = ap.parse_args(argv)
    if min(args.sizes + (args.before_sizes or [])) <= _BASE:
        ap.error(f"sizes must be more than {_BASE} steps")
    with tempfile.TemporaryDirectory(prefix="ceb-long-") as tmp:
        now = time_sizes(args.sizes, Path(tmp), repeats=args.repeats)
        before_sizes = args.before_sizes or args.sizes
        before = time_sizes(before_sizes, Path(tmp), args.before, args.repeats) if args.before else {}
    ref = now[min(now)]
    ref_before = before[min(before)] if before else 0.0
    head = "| steps | ms per step | ratio to shortest |"
    rule = "| ---: | ---: | ---: |"
    if before:
        head += " before: ms per step | before: ratio to shortest |"
        rule += " ---: | ---: |"
    lines = [head, rule]
    for n in sorted(set(now) | set(before)):
        cells = [f"{n:,}"]
        cells += [f"{now[n] * 1e3:.3f}", f"{now[n] / ref:.2f}"] if n in now else ["", ""]
        if before:
            cells += [f"{before[n] * 1e3:.3f}", f"{before[n] / ref_before:.2f}"] if n in before else ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    doc: dict[str, Any] = {
        "benchmark": "long-trajectory",
        "machine": machine_info(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "seconds_per_step": {str(n): s for n, s in now.items()},
        "ratio_to_shortest": {str(n): s / ref for n, s in now.items()},
    }
    if before:
        doc["before"] = {
            "checkout": str(args.before),
            "commit": _commit(args.before),
            "seconds_per_step": {str(n): s for n, s in before.items()},
            "ratio_to_shortest": {str(n): s / ref_before for n, s in before.items()},
        }
    print(f"wrote {save_results(args.out, 'long-trajectory', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
