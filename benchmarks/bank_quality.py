"""Bounded banks, quality: offline CEB's calibration under each bank setting (issue 15, part 2).

A bank :class:`~ceb.bench.bank_policies.Setting` is a policy, a cap and compression; :func:`quality_settings` is the
grid of them.

Offline CEB (:mod:`ceb.stages.offline`: a retrieval-only critic and a rule-based hindsight labeler,
*not* a language model) scores a stream through the real pipeline (:func:`ceb.pipeline.run_scoring`, method
``ceb``) once per bank setting; the metrics are the project's main-table rows
(:func:`ceb.eval.calibration.metric_rows`: ECE with 10 equal-width bins, Brier, AUROC, and 95% percentile
bootstrap intervals resampling trajectories). Every saved bank is read back to check that the cap held, at the
end and at every step (the rows' ``bank_size``). The figures are the offline stand-in's, not an LLM critic's.

Measured: ``benchmarks/results/bank-policies-20261123T115851Z.json`` and ``.png`` (its quality part; commit
``1f9131a``), as docs/config-usage.md cites them, when this was the quality part of ``ceb bench bank-policies``. It
answers issue 15's question once, with the offline stand-in on InterCode, so it lives in the checkout.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's ceb, not another install's

from benchmarks._cli import bench_parser
from ceb.bench.bank_policies import Policy, Setting
from ceb.bench.machine import machine_info
from ceb.bench.processes import run_fresh_many
from ceb.bench.result_files import save_results
from ceb.config import load_config
from ceb.data import Trajectory, convert_intercode, read_stream
from ceb.eval.calibration import MetricRow, metric_rows
from ceb.eval.lanes import POOLED, lanes_from_rows
from ceb.logs import configure_logging
from ceb.pipeline import read_step_rows, run_scoring
from ceb.pipeline.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]

__all__ = [
    "OFFLINE_NOTE",
    "BankCheck",
    "binds",
    "within_cap",
    "QualityResult",
    "QualityRow",
    "format_quality_table",
    "format_stream_table",
    "main",
    "quality_settings",
    "quality_worker",
    "run_quality",
]

OFFLINE_NOTE = (
    "These are the offline stand-in's figures: the default offline backend is NOT a language model (a "
    "retrieval-only critic and a rule-based hindsight labeler, ceb/stages/offline.py). They show what bounding "
    "the bank does to that estimator on real streams, not what it does to an LLM critic."
)
"""The plain statement every report of the quality figures carries."""


def _ci(value: float | None, low: float | None, high: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if low is None or high is None:
        return f"{value:.{digits}f}"
    return f"{value:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def format_quality_table(results: Sequence[QualityResult]) -> str:
    """Markdown: one row per (stream set, setting), the pooled (or only) stream's metrics with 95% intervals."""
    head = (
        "| streams | bank | held at end, all lanes (most any step saw) | steps | ECE [95% CI] | Brier [95% CI] "
        "| AUROC [95% CI] | run s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for res in results:
        r = res.headline
        held = sum(b.records for b in res.banks)
        seen = max((b.max_seen for b in res.banks), default=0)
        lines.append(
            f"| {res.stream_set}{f' pooled over {len(res.banks)} streams' if r.stream == POOLED else ''} "
            f"| {res.setting.label} | {held:,} ({seen:,}) | {r.n:,} "
            f"| {_ci(r.ece, r.ece_low, r.ece_high)} | {_ci(r.brier, r.brier_low, r.brier_high)} "
            f"| {_ci(r.auroc, r.auroc_low, r.auroc_high)} | {res.wall_s:.0f} |"
        )
    return "\n".join(lines)


def format_stream_table(results: Sequence[QualityResult]) -> str:
    """Markdown: per stream (rows) and setting (columns), ``ECE / AUROC`` (intervals in the JSON)."""
    if not results:
        return ""
    streams = [r.stream for r in results[0].rows if r.stream != POOLED]
    head = "| stream (steps) | " + " | ".join(res.setting.label for res in results) + " |"
    lines = [head, "|" + "---|" * (len(results) + 1)]
    for name in streams:
        cells = []
        n = 0
        for res in results:
            row = next(r for r in res.rows if r.stream == name)
            n = row.n
            auroc = f"{row.auroc:.3f}" if row.auroc is not None else "n/a"
            cells.append(f"{row.ece:.3f} / {auroc}" if row.ece is not None else "n/a")
        lines.append(f"| {name} ({n:,}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def binds(setting: Setting, most_records: int) -> bool:
    """Whether ``setting`` can change a bank that would otherwise reach ``most_records`` records.

    A cap at or above that never evicts, so the run would repeat the unbounded one; compression may always merge.
    """
    if setting.compress_threshold is not None:
        return True
    if setting.cap is None:
        return setting.policy == "none"
    return (setting.cap // 2 if setting.policy == "reservoir" else setting.cap) < most_records


def within_cap(setting: Setting, records: int, positives: int) -> bool:
    """Whether a bank of ``records`` (``positives`` of them in ``B+``) respects ``setting``'s cap."""
    if setting.cap is None or setting.policy == "none":
        return True
    if setting.policy == "reservoir":
        return max(positives, records - positives) <= setting.cap // 2
    return records <= setting.cap


def quality_settings(
    caps: Iterable[int],
    policies: Iterable[Policy] = ("window", "reservoir", "usefulness"),
    *,
    compress: float | None = None,
    compress_window: int | None = None,
    most_records: int | None = None,
) -> tuple[list[Setting], list[Setting]]:
    """The grid of one stream set: unbounded, each policy at each cap, and compression.

    Args:
        caps: Caps in records (:attr:`Setting.cap`).
        policies: Eviction policies.
        compress: A compression threshold to run alone (unbounded otherwise), or ``None``.
        compress_window: With ``compress``, also run compression under a ``window`` of this many records.
        most_records: Steps of the set's longest stream: settings that cannot bind below it (:func:`binds`)
            are left out, since they would repeat the unbounded run. ``None``: keep all.

    Returns:
        ``(run, skipped)``.
    """
    grid = [Setting()]
    grid += [Setting(p, c) for p in policies for c in sorted(caps)]
    if compress is not None:
        grid.append(Setting(compress_threshold=compress))
        if compress_window is not None:
            grid.append(Setting("window", compress_window, compress))
    if most_records is None:
        return grid, []
    run = [s for s in grid if binds(s, most_records)]
    return run, [s for s in grid if s not in run]


@dataclass(frozen=True, slots=True)
class QualityRow:
    """ECE, Brier and AUROC of one stream (or the pool of a set's streams) under one setting.

    Attributes:
        stream: Stream name, or :data:`~ceb.eval.lanes.POOLED`.
        n: Steps with a score and a label.
        n_trajectories: Trajectories among them (the bootstrap's resampling units).
        ece: Equal-width ECE (10 bins); ``ece_low``/``ece_high``: its 95% percentile bootstrap interval.
        brier: Brier score, with ``brier_low``/``brier_high``.
        auroc: AUROC (``None`` with one class), with ``auroc_low``/``auroc_high``.
        failed: Steps without a score (left out).
    """

    stream: str
    n: int
    n_trajectories: int
    ece: float | None
    ece_low: float | None
    ece_high: float | None
    brier: float | None
    brier_low: float | None
    brier_high: float | None
    auroc: float | None
    auroc_low: float | None
    auroc_high: float | None
    failed: int

    @classmethod
    def of(cls, row: MetricRow) -> QualityRow:
        """Flatten a main-table row."""
        s, ci = row.summary, row.ci
        ece = ci.ece if ci is not None else None
        brier = ci.brier if ci is not None else None
        auroc = ci.auroc if ci is not None else None
        return cls(
            stream=row.stream,
            n=row.n,
            n_trajectories=row.n_trajectories,
            ece=s.ece if s is not None else None,
            ece_low=ece.low if ece is not None else None,
            ece_high=ece.high if ece is not None else None,
            brier=s.brier if s is not None else None,
            brier_low=brier.low if brier is not None else None,
            brier_high=brier.high if brier is not None else None,
            auroc=s.auroc if s is not None else None,
            auroc_low=auroc.low if auroc is not None else None,
            auroc_high=auroc.high if auroc is not None else None,
            failed=row.failed,
        )


@dataclass(frozen=True, slots=True)
class BankCheck:
    """One lane's bank, read back from the run.

    Attributes:
        stream: Stream name.
        records: Records held at the end (the saved bank).
        positives: Of them in ``B+``.
        stands_for: Records they stand for (sum of the merge counts; ``records`` without compression).
        max_seen: The largest ``|B_t|`` any step of the lane was scored with.
        within_cap: Both the saved bank and ``max_seen`` respect the cap (:func:`within_cap`; for
            ``reservoir`` ``max_seen`` is checked against ``cap``, the per-step rows not splitting classes).
    """

    stream: str
    records: int
    positives: int
    stands_for: int
    max_seen: int
    within_cap: bool


@dataclass(frozen=True, slots=True)
class QualityResult:
    """One setting on one stream set.

    Attributes:
        stream_set: ``sql`` (the SQL streams joined), ``bash`` (each bash stream, and pooled), ...
        setting: The bank setting.
        steps: Step rows written.
        wall_s: Seconds of the scoring run (not the bootstrap); noisy, the machine is shared.
        rows: Per stream, then :data:`~ceb.eval.lanes.POOLED` when the set has several streams.
        banks: Per stream.
    """

    stream_set: str
    setting: Setting
    steps: int
    wall_s: float
    rows: tuple[QualityRow, ...]
    banks: tuple[BankCheck, ...]

    @property
    def headline(self) -> QualityRow:
        """The pooled row, or the only stream's row."""
        pooled = [r for r in self.rows if r.stream == POOLED]
        return pooled[0] if pooled else self.rows[0]

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> QualityResult:
        """Inverse of :func:`dataclasses.asdict`."""
        return cls(
            doc["stream_set"],
            Setting.from_json(doc["setting"]),
            doc["steps"],
            doc["wall_s"],
            tuple(QualityRow(**r) for r in doc["rows"]),
            tuple(BankCheck(**b) for b in doc["banks"]),
        )


def run_quality(
    streams: Mapping[str, Sequence[Trajectory]],
    setting: Setting,
    run_dir: str | Path,
    *,
    stream_set: str,
    n_boot: int = 1000,
    seed: int = 0,
    max_trajectories: int | None = None,
) -> QualityResult:
    """Score ``streams`` with offline CEB under ``setting`` and aggregate as the main table does.

    Args:
        streams: Stream name -> trajectories (several files joined into one stream: one entry).
        setting: The bank setting.
        run_dir: The run's directory (results, saved banks); earlier results in it are replaced.
        stream_set: Name of the set, for the result.
        n_boot: Bootstrap replicates per row.
        seed: Bootstrap seed (every row and setting resamples the same trajectories).
        max_trajectories: Score only the first this many trajectories of each stream (tests).

    Returns:
        The metrics per stream (and pooled) and each bank, read back.

    Raises:
        AssertionError: A bank broke its cap (a bug in :mod:`ceb.bank.policy`, not a figure).
    """
    run_dir = Path(run_dir)
    k = load_config().ceb.k
    overrides = {"methods": ["ceb"], "bank": setting.bank_settings(k), "max_trajectories": max_trajectories}
    config = load_config(None, overrides)
    started = time.perf_counter()
    summary = anyio.run(partial(run_scoring, streams, config, run_dir, overwrite=True))
    wall = time.perf_counter() - started
    steps = list(read_step_rows(RunDir(run_dir).scores))
    rows = metric_rows(lanes_from_rows(steps), n_bins=config.ece_bins, n_boot=n_boot, seed=seed)
    max_seen: dict[str, int] = {}
    for s in steps:
        max_seen[s.stream] = max(max_seen.get(s.stream, 0), s.bank_size)
    banks = []
    for b in summary.banks:
        assert b.path is not None
        doc = orjson.loads((run_dir / b.path).read_bytes())
        records = len(doc["records"])
        positives = sum(r["pseudo_label"] for r in doc["records"])
        within = within_cap(setting, records, positives) and (setting.cap is None or max_seen[b.stream] <= setting.cap)
        if not within:
            raise AssertionError(f"{setting.label}: the bank of {b.stream} broke its cap ({records} records)")
        stands_for = int(sum(doc.get("counts", [1] * records)))
        banks.append(BankCheck(b.stream, records, positives, stands_for, max_seen.get(b.stream, 0), within))
    return QualityResult(
        stream_set,
        setting,
        len(steps),
        round(wall, 2),
        tuple(QualityRow.of(r) for r in _in_stream_order(rows)),
        tuple(banks),
    )


def quality_worker(spec: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`run_quality` of one JSON spec, for a fresh process (:func:`ceb.bench.processes.run_fresh`).

    Args:
        spec: ``stream_set``, ``streams`` (name -> stream file paths), ``setting`` (``asdict`` of a
            :class:`~ceb.bench.bank_quality.Setting`), ``run_dir``, ``n_boot``, ``seed``, ``max_trajectories``.

    Returns:
        ``asdict`` of the :class:`QualityResult`.
    """
    streams = {name: read_stream([Path(p) for p in paths]) for name, paths in spec["streams"].items()}
    result = run_quality(
        streams,
        Setting.from_json(spec["setting"]),
        spec["run_dir"],
        stream_set=spec["stream_set"],
        n_boot=spec["n_boot"],
        seed=spec["seed"],
        max_trajectories=spec.get("max_trajectories"),
    )
    return asdict(result)


def _in_stream_order(rows: list[MetricRow]) -> list[MetricRow]:
    """Per stream by name, then the pooled row: lanes finish in any order, and the rows must not follow it."""
    return sorted(rows, key=lambda r: (r.stream == POOLED, r.stream))


def plot(quality: Sequence[QualityResult], stem: str | Path) -> Path:
    """Draw ECE, Brier and AUROC against the cap: one line per (stream set, policy) with its 95% intervals as error
    bars; the unbounded bank and compression alone are horizontal lines (they have no cap).

    Args:
        quality: Quality results.
        stem: The file's path without ``.png``.

    Returns:
        The PNG's path (:func:`ceb.eval.plots.save_figure`).
    """
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ceb.eval.plots import save_figure

    fig = Figure(figsize=(16, 4.5), layout="constrained")
    grid = fig.subplots(1, 3, squeeze=False)
    axes: list[list[Axes]] = [list(row) for row in grid]
    colors = {"window": "tab:blue", "reservoir": "tab:orange", "usefulness": "tab:green", "none": "tab:gray"}
    styles = ["-", "--", ":", "-."]
    sets = sorted({q.stream_set for q in quality}, key=[q.stream_set for q in quality].index)
    for col, (metric, name) in enumerate((("ece", "ECE"), ("brier", "Brier"), ("auroc", "AUROC"))):
        ax = axes[0][col]
        for si, stream_set in enumerate(sets):
            mine = [q for q in quality if q.stream_set == stream_set]
            style = styles[si % len(styles)]
            for policy in ("window", "reservoir", "usefulness"):
                pts = sorted(
                    (q.setting.cap, q.headline)
                    for q in mine
                    if q.setting.policy == policy and q.setting.compress_threshold is None and q.setting.cap
                )
                pts = [(c, r) for c, r in pts if getattr(r, metric) is not None]
                if not pts:
                    continue
                xs = [c for c, _ in pts]
                ys = [getattr(r, metric) for _, r in pts]
                lo = [y - (getattr(r, f"{metric}_low") or y) for y, (_, r) in zip(ys, pts, strict=True)]
                hi = [(getattr(r, f"{metric}_high") or y) - y for y, (_, r) in zip(ys, pts, strict=True)]
                ax.errorbar(
                    xs,
                    ys,
                    yerr=[lo, hi],
                    color=colors[policy],
                    linestyle=style,
                    marker="o",
                    capsize=3,
                    label=f"{stream_set} {policy}",
                )
            for q in mine:
                if q.setting.cap is None and getattr(q.headline, metric) is not None:
                    dotted = q.setting.compress_threshold is not None
                    ax.axhline(
                        getattr(q.headline, metric),
                        color="black" if dotted else colors["none"],
                        linestyle=(0, (1, 2)) if dotted else style,
                        linewidth=1,
                        label=f"{stream_set} {q.setting.label}",
                    )
        ax.set_xscale("log")
        ax.set_xlabel("cap (records held)")
        ax.set_title(f"offline CEB {name} against the cap")
        if col == 0:
            ax.legend(fontsize=7)
    fig.suptitle("Bounded banks: the offline stand-in's calibration (NOT an LLM critic)")
    return save_figure(fig, Path(stem))[0]


def _quality(args: argparse.Namespace, tmp: Path, doc: dict[str, Any], say: Any) -> list[QualityResult]:
    streams_dir = tmp / "streams"
    converted = convert_intercode(args.intercode, streams_dir)
    paths = {c.path.stem: c.path for c in converted}
    sets: dict[str, dict[str, list[str]]] = {}
    if "sql" in args.sets:
        sets["sql"] = {"sql": [str(p) for n, p in sorted(paths.items()) if n.startswith("intercode-sql-")]}
    if "bash" in args.sets:
        sets["bash"] = {n.removeprefix("intercode-"): [str(p)] for n, p in sorted(paths.items()) if "-bash-" in n}
    specs: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    data: dict[str, Any] = {}
    for set_name, streams in sets.items():
        steps = {name: sum(len(t.steps) for t in read_stream(files)) for name, files in streams.items()}
        data[set_name] = {"streams": {n: [Path(f).name for f in fs] for n, fs in streams.items()}, "steps": steps}
        most = max(steps.values())
        if args.max_trajectories is not None:
            most = min(most, args.max_trajectories * 100)  # smoke runs: keep every setting
        run, skip = quality_settings(
            args.caps,
            compress=args.compress or None,
            compress_window=args.compress_window if args.compress else None,
            most_records=most,
        )
        for s in skip:
            reason = f"cap >= the longest stream's {most:,} steps: the same run as unbounded"
            skipped.append({"stream_set": set_name, "label": s.label, "setting": asdict(s), "reason": reason})
        for s in run:
            specs.append(
                {
                    "stream_set": set_name,
                    "streams": streams,
                    "setting": asdict(s),
                    "run_dir": str(tmp / "runs" / set_name / s.label.replace(" ", "_")),
                    "n_boot": args.n_boot,
                    "seed": args.seed,
                    "max_trajectories": args.max_trajectories,
                }
            )
    # Longest first (the unbounded and compressed SQL runs, then larger caps), so the jobs finish together.
    order = sorted(
        range(len(specs)), key=lambda i: (specs[i]["stream_set"] != "sql", -(specs[i]["setting"]["cap"] or 10**9))
    )
    say(f"quality: {len(specs)} runs, {args.jobs} at a time; skipped {len(skipped)} that cannot bind")
    docs = run_fresh_many(
        "benchmarks.bank_quality:quality_worker",
        [specs[i] for i in order],
        jobs=args.jobs,
        describe=lambda s: f"quality {s['stream_set']} {Setting.from_json(s['setting']).label}",
        log=say,
    )
    by_index = dict(zip(order, docs, strict=True))
    results = [QualityResult.from_json(by_index[i]) for i in range(len(specs)) if "error" not in by_index[i]]
    failures = [by_index[i] for i in range(len(specs)) if "error" in by_index[i]]
    doc["quality"] = {
        "method": "offline CEB via ceb.pipeline.run_scoring (methods ['ceb'], default backend 'offline'); metrics: "
        "ceb.eval.calibration.metric_rows (ECE 10 equal-width bins, Brier, AUROC; 95% percentile bootstrap over "
        f"trajectories, {args.n_boot} replicates, seed {args.seed})",
        "caps": "window/usefulness: max_records = cap; reservoir: max_per_class = cap // 2 (cap = both classes)",
        "data": data,
        "results": [asdict(r) for r in results],
        "failures": failures,
        "skipped": skipped,
        "table": format_quality_table(results),
        "stream_tables": {
            s: format_stream_table([r for r in results if r.stream_set == s]) for s in sets if len(sets[s]) > 1
        },
    }
    return results


# --- command line: python benchmarks/bank_quality.py -------------------------------------------------------

_HELP = """Bounded banks, quality: offline CEB's calibration against the cap (NOT a language model).

    python benchmarks/bank_quality.py --jobs 2

The 7 InterCode-SQL streams joined into one stream (58k steps), and the 7 bash streams each (and pooled), scored
by offline CEB with the bank unbounded, under each eviction policy at each cap, and with near-duplicate
compression, each run in a fresh process. Prints Markdown tables and writes ``bank-quality-<UTC>.json`` and a PNG
of the same name into ``--out``. The cost of a bounded bank is ``ceb bench bank-policies``.
"""


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: every setting of the grid, each run in a fresh process (``--help``)."""
    ap = bench_parser("bank-quality", _HELP, prog="python benchmarks/bank_quality.py")
    ap.add_argument("--sets", nargs="+", choices=("sql", "bash"), default=["sql", "bash"], help="stream sets")
    ap.add_argument(
        "--caps", type=int, nargs="+", default=[250, 1000, 5000, 20000], help="caps (reservoir: cap // 2 per class)"
    )
    ap.add_argument("--compress", type=float, default=0.95, help="compression threshold run alone (0: none)")
    ap.add_argument("--compress-window", type=int, default=5000, help="also compression under a window of this cap")
    ap.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates (trajectories resampled)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    ap.add_argument("--max-trajectories", type=int, default=None, help="score only this many per stream (smoke runs)")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (each in its own process)")
    args = ap.parse_args(argv)
    configure_logging("warning")
    # The fresh processes import this module by name: from the checkout, whatever the working directory.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH"))))

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    doc: dict[str, Any] = {"settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="ceb-bank-quality-") as tmp:
        quality = _quality(args, Path(tmp), doc, say)
    path = save_results(args.out, "bank-quality", doc | {"note": OFFLINE_NOTE}, machine_info())
    png = plot(quality, path.with_suffix(""))
    print(f"{OFFLINE_NOTE}\n\n{doc['quality']['table']}")
    for name, table in doc["quality"]["stream_tables"].items():
        print(f"\n{name}, per stream: ECE / AUROC\n{table}")
    for s in doc["quality"]["skipped"]:
        print(f"not run ({s['reason']}): {s['stream_set']} {s['label']}")
    print(f"wrote {path} and {png} ({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
