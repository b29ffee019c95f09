"""How fast the command line answers, here and in another checkout, in the same run (issue 35 item 5).

Times, as a user runs them (a fresh interpreter each, ``python CHECKOUT/run.py ...``):

- ``ceb --help``;
- ``ceb score nope.jsonl --out run`` (a missing input: the one-line error, exit 2);
- the README's offline run, ``ceb score streams/intercode-bash-*.jsonl --out runs/intercode-bash --overwrite``
  on the streams ``ceb convert intercode`` writes, then ``ceb report`` on it, and the report's time over the
  scoring's (the issue asks for at most about 2).

Each checkout runs its own code: ``run.py`` puts the checkout first on ``sys.path`` (so does ``PYTHONPATH``, set to
it), and the benchmark checks which ``ceb`` that imports. The two checkouts take turns within each repetition, so a
change in the machine's load falls on both. The reports of the two runs are compared file by file (they hold no
timestamp, so they should be the same bytes).

    python benchmarks/cli_latency.py --before ../before --intercode ../shared/data/intercode

prints a table of medians and new/old ratios and writes ``benchmarks/results/cli-latency-<UTC stamp>.json``
(``git -C /work/main worktree add ../before 70f55bb --detach`` makes a checkout of the old code).
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ceb.bench.machine import machine_info
from ceb.bench.result_files import save_results

HERE = Path(__file__).resolve().parents[1]
RUN = "runs/intercode-bash"
"""The README's run directory, relative to each checkout's working directory."""


class Checkout:
    """A checkout of ``ceb`` whose commands run on its own code."""

    def __init__(self, label: str, root: Path) -> None:
        self.label = label
        self.root = root.resolve()
        self.env = os.environ | {"PYTHONPATH": str(self.root), "COLUMNS": "120", "NO_COLOR": "1"}
        where = self.python("-c", "import ceb; print(ceb.__file__)", cwd=Path("/")).stdout.strip()
        if not Path(where).resolve().is_relative_to(self.root):
            raise SystemExit(f"{label}: {self.root} imports ceb from {where}, not its own code")

    def python(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=self.env, cwd=cwd)

    def ceb(self, *args: str, cwd: Path, expect: int = 0) -> float:
        """Run ``ceb ARGS`` in ``cwd``; its wall time in seconds.

        Raises:
            SystemExit: The command exited with another code than ``expect``.
        """
        started = time.perf_counter()
        done = self.python(str(self.root / "run.py"), *args, cwd=cwd)
        wall = time.perf_counter() - started
        if done.returncode != expect:
            raise SystemExit(f"{self.label}: ceb {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
        return wall

    def commit(self) -> str:
        """The checkout's commit, and whether files git tracks differ from it."""
        git = ["git", "-C", str(self.root)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        changed = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True).stdout
        return head + (" with uncommitted changes" if changed.strip() else "")


def _differing(a: Path, b: Path) -> list[str]:
    """The files of report directory ``a`` and ``b`` that are not the same bytes (or not in both)."""
    names = sorted({p.name for p in a.iterdir()} | {p.name for p in b.iterdir()})
    return [n for n in names if not ((a / n).is_file() and (b / n).is_file() and filecmp.cmp(a / n, b / n, False))]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python benchmarks/cli_latency.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (the old code)")
    parser.add_argument("--intercode", type=Path, default=HERE.parent / "shared/data/intercode", help="InterCode")
    parser.add_argument("--repeats", type=int, default=7, help="repetitions of --help and of the missing input")
    parser.add_argument("--run-repeats", type=int, default=3, help="repetitions of the offline run and its report")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"), help="results folder")
    args = parser.parse_args(argv)

    checkouts = [Checkout("before", args.before), Checkout("here", HERE)]
    load_before = os.getloadavg()
    times: dict[str, dict[str, list[float]]] = {c.label: {} for c in checkouts}
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        work = Path(tmp)
        # Each checkout works in its own directory with the same relative paths (streams/, runs/intercode-bash),
        # as the README's run does, so that the two reports, which name the run directory, can be the same bytes.
        for c in checkouts:
            (work / c.label).mkdir()
        checkouts[1].ceb("convert", "intercode", "--root", str(args.intercode.resolve()), cwd=work / "here")
        (work / "before/streams").symlink_to(work / "here/streams")
        streams = sorted(str(p.relative_to(work / "here")) for p in (work / "here/streams").glob("intercode-bash-*"))
        light = {
            "ceb --help": (("--help",), 0),
            "ceb score <missing>": (("score", "nope.jsonl", "--out", "nope-run"), 2),
        }
        for _ in range(args.repeats):
            for c in checkouts:
                for name, (command, code) in light.items():
                    times[c.label].setdefault(name, []).append(c.ceb(*command, cwd=work / c.label, expect=code))
        for _ in range(args.run_repeats):
            for c in checkouts:
                score = c.ceb("score", *streams, "--out", RUN, "--overwrite", cwd=work / c.label)
                report = c.ceb("report", RUN, cwd=work / c.label)
                times[c.label].setdefault("ceb score (README offline run)", []).append(score)
                times[c.label].setdefault("ceb report (that run)", []).append(report)
                times[c.label].setdefault("report / score", []).append(report / score)
        differing = _differing(work / "before" / RUN / "report", work / "here" / RUN / "report")
        if differing:  # kept for a look: the temporary folder goes
            kept = args.out / f"cli-latency-reports-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
            for c in checkouts:
                shutil.copytree(work / c.label / RUN / "report", kept / c.label)
            print(f"the differing report files are kept in {kept}")
        report_files = len(list((work / "here" / RUN / "report").iterdir()))
    load_after = os.getloadavg()

    medians = {label: {name: statistics.median(v) for name, v in by.items()} for label, by in times.items()}
    print(f"\nmedian of {args.repeats} (--help, missing input) and {args.run_repeats} (run, report) runs, seconds")
    print(f"load average (1, 5, 15 min): {load_before} before, {load_after} after\n")
    print("| command | before | here | here / before |")
    print("|---|---:|---:|---:|")
    for name in medians["here"]:
        old, new = medians["before"][name], medians["here"][name]
        print(f"| {name} | {old:.2f} | {new:.2f} | {new / old:.2f} |")
    same = "the same bytes" if not differing else f"{len(differing)} differ: {', '.join(differing)}"
    print(f"\nreport files ({report_files}) of the two checkouts: {same}")
    doc: dict[str, Any] = {
        "checkouts": {c.label: {"path": str(c.root), "commit": c.commit()} for c in checkouts},
        "repeats": args.repeats,
        "run_repeats": args.run_repeats,
        "streams": streams,
        "load_average": {"before": load_before, "after": load_after},
        "seconds": times,
        "median_seconds": medians,
        "ratio_here_over_before": {n: medians["here"][n] / medians["before"][n] for n in medians["here"]},
        "report_files": report_files,
        "report_files_differing": differing,
        "machine": machine_info(),
    }
    print(f"\nwritten: {save_results(args.out, 'cli-latency', doc)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
