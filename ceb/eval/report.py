"""``ceb report RUN_DIR``: the paper's analyses, tables and figures from a run directory.

:func:`build_report` reads ``scores.jsonl`` and writes, into ``RUN_DIR/report/``::

    report.md                  every table inline, with links to each table file and every figure
    report.json                every number of every analysis (null where a value is undefined)
    main.md / main.tex         Table 1 layout: ECE, Brier, AUC per stream and critic (section 4.2)
    main-ci.md / main-ci.tex   the same rows with counts and 95% bootstrap intervals over trajectories
    stream-averaging.md/.tex   cumulative ECE mean ± std over stream orders (section 4.4)
    cumulative-ece-*.png       one per (stream, critic)
    depth.md / depth.tex       calibration by within-trajectory depth (Figure 1)
    depth-*.png                one per (stream, critic)
    reliability-*.png          reliability diagrams, one panel per method (appendix E)
    selective.md / .tex        selective execution (section 4.5)
    task-success.md / .tex     task success under a per-task review budget (section 4.5)
    label-shift.md / .tex      strict vs alternative labels (appendix A), when ``alt_labels`` are present
    main-<name>.md / .tex      Table 1 recomputed against the alternative labels ``<name>``
    abl.md / abl.tex           component ablation: CEB against each component removed, with ΔECE (table "abl")
    gt-oracle.md / .tex        Static vs CEB vs the GT-oracle bank (an ORACLE), gap closed (table "gt-oracle")
    vsweep.md / vsweep.tex     hindsight vote count V sweep at one k (appendix, table "vsweep")
    topk.md / topk.tex         retrieval depth k sweep at one V (appendix, table "topk")
    token-cost.md / .tex       mean critic prompt and bank tokens per call by k (appendix, table "token-cost")
    retrieval.md / .tex        random vs dense vs the deployed retriever (appendix, table "retrieval")

The appendix tables (:mod:`ceb.eval.ablations`) take each method's V, k and retriever from its method spec
over ``config.json``'s ``config.ceb`` (defaults of :class:`ceb.config.CEBConfig` where missing). An analysis
that does not apply to the run (no alternative labels, a single order, the methods an appendix table compares
did not run) is skipped with a note in ``report.md``, never an error. The command behind ``ceb report`` is
:mod:`ceb.eval.report_cmd`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import structlog

from ceb.config import CEBConfig, recorded_config
from ceb.errors import ConfigError, RunError
from ceb.eval.ablations import (
    ORACLE_METHOD,
    Sweep,
    ablation_variants,
    component_ablation,
    coverage_note,
    gt_oracle_gap,
    headline_rows,
    k_sweep,
    method_settings,
    retrieval_comparison,
    retrieval_methods,
    token_costs,
    vote_sweep,
)
from ceb.eval.averaging import OrderCurves, stream_averaging
from ceb.eval.calibration import DepthBucket, LabelShift, MetricRow, depth_calibration, label_shift, metric_rows
from ceb.eval.deployment import (
    REVIEW_BUDGETS,
    SELECTIVE_BUDGETS,
    TaskSuccess,
    oracle_task_success,
    selective_execution,
    task_success,
)
from ceb.eval.lanes import (
    POOLED,
    Lane,
    alt_label_names,
    base_lanes,
    comparable_masks,
    lanes_from_rows,
    reference_method,
    relabel,
)
from ceb.eval.metrics import ReliabilityBins, ece, reliability_bins
from ceb.eval.plots import method_colors, plot_cumulative_ece, plot_depth, plot_reliability
from ceb.eval.tables import (
    Table,
    ablation_table,
    averaging_table,
    depth_table,
    gt_oracle_table,
    label_shift_table,
    main_table,
    method_label,
    metric_detail_table,
    retrieval_table,
    selective_table,
    task_success_table,
    to_latex,
    to_markdown,
    token_cost_table,
    topk_table,
    vsweep_table,
)
from ceb.pipeline.results import read_rows
from ceb.stages.methods import ResolvedMethod, resolve_method

__all__ = ["build_report"]

log = structlog.get_logger(__name__)


class _Report:
    """Accumulates report.md sections and report.json entries; writes tables and figures as it goes."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.lines: list[str] = []
        self.data: dict[str, Any] = {}
        self._slugs: dict[tuple[str, ...], str] = {}

    def section(self, title: str, intro: str) -> None:
        self.lines += ["", f"## {title}", "", intro, ""]

    def note(self, text: str) -> None:
        self.lines += [f"> {text}", ""]

    def table(self, table: Table) -> None:
        md, tex = f"{table.label}.md", f"{table.label}.tex"
        (self.out_dir / md).write_text(to_markdown(table), encoding="utf-8")
        (self.out_dir / tex).write_text(to_latex(table), encoding="utf-8")
        self.lines += [f"Table: [{md}]({md}) · [{tex}]({tex})", "", to_markdown(table)]

    def figure(self, path: Path, caption: str) -> None:
        name = path.relative_to(self.out_dir).as_posix()
        self.lines += [f"![{caption}]({name})", "", f"Figure: [{name}]({name}) — {caption}", ""]

    def slug(self, *parts: str) -> str:
        """A file-name-safe, unique stem for ``parts`` (the same parts always give the same stem)."""
        if parts not in self._slugs:
            base = re.sub(r"[^A-Za-z0-9._]+", "-", "-".join(p for p in parts if p)).strip("-.") or "stream"
            stem, i = base, 2
            while stem in self._slugs.values():
                stem, i = f"{base}-{i}", i + 1
            self._slugs[parts] = stem
        return self._slugs[parts]


def build_report(
    run_dir: str | Path, out_dir: str | Path | None = None, *, n_bins: int = 10, n_boot: int = 1000, seed: int = 0
) -> Path:
    """Run every analysis of the paper on a run directory and write the report (see the module docstring).

    Args:
        run_dir: A run directory holding ``scores.jsonl`` (possibly of a partial run).
        out_dir: Where to write; default ``run_dir / "report"``. Created if missing; files of an earlier
            report are overwritten.
        n_bins: Equal-width ECE bins (also the reliability diagrams' bins).
        n_boot: Bootstrap replicates per metric row (0 gives no intervals).
        seed: Bootstrap seed; the same run, settings and seed give the same report.

    Returns:
        The path of ``report.md``.

    Raises:
        RunError: ``run_dir`` has no ``scores.jsonl``, it holds no row, or a line before the last is not
            JSON.
        ValueError: ``n_bins < 1`` or ``n_boot < 0``.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    run = Path(run_dir)
    scores = run / "scores.jsonl"
    if not scores.is_file():
        raise RunError(f"{run} has no scores.jsonl; is it a run directory written by `ceb score`?")
    lanes = lanes_from_rows(read_rows(scores))
    if not lanes:
        raise RunError(f"{scores} holds no scored step")
    out = Path(out_dir) if out_dir is not None else run / "report"
    out.mkdir(parents=True, exist_ok=True)
    base = base_lanes(lanes)
    # Colours go to the methods figures draw (scored, not sweep cells), so that those are far apart on the palette.
    colors = method_colors(sorted(_drawn(lane.method for lane in lanes if lane.note is None)))
    settings, source = _run_ceb(run)
    methods = method_settings((lane.method for lane in lanes), settings)
    rep = _Report(out)
    _header(rep, run, lanes, n_bins, n_boot, seed)
    _settings_header(rep, settings, source, lanes, methods)

    rows = _main_section(rep, lanes, n_bins, n_boot, seed)
    _averaging_section(rep, lanes, n_bins, colors)
    _depth_section(rep, base, n_bins, colors)
    _reliability_section(rep, base, n_bins, colors)
    _selective_section(rep, base)
    _task_success_section(rep, base)
    _label_shift_section(rep, lanes, n_bins, n_boot, seed)
    headline = headline_rows(rows)
    _ablation_section(rep, rows, headline)
    _gt_oracle_section(rep, rows)
    _sweep_sections(rep, rows, headline, methods, settings)
    _token_cost_section(rep, rows, base, headline, methods)
    _retrieval_section(rep, rows, headline, methods)

    rep.lines += ["", "All numbers: [report.json](report.json)", ""]
    (out / "report.json").write_bytes(orjson.dumps(_jsonable(rep.data), option=orjson.OPT_INDENT_2))
    path = out / "report.md"
    path.write_text("\n".join(rep.lines).lstrip("\n"), encoding="utf-8")
    log.info("report.written", path=str(path), lanes=len(lanes))
    return path


def _header(rep: _Report, run: Path, lanes: Sequence[Lane], n_bins: int, n_boot: int, seed: int) -> None:
    streams = list(dict.fromkeys(lane.stream for lane in lanes))
    methods = list(dict.fromkeys(lane.method for lane in lanes))
    critics = sorted({lane.critic for lane in lanes})
    orders = {s: sorted({lane.order for lane in lanes if lane.stream == s}) for s in streams}
    rep.lines += [
        f"# Report: {run.name}",
        "",
        f"- Run directory: `{run}`",
        f"- Streams: {', '.join(f'`{s}` ({len(orders[s])} order(s))' for s in streams)}",
        f"- Methods: {', '.join(f'`{m}`' for m in methods)}",
        f"- Critics: {', '.join(f'`{c}`' for c in critics) if any(critics) else 'one (unlabelled)'}",
        f"- Scored rows: {sum(lane.n_rows for lane in lanes)}, of which failed (no score): "
        f"{sum(lane.n_failed for lane in lanes)}, unlabeled: {sum(lane.n_unlabeled for lane in lanes)}",
        f"- ECE: {n_bins} equal-width bins. Intervals: 95% percentile bootstrap over trajectories, "
        f"{n_boot} replicates, seed {seed}.",
        "- Failed steps (no score) and unlabeled steps are left out of every metric and counted. "
        "Methods that scored nothing on a stream print n/a.",
        "- Every analysis except the multi-order one uses each (stream, critic, method)'s lowest order "
        "(normally 0, the input-file order), so each step counts once.",
    ]
    rep.data["run"] = {
        "run_dir": str(run),
        "streams": streams,
        "methods": methods,
        "critics": critics,
        "orders": orders,
        "n_bins": n_bins,
        "n_boot": n_boot,
        "seed": seed,
        "level": 0.95,
    }


def _na_notes(rows: Sequence[MetricRow]) -> list[str]:
    return [
        f"{method_label(r.method)} on {_where(r.stream, r.critic)}: n/a ({r.note})" for r in rows if r.summary is None
    ]


def _where(stream: str, critic: str) -> str:
    name = "all streams (pooled)" if stream == POOLED else stream
    return f"{name} / {critic}" if critic else name


def _main_section(rep: _Report, lanes: Sequence[Lane], n_bins: int, n_boot: int, seed: int) -> list[MetricRow]:
    rep.section(
        "1. Main results (Table 1, section 4.2)",
        "ECE (equal width), Brier and AUC per stream and critic, with each method pooled over streams when it "
        "ran on more than one. Bold marks the best value per column within a critic block (lower is better for "
        "ECE and Brier, higher for AUC).",
    )
    rows = metric_rows(lanes, n_bins=n_bins, n_boot=n_boot, seed=seed)
    notes = _na_notes(rows)
    rep.table(main_table(rows, notes=notes))
    rep.table(metric_detail_table(rows))
    rep.data["main"] = [_metric_json(r) for r in rows]
    return rows


def _metric_json(r: MetricRow) -> dict[str, Any]:
    return {
        "stream": r.stream,
        "critic": r.critic,
        "method": r.method,
        "n": r.n,
        "failed": r.failed,
        "unlabeled": r.unlabeled,
        "n_trajectories": r.n_trajectories,
        "metrics": None if r.summary is None else r.summary.to_dict(),
        "ci": None if r.ci is None else asdict(r.ci),
        "note": r.note,
    }


def _averaging_section(rep: _Report, lanes: Sequence[Lane], n_bins: int, colors: Mapping[str, str]) -> None:
    rep.section(
        "2. Multi-order stream averaging (section 4.4)",
        "Cumulative ECE of all steps of the first n trajectories of the stream, as the bank fills, at task counts "
        "n = round(linspace(1, N, min(50, N))) plus 30, 50 and 150 when within the stream (N: trajectories in the "
        "shortest lane of the stream). Mean and sample std (ddof=1) over every stream order present; the gap is "
        "ECE(Static) - ECE(method) on the identical step stream (same stream and order), averaged over orders.",
    )
    curves = stream_averaging(lanes, n_bins=n_bins)
    if not curves:
        rep.note("Skipped: no lane has a step with both a score and a label.")
        rep.data["stream_averaging"] = []
        return
    notes = []
    if all(len(cv.orders) == 1 for cv in curves):
        notes.append("The run scored a single order per stream, so there is no spread over orders (std n/a).")
    if not any(cv.gap_orders for cv in curves):
        notes.append("No Static lane shares a stream and order with another method, so there is no gap (—).")
    for note in notes:
        rep.note(note)
    rep.table(averaging_table(curves))
    groups: dict[tuple[str, str], list[OrderCurves]] = {}
    for cv in curves:
        groups.setdefault((cv.stream, cv.critic), []).append(cv)
    shown = _figure_methods([cv.method for cv in curves], rep)
    for (stream, critic), group in groups.items():
        path = rep.out_dir / f"cumulative-ece-{rep.slug(stream, critic)}.png"
        title = f"Cumulative ECE, {_where(stream, critic)}"
        drawn = [cv for cv in group if cv.method in shown]
        rep.figure(plot_cumulative_ece(drawn, path, title=title, colors=colors), title)
    rep.data["stream_averaging"] = [
        {
            "stream": cv.stream,
            "critic": cv.critic,
            "method": cv.method,
            "orders": list(cv.orders),
            "task_counts": cv.task_counts,
            "ece": cv.ece,
            "mean": cv.mean,
            "std": cv.std,
            "reference": cv.reference,
            "gap_orders": list(cv.gap_orders),
            "gap": cv.gap,
            "gap_mean": cv.gap_mean,
            "gap_std": cv.gap_std,
        }
        for cv in curves
    ]


def _depth_section(rep: _Report, base: Sequence[Lane], n_bins: int, colors: Mapping[str, str]) -> None:
    rep.section(
        "3. Calibration by within-trajectory depth (Figure 1)",
        "ECE, mean confidence and positive rate of the steps at step index 0, 1, 2, 3, 4 and 5 or later of "
        "their trajectory.",
    )
    depth: dict[tuple[str, str, str], list[DepthBucket]] = {
        (lane.stream, lane.critic, lane.method): depth_calibration(lane.label, lane.score, lane.step, n_bins=n_bins)
        for lane in base
    }
    rep.table(depth_table(depth))
    shown = _figure_methods([lane.method for lane in base], rep)
    for (stream, critic), per_method in _by_stream(depth).items():
        usable = {m: buckets for m, buckets in per_method.items() if any(b.n for b in buckets) and m in shown}
        if usable:
            path = rep.out_dir / f"depth-{rep.slug(stream, critic)}.png"
            title = f"Calibration by depth, {_where(stream, critic)}"
            rep.figure(plot_depth(usable, path, title=title, colors=colors), title)
    rep.data["depth"] = [
        {"stream": s, "critic": c, "method": m, "buckets": [asdict(b) for b in buckets]}
        for (s, c, m), buckets in depth.items()
    ]


def _drawn(methods: Iterable[str]) -> set[str]:
    """The methods figures draw: all but the V / k sweep cells, which have their own tables (sections 10-12).

    A figure of 30 curves reads as none; when only sweep cells ran, they are drawn.
    """
    names = set(methods)
    sweep = {m for m in names if _is_sweep_cell(m)}
    return names if sweep == names else names - sweep


def _is_sweep_cell(method: str) -> bool:
    try:
        return resolve_method(method).group == "sweep"
    except ConfigError:
        return False


def _figure_methods(methods: Sequence[str], rep: _Report) -> set[str]:
    """:func:`_drawn`, with a note in the report naming how many sweep cells were left out."""
    shown = _drawn(methods)
    if len(shown) < len(set(methods)):
        left = len(set(methods)) - len(shown)
        rep.note(f"Figures leave out the {left} V / k sweep cells (see the sweep tables); the table above has them.")
    return shown


def _by_stream(items: Mapping[tuple[str, str, str], Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (stream, critic, method), value in items.items():
        out.setdefault((stream, critic), {})[method] = value
    return out


def _reliability_section(rep: _Report, base: Sequence[Lane], n_bins: int, colors: Mapping[str, str]) -> None:
    rep.section(
        "4. Reliability diagrams (appendix E)",
        f"Positive rate per confidence bin ({n_bins} equal-width bins) with the step count over each bar; the "
        "dashed diagonal is perfect calibration and the shaded box the gap to the bin's mean confidence.",
    )
    bins: dict[tuple[str, str, str], ReliabilityBins] = {}
    eces: dict[tuple[str, str, str], float] = {}
    for lane in base:
        use = lane.usable
        if use.any():
            key = (lane.stream, lane.critic, lane.method)
            bins[key] = reliability_bins(lane.label[use], lane.score[use], n_bins=n_bins)
            eces[key] = ece(lane.label[use], lane.score[use], n_bins=n_bins)
    if not bins:
        rep.note("Skipped: no lane has a step with both a score and a label.")
    shown = _figure_methods([m for _, _, m in bins], rep)
    for (stream, critic), per_method in _by_stream(bins).items():
        per_method = {m: b for m, b in per_method.items() if m in shown}
        panel_eces = {m: eces[(stream, critic, m)] for m in per_method}
        path = rep.out_dir / f"reliability-{rep.slug(stream, critic)}.png"
        title = f"Reliability, {_where(stream, critic)}"
        rep.figure(plot_reliability(per_method, path, title=title, eces=panel_eces, colors=colors), title)
    rep.data["reliability"] = [
        {
            "stream": s,
            "critic": c,
            "method": m,
            "edges": b.edges,
            "counts": b.counts,
            "mean_confidence": b.mean_confidence,
            "accuracy": b.accuracy,
        }
        for (s, c, m), b in bins.items()
    ]


def _groups(base: Sequence[Lane]) -> dict[tuple[str, str], list[Lane]]:
    out: dict[tuple[str, str], list[Lane]] = {}
    for lane in base:
        out.setdefault((lane.stream, lane.critic), []).append(lane)
    return out


def _shared_note(kept: int, total: int, unit: str, where: str) -> str | None:
    if kept == 0 and total:
        return f"{where}: the methods share no {unit} id, so each is evaluated on its own {unit}s."
    if kept < total:
        return f"{where}: {total - kept} of {total} {unit}s left out (a method lacks a score or label there)."
    return None


def _selective_section(rep: _Report, base: Sequence[Lane]) -> None:
    budgets = SELECTIVE_BUDGETS
    rep.section(
        "5. Selective execution (section 4.5)",
        "GT positive rate among the retained steps after deferring the floor(b·N/100) lowest-confidence steps. "
        "Ties at the cut are broken uniformly at random and the expected rate is reported, so a constant "
        "confidence keeps the base rate (b=0) at every budget. All methods of a stream are evaluated on the "
        "steps that every method scored and that carry a label, so they share the base rate.",
    )
    rates: dict[tuple[str, str, str], list[float | None]] = {}
    notes = []
    for (stream, critic), group in _groups(base).items():
        masks, kept, total = comparable_masks(group, whole_trajectories=False)
        for lane, m in zip(group, masks, strict=True):
            rates[(stream, critic, lane.method)] = selective_execution(lane.label[m], lane.score[m], budgets)
        note = _shared_note(kept, total, "step", _where(stream, critic))
        if note:
            notes.append(note)
    rep.table(selective_table(rates, budgets, notes=notes))
    rep.data["selective"] = [
        {"stream": s, "critic": c, "method": m, "budgets": list(budgets), "retained_positive_rate": r}
        for (s, c, m), r in rates.items()
    ]


def _task_success_section(rep: _Report, base: Sequence[Lane]) -> None:
    rep.section(
        "6. Task success under a per-task review budget (section 4.5)",
        "A task succeeds when all its steps are correct after its m lowest-confidence steps are reviewed and "
        "fixed (ties broken uniformly at random, expected rate reported); Oracle reviews exactly the wrong steps "
        "(success iff at most m are wrong), using the step labels of the reference method (CEB, else Static). "
        "All methods of a stream are evaluated on the tasks whose every step every method scored and that carry "
        "labels throughout; other tasks are left out and counted.",
    )
    success: dict[tuple[str, str, str], TaskSuccess] = {}
    oracle: dict[tuple[str, str], TaskSuccess] = {}
    notes = []
    for (stream, critic), group in _groups(base).items():
        masks, kept, total = comparable_masks(group, whole_trajectories=True)
        for lane, m in zip(group, masks, strict=True):
            success[(stream, critic, lane.method)] = task_success(
                lane.label[m], lane.score[m], lane.trajectory[m], REVIEW_BUDGETS
            )
        ref = reference_method(lane.method for lane in group)
        i = next(j for j, lane in enumerate(group) if lane.method == ref)
        m = masks[i]
        oracle[(stream, critic)] = oracle_task_success(group[i].label[m], group[i].trajectory[m], REVIEW_BUDGETS)
        note = _shared_note(kept, total, "task", _where(stream, critic))
        if note:
            notes.append(note)
    rep.table(task_success_table(success, oracle, notes=notes))
    rep.data["task_success"] = [
        {"stream": s, "critic": c, "method": m} | asdict(t) for (s, c, m), t in success.items()
    ] + [{"stream": s, "critic": c, "method": "oracle"} | asdict(t) for (s, c), t in oracle.items()]


def _label_shift_section(rep: _Report, lanes: Sequence[Lane], n_bins: int, n_boot: int, seed: int) -> None:
    rep.section(
        "7. LLM-as-judge label shift (appendix A)",
        "Strict labels against each alternative label column (`alt_labels`, e.g. an LLM-as-judge relabelling), "
        "over the steps of the reference method (CEB, else Static) carrying both labels; then Table 1 recomputed "
        "against the alternative labels.",
    )
    names = alt_label_names(lanes)
    rep.data["label_shift"] = []
    rep.data["alt_main"] = {}
    if not names:
        rep.note("Skipped: the run has no alternative labels (`alt_labels` is absent or empty in scores.jsonl).")
        return
    base = base_lanes(lanes)
    shifts: dict[tuple[str, str, str], LabelShift | None] = {}
    for (stream, critic), per_method in _by_stream({(la.stream, la.critic, la.method): la for la in base}).items():
        ref = per_method[reference_method(per_method)]
        for name in names:
            alt = ref.alt_labels.get(name, np.full(ref.n_rows, np.nan))
            shifts[(stream, critic, name)] = label_shift(ref.label, alt)
    rep.table(label_shift_table(shifts))
    rep.data["label_shift"] = [
        {"stream": s, "critic": c, "labels": name, "shift": None if v is None else asdict(v)}
        for (s, c, name), v in shifts.items()
    ]
    for name in names:
        rows = metric_rows([relabel(lane, name) for lane in lanes], n_bins=n_bins, n_boot=n_boot, seed=seed)
        label = f"main-{rep.slug('labels', name)}"
        caption = f"Step-level confidence estimation against the alternative labels '{name}' (ECE, Brier, AUC)."
        rep.table(main_table(rows, caption=caption, label=label, notes=_na_notes(rows)))
        rep.data["alt_main"][name] = [_metric_json(r) for r in rows]


def _run_ceb(run: Path) -> tuple[CEBConfig, str]:
    """The run's recorded ``ceb`` section and where it came from (``config.json``, or the defaults without one)."""
    try:
        return recorded_config(run).ceb, "config.json"
    except ConfigError:
        return CEBConfig(), "defaults"


def _settings_header(
    rep: _Report, settings: CEBConfig, source: str, lanes: Sequence[Lane], methods: Mapping[str, ResolvedMethod]
) -> None:
    shown = {"defaults": "CEBConfig defaults: no readable config.json"}.get(source, source)
    rep.lines.append(
        f"- Appendix tables: CEB methods resolve V, k and the retriever over V={settings.votes}, k={settings.k}, "
        f"retriever `{settings.retriever}` ({shown})."
    )
    unknown = sorted({lane.method for lane in lanes} - set(methods))
    if unknown:
        rep.lines.append(
            f"- Methods this version of ceb does not know, left out of the appendix tables: "
            f"{', '.join(f'`{m}`' for m in unknown)}"
        )
    ceb = {"votes": settings.votes, "k": settings.k, "retriever": settings.retriever}
    rep.data["run"]["ceb"] = ceb | {"source": source}
    rep.data["run"]["unknown_methods"] = unknown


def _scores_json(r: MetricRow) -> dict[str, Any]:
    """The numbers of a headline row: its stream (or ``POOLED``), step count and metrics."""
    s = r.summary
    return {
        "stream": r.stream,
        "n": r.n,
        "ece": None if s is None else s.ece,
        "brier": None if s is None else s.brier,
        "auroc": None if s is None else s.auroc,
    }


def _coverage_notes(rows: Sequence[MetricRow], blocks: Mapping[str, Sequence[str]]) -> list[str]:
    notes = [coverage_note(rows, critic, methods) for critic, methods in blocks.items()]
    return [n for n in notes if n is not None]


def _blocks(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for critic, method in pairs:
        out.setdefault(critic, []).append(method)
    return out


_HEADLINE = (
    "Numbers are the main table's (lowest-order lanes): a method's pooled row when it ran on several streams, "
    "else its row on its one stream; one block per critic."
)


def _ablation_section(rep: _Report, rows: Sequence[MetricRow], headline: Mapping[tuple[str, str], MetricRow]) -> None:
    rep.section(
        '8. Component ablation (table "abl")',
        "CEB (the reference) against variants that each remove one component: contrastive precedents "
        "(`ceb-positives-only`), similarity retrieval (`ceb-random-retrieval`), the majority vote (`ceb-v1`), "
        "the repetition flag (`ceb-no-repetition`) and the whole bank (`static`). ΔECE = ECE(variant) − "
        f"ECE(CEB), positive when the variant is worse calibrated. {_HEADLINE}",
    )
    ablation = component_ablation(headline)
    rep.data["ablation"] = [
        {"critic": a.critic, "method": a.method, "variant": a.variant, "delta_ece": a.delta_ece} | _scores_json(a.row)
        for a in ablation
    ]
    if not ablation:
        variants = ", ".join(f"`{m}`" for m, _ in ablation_variants()[1:])
        rep.note(f"Skipped: needs `ceb` and at least one of {variants} scored by the same critic.")
        return
    notes = _coverage_notes(rows, _blocks((a.critic, a.method) for a in ablation))
    rep.table(ablation_table(ablation, notes=notes))


def _gt_oracle_section(rep: _Report, rows: Sequence[MetricRow]) -> None:
    rep.section(
        '9. Closing the gap to a ground-truth oracle (table "gt-oracle")',
        f"**ORACLE:** `{ORACLE_METHOD}` fills its bank with the held-out ground-truth step labels instead of "
        "hindsight pseudo-labels. It reads labels no deployed system has: an upper bound, never a method. "
        "ECE of Static, CEB and the oracle per stream, pooled when all three ran on the same streams; "
        "CEB−Oracle is the error due to pseudo-label noise, Static−Oracle the headroom a perfectly labelled bank "
        "could close, and Closed = (Static − CEB) / (Static − Oracle) the share CEB closes (n/a when "
        "Static = Oracle).",
    )
    gaps = gt_oracle_gap(rows)
    rep.data["gt_oracle"] = [asdict(g) for g in gaps]
    if not gaps:
        rep.note(f"Skipped: needs `static`, `ceb` and `{ORACLE_METHOD}` on a shared stream and critic.")
        return
    notes = ["ORACLE: the GT oracle reads held-out labels (unavailable in deployment); it bounds, never competes."]
    rep.table(gt_oracle_table(gaps, notes=notes))


def _sweep_json(sweep: Sweep | None) -> dict[str, Any] | None:
    if sweep is None:
        return None
    fixed = "k" if sweep.swept == "votes" else "votes"
    return {
        "swept": sweep.swept,
        fixed: sweep.fixed,
        "values": list(sweep.values),
        "cells": [
            {"critic": c.critic, "method": c.method, "votes": c.votes, "k": c.k} | _scores_json(c.row)
            for c in sweep.cells
        ],
    }


def _sweep_notes(rows: Sequence[MetricRow], sweep: Sweep) -> list[str]:
    name = "V" if sweep.swept == "votes" else "k"
    filled = dict.fromkeys(f"{name}={c.votes if sweep.swept == 'votes' else c.k}: `{c.method}`" for c in sweep.cells)
    return [
        f"Cells filled by {', '.join(filled)}.",
        *_coverage_notes(rows, _blocks((c.critic, c.method) for c in sweep.cells)),
    ]


def _sweep_sections(
    rep: _Report,
    rows: Sequence[MetricRow],
    headline: Mapping[tuple[str, str], MetricRow],
    methods: Mapping[str, ResolvedMethod],
    settings: CEBConfig,
) -> None:
    family = (
        "The methods that differ from CEB only in V and k: `ceb` (V = ceb.votes, k = ceb.k), the sweep cells "
        "`ceb-V<v>-k<k>` (a missing part takes the run's value) and `ceb-v1` (V = 1; left out when a "
        "`ceb-V1-k<k>` ran). When several share a (V, k), `ceb` fills the cell, else a sweep cell."
    )
    rep.section(
        '10. Hindsight vote count sweep (table "vsweep")',
        f"{family} The V sweep is taken at the k with the most distinct V (ties: ceb.k, then the smaller k); "
        f"cells are ECE / Brier / AUC, a row per critic. {_HEADLINE}",
    )
    votes = vote_sweep(headline, methods, settings)
    rep.data["v_sweep"] = _sweep_json(votes)
    if votes is None:
        rep.note("Skipped: needs CEB methods at two distinct V with the same k (e.g. `ceb` and `ceb-V1`).")
    else:
        rep.table(vsweep_table(votes, notes=_sweep_notes(rows, votes)))

    rep.section(
        '11. Retrieval depth sweep (table "topk")',
        f"The same methods at V = ceb.votes (else the V with the most distinct k), a row per k (precedents per "
        f"class). {_HEADLINE}",
    )
    depth = k_sweep(headline, methods, settings)
    rep.data["k_sweep"] = _sweep_json(depth)
    if depth is None:
        rep.note("Skipped: needs CEB methods at two distinct k with the same V (e.g. `ceb` and `ceb-k1`).")
    else:
        rep.table(topk_table(depth, notes=_sweep_notes(rows, depth)))


def _token_cost_section(
    rep: _Report,
    rows: Sequence[MetricRow],
    base: Sequence[Lane],
    headline: Mapping[tuple[str, str], MetricRow],
    methods: Mapping[str, ResolvedMethod],
) -> None:
    rep.section(
        '12. Token cost of retrieval depth (table "token-cost")',
        "Mean tokens per LLM-critic call over the steps that carry a count (failed steps included: the call was "
        "made), all streams of the lowest-order lanes. Tokens are counted with tiktoken `cl100k_base` on the "
        "critic prompt's message contents (chat-template tokens excluded); bank tokens are the prompt's tokens "
        "minus those of the same prompt without the precedent section. Δ vs k=1 is the relative change in mean "
        "total input tokens against the method with k = 1, the same V and otherwise the same switches. ECE is "
        "the main table's.",
    )
    costs = token_costs(base, headline, methods)
    rep.data["token_cost"] = [asdict(t) for t in costs]
    if not costs:
        rep.note(
            "Skipped: no LLM-critic row carries `input_tokens` (score with `critic.count_tokens = true` to count)."
        )
        return
    notes = [
        f"{method_label(t.method)}{f' ({t.critic})' if t.critic else ''}: {t.n_counted} of {t.n_steps} steps "
        "carry a count."
        for t in costs
        if t.n_counted < t.n_steps
    ]
    rep.table(
        token_cost_table(costs, notes=notes + _coverage_notes(rows, _blocks((t.critic, t.method) for t in costs)))
    )


def _retrieval_section(
    rep: _Report,
    rows: Sequence[MetricRow],
    headline: Mapping[tuple[str, str], MetricRow],
    methods: Mapping[str, ResolvedMethod],
) -> None:
    rep.section(
        '13. Retrieval mechanism (table "retrieval")',
        "CEB with precedents drawn at random from the bank (`ceb-random-retrieval`), by dense embeddings "
        "(`ceb-dense-retrieval`: all-MiniLM-L6-v2 sentence embeddings, cosine in a faiss index) and by the "
        f"run's configured retriever (`ceb`, deployed), all else identical. {_HEADLINE}",
    )
    compared = retrieval_comparison(headline, methods)
    rep.data["retrieval"] = [
        {"critic": r.critic, "method": r.method, "retriever": r.retriever, "deployed": r.deployed} | _scores_json(r.row)
        for r in compared
    ]
    if not compared:
        names = ", ".join(f"`{m}`" for m in retrieval_methods())
        rep.note(f"Skipped: needs two of {names} with different retrievers, scored by the same critic.")
        return
    rep.table(retrieval_table(compared, notes=_coverage_notes(rows, _blocks((r.critic, r.method) for r in compared))))


def _jsonable(value: Any) -> Any:
    """Plain JSON values: arrays to lists, NaN and infinities to ``None``, tuple keys never appear."""
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
