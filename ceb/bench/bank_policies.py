"""Bounded banks: query, update, memory and file size against the records streamed in, per policy and cap.

``ceb bench bank-policies`` sizes a bank: a bank fed 10k, 100k and 1M real or replayed InterCode-SQL records,
uncapped and capped, each measurement in a fresh process (:mod:`ceb.bench.bank_scale`,
:func:`ceb.bench.processes.run_fresh_many`); the table and the figure are here. What a cap does to calibration
(offline CEB's ECE, Brier and AUROC against the cap) was a study of issue 15, answered once in the checkout:
``python benchmarks/bank_quality.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from ceb.bench.bank_scale import REPLAY_RULE, UNCAPPED_1M_GOALS, ScaleResult, Setting, scale_checks
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser
from ceb.bench.processes import run_fresh_many
from ceb.bench.result_files import save_results
from ceb.logs import configure_logging

__all__ = ["GOALS", "BankPoliciesResult", "format_scale_table", "main", "plot"]

GOALS = "under a cap: flat query latency, update time and memory; uncapped at 1M: query p50 <= 10 ms, RSS <= 2 GB"

DATA = {
    "source": "InterCode-SQL records (convert_intercode): key = composite_key(task, clip(state, 400), action), "
    "pseudo_label = the step's label, observation clipped to bank_observation_chars, score 0.5 placeholder; "
    "replayed records own their text (no string shared with the record they copy)",
    "replay": REPLAY_RULE,
    "memory": "RSS from /proc/self/statm; peak from getrusage ru_maxrss, each measurement in a fresh process",
}
"""What the records and figures are, for the results file."""


@dataclass(frozen=True, slots=True)
class BankPoliciesResult:
    """``ceb bench bank-policies``'s record: the settings, every measurement, the goals checked, the table.

    Attributes:
        sizes: Records streamed into each bank.
        settings: The bank settings' labels.
        queries: Query keys timed per measurement (``Bank.retrieve`` with ``k``).
        k: Records per class retrieved.
        updates: Trajectories added one at a time at the end, timed.
        chunk: Records per bulk update while streaming in.
        seed: The query sampling seed.
        results: One per (size, setting) that finished.
        failures: ``{"error", "spec"}`` of those whose process failed.
        checks: :func:`~ceb.bench.bank_scale.scale_checks`.
        table: :func:`format_scale_table`.
        plot: The figure's file name (beside the results file).
        wall_s: Seconds for the whole run.
    """

    sizes: tuple[int, ...]
    settings: tuple[str, ...]
    queries: int
    k: int
    updates: int
    chunk: int
    seed: int
    results: tuple[ScaleResult, ...]
    failures: tuple[dict[str, Any], ...]
    checks: dict[str, Any]
    table: str
    plot: str
    wall_s: float
    data: dict[str, str]
    goals: str = GOALS


def format_scale_table(results: Sequence[ScaleResult]) -> str:
    """Markdown: one row per (records streamed, setting); milliseconds and MiB."""
    head = (
        "| records streamed | bank | held | query p50 / p99 ms | update p50 / mean ms (n) | RSS MiB (base) "
        "| peak RSS MiB | bank file MiB | journal MiB (compacted) | stream-in s |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        lines.append(
            f"| {r.size:,} | {r.setting.label} | {r.held:,} | {r.query.p50_ms:.2f} / {r.query.p99_ms:.2f} "
            f"| {r.update.p50_ms:.1f} / {r.update.mean_ms:.1f} ({r.update.n}) "
            f"| {r.rss_mb:,.0f} ({r.rss_base_mb:,.0f}) | {r.peak_rss_mb:,.0f} | {r.save_bytes / 2**20:,.1f} "
            f"| {r.journal_bytes / 2**20:,.1f} | {r.stream_in_s:.0f} |"
        )
    return "\n".join(lines)


def plot(scale: Sequence[ScaleResult], stem: str | Path) -> Path:
    """Draw query p50, update mean and peak RSS against the records streamed in: log-log, one line per setting.

    Args:
        scale: The measurements.
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
    labels = sorted({r.setting.label for r in scale}, key=[r.setting.label for r in scale].index)
    getters: tuple[tuple[str, Callable[[ScaleResult], float], float | None], ...] = (
        ("query p50 ms (retrieve, k=2)", lambda r: r.query.p50_ms, UNCAPPED_1M_GOALS["query_p50_ms"]),
        ("update mean ms per trajectory", lambda r: r.update.mean_ms, None),
        ("peak RSS MiB", lambda r: r.peak_rss_mb, UNCAPPED_1M_GOALS["rss_mb"]),
    )
    for col, (title, get, goal) in enumerate(getters):
        ax = axes[0][col]
        for label in labels:
            line = sorted((r.size, get(r)) for r in scale if r.setting.label == label)
            ax.plot([x for x, _ in line], [y for _, y in line], marker="o", label=label)
        if goal is not None:
            ax.axhline(goal, color="tab:red", linestyle=":", linewidth=1, label="goal, uncapped at 1M")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records streamed into the bank")
        ax.set_title(title)
        if col == 0:
            ax.legend(fontsize=8)
    fig.suptitle("Bounded banks: query, update and memory against the records streamed in")
    return save_figure(fig, Path(stem))[0]


_HELP = """Bounded banks: query, update, memory and file size against the records streamed in, per policy and cap.

    ceb bench bank-policies --sizes 10000 100000 1000000 --scale-settings none window:20000 reservoir:20000

A bank fed real or replayed InterCode-SQL records (10k, 100k, 1M), uncapped and under each cap, each measurement
in a fresh process so its peak memory is its own. Prints a Markdown table and the goals checked, and writes
``bank-policies-<UTC timestamp>.json`` and a PNG of the same name into ``--out``. See ``ceb/bench/bank_scale.py``
for what each figure measures; what a cap does to calibration is ``python benchmarks/bank_quality.py`` (checkout).
"""


def _scale_setting(text: str) -> Setting:
    """``none``, ``window:20000`` or ``reservoir:20000`` (the cap over both classes: 10k per class)."""
    policy, _, cap = text.partition(":")
    if policy not in ("none", "window", "reservoir"):
        raise argparse.ArgumentTypeError(f"settings are none, window:<cap> or reservoir:<cap>, not {text!r}")
    return Setting(policy, int(cap) if cap else None)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench bank-policies``: every (size, setting), each measurement in a fresh process (``--help``)."""
    ap = bench_parser("bank-policies", _HELP)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="records streamed")
    ap.add_argument(
        "--scale-settings", type=_scale_setting, nargs="+", default=["none", "window:20000", "reservoir:20000"]
    )
    ap.add_argument("--queries", type=int, default=200, help="query keys timed")
    ap.add_argument("--k", type=int, default=2, help="records per class retrieved (paper: 2)")
    ap.add_argument("--updates", type=int, default=50, help="trajectories added one at a time, timed")
    ap.add_argument("--chunk", type=int, default=10_000, help="records per bulk update while streaming in")
    ap.add_argument("--seed", type=int, default=0, help="query sampling seed")
    ap.add_argument("--scale-timeout-s", type=float, default=1800.0, help="kill one measurement after this")
    args = ap.parse_args(argv)
    settings = [s if isinstance(s, Setting) else _scale_setting(s) for s in args.scale_settings]
    configure_logging("warning")
    started = time.perf_counter()
    specs = [
        {"intercode": str(args.intercode), "size": size, "setting": asdict(setting), "queries": args.queries}
        | {"seed": args.seed, "k": args.k, "updates": args.updates, "chunk": args.chunk}
        for size in args.sizes
        for setting in settings
    ]
    print(f"{len(specs)} measurements, one at a time, each in a fresh process", file=sys.stderr, flush=True)
    docs = run_fresh_many(
        "ceb.bench.bank_scale:scale_worker",
        specs,
        timeout_s=args.scale_timeout_s,
        describe=lambda s: f"scale {s['size']} {Setting.from_json(s['setting']).label}",
        log=lambda line: print(line, file=sys.stderr, flush=True),
    )
    results = tuple(ScaleResult.from_json(d) for d in docs if "error" not in d)
    failures = tuple(d for d in docs if "error" in d)
    machine = machine_info()
    stamp = machine["timestamp"].replace(":", "").replace("-", "").replace("+0000", "Z")
    path = args.out / f"bank-policies-{stamp}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    png = plot(results, path.with_suffix(""))
    result = BankPoliciesResult(
        tuple(args.sizes),
        tuple(s.label for s in settings),
        args.queries,
        args.k,
        args.updates,
        args.chunk,
        args.seed,
        results,
        failures,
        scale_checks(results),
        format_scale_table(results),
        png.name,
        round(time.perf_counter() - started, 1),
        DATA,
    )
    save_results(args.out, "bank-policies", result, machine, path=path)
    print(f"{result.table}\n\nkeys: {REPLAY_RULE}\nchecks: {orjson.dumps(result.checks).decode()}")
    for failure in failures:
        print(f"FAILED: {failure['spec']['size']} {failure['spec']['setting']}: {failure['error'][-300:]}")
    print(f"goals: {GOALS}\nwrote {path} and {png} ({result.wall_s} s)")
    return 0
