"""Bounded banks (issue 15, parts 2 and 3): the command line that runs the quality and scale parts and reports them.

The grid and the quality part are :mod:`ceb.bench.bank_quality`, the scale part :mod:`ceb.bench.bank_scale` (each
measurement in a fresh process, :func:`ceb.bench.processes.run_fresh_many`); the tables and the figure are here.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import orjson

from ceb.bench.bank_quality import UNCAPPED_1M_GOALS, QualityResult, Setting, quality_settings
from ceb.bench.bank_scale import REPLAY_RULE, ScaleResult, scale_checks
from ceb.bench.machine import machine_info
from ceb.bench.options import bench_parser
from ceb.bench.processes import run_fresh_many
from ceb.data import convert_intercode, read_stream
from ceb.eval.lanes import POOLED
from ceb.logs import configure_logging

__all__ = ["GOALS", "OFFLINE_NOTE", "format_quality_table", "format_scale_table", "format_stream_table", "main", "plot"]

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


def plot(quality: Sequence[QualityResult], scale: Sequence[ScaleResult], stem: str | Path) -> Path:
    """Draw the quality (ECE, Brier, AUROC against the cap) and scale (query, update, RSS against records) panels.

    Quality: one line per (stream set, policy) with its 95% intervals as error bars; the unbounded bank and
    compression alone are horizontal lines (they have no cap). Scale: log-log, one line per setting.

    Args:
        quality: Quality results (may be empty).
        scale: Scale results (may be empty).
        stem: The file's path without ``.png``.

    Returns:
        The PNG's path (:func:`ceb.eval.plots.save_figure`).
    """
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from ceb.eval.plots import save_figure

    fig = Figure(figsize=(16, 9), layout="constrained")
    grid = fig.subplots(2, 3, squeeze=False)
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
    labels = sorted({r.setting.label for r in scale}, key=[r.setting.label for r in scale].index)
    getters: tuple[tuple[str, Callable[[ScaleResult], float], float | None], ...] = (
        ("query p50 ms (retrieve, k=2)", lambda r: r.query.p50_ms, UNCAPPED_1M_GOALS["query_p50_ms"]),
        ("update mean ms per trajectory", lambda r: r.update.mean_ms, None),
        ("peak RSS MiB", lambda r: r.peak_rss_mb, UNCAPPED_1M_GOALS["rss_mb"]),
    )
    for col, (title, get, goal) in enumerate(getters):
        ax = axes[1][col]
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
    fig.suptitle("Bounded banks: offline stand-in's calibration (top, NOT an LLM critic) and cost (bottom)")
    return save_figure(fig, Path(stem))[0]


_HELP = """Bounded banks: offline CEB's calibration against the cap, and cost against records.

    ceb bench bank-policies --jobs 2

Quality: the 7 InterCode-SQL streams joined into one stream (58k steps), and the 7 bash streams each (and
pooled), scored by offline CEB (NOT a language model) with the bank unbounded, under each eviction policy at
each cap, and with near-duplicate compression. Scale: a bank fed 10k, 100k and 1M real or replayed InterCode-SQL
records, uncapped and capped, each in a fresh process. Prints Markdown tables and writes
``bank-policies-<UTC timestamp>.json`` (figures, settings, machine) and a PNG of the same name into ``--out``;
the JSON is written after each part, so a failed scale part keeps the quality figures. See
``ceb/bench/bank_quality.py`` and ``ceb/bench/bank_scale.py`` for what each figure measures.
"""

GOALS = "under a cap: flat query latency, update time and memory; uncapped at 1M: query p50 <= 10 ms, RSS <= 2 GB"


def _scale_setting(text: str) -> Setting:
    """``none``, ``window:20000`` or ``reservoir:20000`` (the cap over both classes: 10k per class)."""
    policy, _, cap = text.partition(":")
    if policy not in ("none", "window", "reservoir"):
        raise argparse.ArgumentTypeError(f"scale settings are none, window:<cap> or reservoir:<cap>, not {text!r}")
    return Setting(policy, int(cap) if cap else None)  # type: ignore[arg-type]


def main(argv: Sequence[str] | None = None) -> int:
    """``ceb bench bank-policies``: the quality and scale parts, each measurement in a fresh process (``--help``)."""
    ap = bench_parser("bank-policies", _HELP)
    ap.add_argument("--parts", nargs="+", choices=("quality", "scale"), default=["quality", "scale"])
    ap.add_argument("--sets", nargs="+", choices=("sql", "bash"), default=["sql", "bash"], help="quality stream sets")
    ap.add_argument(
        "--caps",
        type=int,
        nargs="+",
        default=[250, 1000, 5000, 20000],
        help="caps in records (reservoir: cap // 2 per class)",
    )
    ap.add_argument("--compress", type=float, default=0.95, help="compression threshold run alone (0: none)")
    ap.add_argument("--compress-window", type=int, default=5000, help="also compression under a window of this cap")
    ap.add_argument("--n-boot", type=int, default=1000, help="bootstrap replicates (trajectories resampled)")
    ap.add_argument("--seed", type=int, default=0, help="bootstrap seed; scale: query sampling seed")
    ap.add_argument("--max-trajectories", type=int, default=None, help="score only this many per stream (smoke runs)")
    ap.add_argument("--jobs", type=int, default=1, help="quality runs at a time (each in its own process)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="scale: records")
    ap.add_argument(
        "--scale-settings", type=_scale_setting, nargs="+", default=["none", "window:20000", "reservoir:20000"]
    )
    ap.add_argument("--queries", type=int, default=200, help="scale: query keys timed")
    ap.add_argument("--k", type=int, default=2, help="scale: records per class retrieved (paper: 2)")
    ap.add_argument("--updates", type=int, default=50, help="scale: trajectories added one at a time, timed")
    ap.add_argument("--chunk", type=int, default=10_000, help="scale: records per bulk update while streaming in")
    ap.add_argument("--scale-timeout-s", type=float, default=1800.0, help="scale: kill one measurement after this")
    ap.add_argument(
        "--quality-from",
        type=Path,
        default=None,
        help="an earlier results file whose quality part is copied (with its file name) instead of running it",
    )
    args = ap.parse_args(argv)
    args.scale_settings = [s if isinstance(s, Setting) else _scale_setting(s) for s in args.scale_settings]
    configure_logging("warning")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.perf_counter()
    machine = machine_info()
    stamp = machine["timestamp"].replace(":", "").replace("-", "").replace("+0000", "Z")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"bank-policies-{stamp}.json"
    doc: dict[str, Any] = {
        "benchmark": "bank-policies",
        "machine": machine,
        "settings": {k: _jsonable(v) for k, v in vars(args).items()},
        "note": OFFLINE_NOTE,
        "goals": GOALS,
        "timing_note": "2 cores shared with other jobs at times (CI, tests): timings are noisy",
    }
    quality: list[QualityResult] = []
    scale: list[ScaleResult] = []
    with tempfile.TemporaryDirectory(prefix="ceb-bank-policies-") as tmp:
        if args.quality_from is not None:
            earlier = orjson.loads(args.quality_from.read_bytes())
            if "quality" not in earlier:
                ap.error(f"--quality-from {args.quality_from}: the file has no quality part")
            doc["quality"] = {**earlier["quality"], "copied_from": args.quality_from.name}
            quality = [QualityResult.from_json(r) for r in earlier["quality"]["results"]]
        elif "quality" in args.parts:
            quality = _quality(args, Path(tmp), doc, say)
            _write(path, doc, started)
            say(f"quality figures written to {path}")
        if "scale" in args.parts:
            scale = _scale(args, doc, say)
    png = plot(quality, scale, path.with_suffix(""))
    doc["plot"] = png.name
    _write(path, doc, started)
    print(f"{OFFLINE_NOTE}\n")
    if quality:
        print(doc["quality"]["table"])
        for name, table in doc["quality"]["stream_tables"].items():
            print(f"\n{name}, per stream: ECE / AUROC\n{table}")
        for s in doc["quality"]["skipped"]:
            print(f"not run ({s['reason']}): {s['stream_set']} {s['label']}")
    if scale:
        print("\n" + doc["scale"]["table"])
        print(f"\nkeys: {REPLAY_RULE}")
        print(f"checks: {orjson.dumps(doc['scale']['checks']).decode()}")
        for failure in doc["scale"]["failures"]:
            print(f"FAILED: {failure['spec']['size']} {failure['spec']['setting']}: {failure['error'][-300:]}")
    print(f"goals: {GOALS}\nwrote {path} and {png} ({doc['wall_s']} s)")
    return 0


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
        "ceb.bench.bank_quality:quality_worker",
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


def _scale(args: argparse.Namespace, doc: dict[str, Any], say: Any) -> list[ScaleResult]:
    specs = [
        {
            "intercode": str(args.intercode),
            "size": size,
            "setting": asdict(setting),
            "queries": args.queries,
            "seed": args.seed,
            "k": args.k,
            "updates": args.updates,
            "chunk": args.chunk,
        }
        for size in args.sizes
        for setting in args.scale_settings
    ]
    say(f"scale: {len(specs)} measurements, one at a time, each in a fresh process")
    docs = run_fresh_many(
        "ceb.bench.bank_scale:scale_worker",
        specs,
        timeout_s=args.scale_timeout_s,
        describe=lambda s: f"scale {s['size']} {Setting.from_json(s['setting']).label}",
        log=say,
    )
    results = [ScaleResult.from_json(d) for d in docs if "error" not in d]
    doc["scale"] = {
        "data": {
            "source": "InterCode-SQL records (convert_intercode): key = composite_key(task, clip(state, 400), "
            "action), pseudo_label = the step's label, observation clipped to bank_observation_chars, score 0.5 "
            "placeholder; replayed records own their text (no string shared with the record they copy)",
            "replay": REPLAY_RULE,
            "streaming": f"chunks of {args.chunk} records, then the last {args.updates} trajectories one at a "
            "time (timed); for none/window/reservoir the held records equal those of per-trajectory updates",
            "queries": f"{args.queries} real keys sampled without replacement (seed {args.seed}), Bank.retrieve "
            f"with k={args.k}",
            "memory": "RSS from /proc/self/statm; peak from getrusage ru_maxrss, each measurement in a fresh process",
        },
        "results": [asdict(r) for r in results],
        "failures": [d for d in docs if "error" in d],
        "table": format_scale_table(results),
        "checks": scale_checks(results),
    }
    return results


def _jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Setting):
        return value.label
    return value


def _write(path: Path, doc: dict[str, Any], started: float) -> None:
    doc["wall_s"] = round(time.perf_counter() - started, 1)
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
