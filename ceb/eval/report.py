"""``ceb report RUN_DIR``: the paper's analyses, tables and figures from a run directory.

:func:`build_report` writes into ``RUN_DIR/report/``: ``report.md`` (every table inline, each figure embedded),
``report.json`` (every number, null where undefined), a ``<label>.md`` / ``<label>.tex`` per table (``main``,
``main-ci``, ``paired``, ``stream-averaging``, ``depth``, ``selective``, ``task-success``, ``label-shift``, the
appendix tables ``abl``, ``gt-oracle``, ``vsweep``, ``topk``, ``token-cost``, ``retrieval``) and the figures
(``cumulative-ece-*``, ``depth-*``, ``reliability-*``). It renders the run header with the run's warnings, the
provenance block (:mod:`ceb.eval.provenance`), then each section of :mod:`ceb.eval.sections` in number order; an
analysis that does not apply is skipped with a note, never an error. The command is :mod:`ceb.cli.report`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ceb.config import BaselineConfig
from ceb.errors import ConfigError, RunError
from ceb.eval.ablations import method_settings
from ceb.eval.bootstrap import MIN_TRAJECTORIES
from ceb.eval.lanes import ScoredLane, base_lanes, lanes_from_rows, method_label
from ceb.eval.plots import FIGURE_FORMATS, FigureFormat, method_colors
from ceb.eval.provenance import provenance_block
from ceb.eval.render import OUTSIDE_MARK, Data, Lines, Note, Renderer, Result
from ceb.eval.sections import ReportContext, registered_sections
from ceb.eval.sections.base import drawn
from ceb.logs import get_logger
from ceb.pipeline.results import StepRow, read_step_rows
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.score_warnings import run_warnings
from ceb.progress import Progress
from ceb.stages.methods import resolve_method

__all__ = ["adaptations", "build_report"]

log = get_logger(__name__)


def build_report(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    n_bins: int = 10,
    n_boot: int = 1000,
    seed: int = 0,
    figure_formats: Iterable[FigureFormat] = ("png",),
) -> Path:
    """Run every analysis of the paper on a run directory and write the report (module docstring).

    Args:
        run_dir: A run directory holding ``scores.jsonl`` (possibly of a partial run).
        out_dir: Where to write; default ``run_dir / "report"``, created if missing, earlier files overwritten.
        n_bins: Equal-width ECE bins (also the reliability diagrams').
        n_boot: Bootstrap replicates per row (0: no intervals).
        seed: Bootstrap seed; the same run, settings and seed give the same bytes.
        figure_formats: ``png``, ``pdf`` and / or ``svg`` (:data:`ceb.eval.plots.FIGURE_FORMATS`).

    Returns:
        The path of ``report.md``.

    Raises:
        RunError: No ``scores.jsonl``, no row, a bad line before the last, or not a complete run.
        ValueError: ``n_bins < 1``, ``n_boot < 0``, or ``figure_formats`` is empty or unknown.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if n_boot < 0:
        raise ValueError(f"n_boot must be >= 0, got {n_boot}")
    formats = tuple(dict.fromkeys(figure_formats))
    if not formats or not set(formats) <= set(FIGURE_FORMATS):
        raise ValueError(f"figure_formats must be one or more of {', '.join(FIGURE_FORMATS)}, got {formats}")
    run_files = RunDir(run_dir)
    run = run_files.path
    scores = run_files.require_scores()
    run_files.require_readable()
    rows = list(read_step_rows(scores))
    lanes = lanes_from_rows(rows)
    if not lanes:
        raise RunError(f"{scores} holds no scored step")
    out = Path(out_dir) if out_dir is not None else run_files.report_dir
    out.mkdir(parents=True, exist_ok=True)
    base = base_lanes(lanes)
    # Colours go to the methods figures draw (scored, not sweep cells), so that those are far apart on the palette.
    colors = method_colors(sorted(drawn(lane.method for lane in lanes if lane.note is None)))
    config, recorded = run_files.recorded_or_default()
    settings, source = config.ceb, RunDir.CONFIG if recorded else "defaults"
    methods = method_settings((lane.method for lane in lanes), settings)
    ctx = ReportContext(run, lanes, base, n_bins, n_boot, seed, colors, settings, methods)
    adapted = adaptations({lane.method for lane in lanes}, config.baselines)
    rep = Renderer(out, formats, marks={method_label(m): text for m, text in adapted.items()})
    rep.write(_header(ctx, source, adapted))
    rep.write(_warnings(run_files, rows))
    rep.write(provenance_block(run_files), "What scored this run")
    labelled = any(lane.usable.any() for lane in base)
    if not labelled:
        rep.write(
            Result(
                (
                    Note(
                        "No scored step carries a label, so the analyses that measure against labels (calibration, "
                        "ranking, selective execution, task success, the appendix tables) are left out: what follows "
                        "reads the scores alone. Labels are read only for evaluation; add them to the stream (`label` "
                        "per step) to get them."
                    ),
                )
            )
        )
    sections = registered_sections(labelled=labelled)
    with Progress("report", len(sections), "sections") as progress:
        for sec in sections:
            progress.set_note(sec.heading)
            rep.write(sec(ctx), sec.heading)
            progress.advance()
    path = rep.finish()
    log.info("report.written", path=str(path), lanes=len(lanes))
    return path


def adaptations(methods: Iterable[str], baselines: BaselineConfig) -> dict[str, str]:
    """How each of ``methods`` that ceb computes otherwise than the paper's section 4.1 defines it differs, in words.

    P(True), PRO and Verbalization (:mod:`ceb.stages.baselines`); the report marks their rows † and footnotes this.
    """
    ptrue = (
        "the paper reads the probability mass on the True token; here both whole answers are teacher-forced and "
        "the score is p(True) / (p(True) + p(False)) (`baselines.ptrue_forced = true`)"
        if baselines.ptrue_forced
        else "the paper reads the probability mass on the True token; here it is the mass of True's variants among "
        "the first answer token's top log-probs, renormalised against False's (`baselines.ptrue_forced = false`)"
    )
    text = {
        "ptrue": ptrue,
        "pro": "the paper scores PRO on the action it samples itself; here it is the weight of the stream's frozen "
        f"action (teacher-forced) in a softmax over it and {baselines.pro_samples} sampled actions' sequence "
        "log-probs, so it scores the same actions as the other methods",
        "verbalized": "in the paper the agent emits its own action and confidence in one pass and is scored on that "
        "action; here the actor continues the stream's frozen action with its stated confidence "
        "(`continue_final_message`), so it scores the same actions as the other methods",
    }
    return {m: text[m] for m in sorted(set(methods)) if m in text}


def _header(ctx: ReportContext, source: str, adapted: Mapping[str, str]) -> Result:
    """The run header: what the run holds, how the numbers are computed, the settings the appendix reads."""
    run, lanes, n_bins, n_boot, seed, settings = ctx.run, ctx.lanes, ctx.n_bins, ctx.n_boot, ctx.seed, ctx.settings
    streams = list(dict.fromkeys(lane.stream for lane in lanes))
    names = list(dict.fromkeys(lane.method for lane in lanes))
    critics = sorted({lane.critic for lane in lanes})
    orders = {s: sorted({lane.order for lane in lanes if lane.stream == s}) for s in streams}
    shown = {"defaults": f"CEBConfig defaults: no readable {RunDir.CONFIG}"}.get(source, source)
    unknown = sorted({lane.method for lane in lanes} - set(ctx.methods))
    lines = [
        f"# Report: {run.name}",
        "",
        f"- Run directory: `{run}`",
        f"- Streams: {', '.join(f'`{s}` ({len(orders[s])} order(s))' for s in streams)}",
        f"- Methods: {', '.join(f'`{m}`' for m in names)}",
        f"- Critics: {', '.join(f'`{c}`' for c in critics) if any(critics) else 'one (unlabelled)'}",
        f"- Scored rows: {sum(lane.n_rows for lane in lanes)}, of which failed (no score): "
        f"{sum(lane.n_failed for lane in lanes)}, unlabeled: {sum(lane.n_unlabeled for lane in lanes)}",
        *_reused_line(lanes),
        f"- ECE: {n_bins} equal-width bins. Intervals: 95% percentile bootstrap over trajectories, "
        f"{n_boot} replicates, seed {seed}.",
        "- Failed steps (no score) and unlabeled steps are left out of every metric and counted. "
        "Methods that scored nothing on a stream print n/a.",
        *(
            [
                f"- Intervals over fewer than {MIN_TRAJECTORIES} trajectories carry a caveat under their table; an "
                f"interval that misses its own point estimate is marked {OUTSIDE_MARK} and explained there."
            ]
            if n_boot
            else []
        ),
        *(f"- {method_label(m)}† differs from the paper's definition: {text}." for m, text in adapted.items()),
        "- Every analysis except the multi-order one uses each (stream, critic, method)'s lowest order "
        "(normally 0, the input-file order), so each step counts once.",
        f"- Appendix tables: CEB methods resolve V, k and the retriever over V={settings.votes}, k={settings.k}, "
        f"retriever `{settings.retriever}` ({shown}).",
    ]
    if unknown:
        lines.append(
            f"- Methods this version of ceb does not know, left out of the appendix tables: "
            f"{', '.join(f'`{m}`' for m in unknown)}"
        )
    ceb = {"votes": settings.votes, "k": settings.k, "retriever": settings.retriever}
    data = {
        "run_dir": str(run),
        "reused_rows": sum(lane.n_reused for lane in lanes),
        "streams": streams,
        "methods": names,
        "critics": critics,
        "orders": orders,
        "n_bins": n_bins,
        "n_boot": n_boot,
        "seed": seed,
        "level": 0.95,
        "ceb": ceb | {"source": source},
        "unknown_methods": unknown,
        "min_trajectories": MIN_TRAJECTORIES,
        "adapted_methods": dict(adapted),
    }
    return Result((Lines(tuple(lines)), Data("run", data)))


def _reused_line(lanes: Sequence[ScoredLane]) -> list[str]:
    """The header line on rows copied between orders (:mod:`ceb.pipeline.pool`), when the run has any."""
    reused = sum(lane.n_reused for lane in lanes)
    if not reused:
        return []
    methods = sorted({lane.method for lane in lanes if lane.n_reused})
    return [
        f"- Rows copied from another stream order: {reused} (methods without a bank, {', '.join(methods)}, scored "
        "once per stream and copied to the other orders: they see the same prompts in every order). Each order's "
        "numbers read them as rows of that order."
    ]


def _warnings(run: RunDir, rows: Sequence[StepRow]) -> Result:
    """The run's warnings (:func:`ceb.pipeline.score_warnings.run_warnings`, read anew) and the empty banks."""
    found = [*run_warnings(run), *_empty_banks(rows)]
    lines = ["", f"**Warnings** (numbers below that mean little; also in `{RunDir.SUMMARY}`):", ""] if found else []
    return Result((Lines((*lines, *(f"- warning: {w}" for w in found))), Data("warnings", found)))


def _empty_banks(rows: Sequence[StepRow]) -> list[str]:
    """A warning per bank method whose bank held no record at any step of a stream: it scored as ``static``."""
    largest: dict[tuple[str, str], int] = {}
    for row in rows:
        key = (row.method, row.stream)
        largest[key] = max(largest.get(key, 0), row.bank_size or 0)
    out = []
    for method in sorted({m for m, _ in largest}):
        try:
            banked = resolve_method(method).use_bank
        except ConfigError:
            continue
        empty = sorted(s for (m, s), size in largest.items() if m == method and size == 0)
        if banked and empty:
            out.append(
                f"method {method}: its bank stayed empty on {', '.join(empty)} (no record when any step was scored: "
                "every hindsight step abstained or failed, or the stream has one trajectory), so it scored every "
                "step without a precedent, as `static` does: its numbers there are Static's, not a bank's"
            )
    return out
