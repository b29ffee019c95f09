"""Report sections of the appendix tables: ablation, GT oracle, V and k sweeps, token cost, retrieval (8-13)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from ceb.errors import CEBError
from ceb.eval.ablations import (
    ORACLE_METHOD,
    RETRIEVER_LABELS,
    AblationRow,
    OracleGap,
    RetrieverRow,
    Sweep,
    TokenCost,
    ablation_variants,
    component_ablation,
    coverage_notes,
    gt_oracle_gap,
    k_sweep,
    retrieval_comparison,
    retrieval_methods,
    token_costs,
    vote_sweep,
)
from ceb.eval.calibration import MetricRow
from ceb.eval.lanes import POOLED, method_label
from ceb.eval.render import Block, Cell, Column, Data, Note, Part, Row, Table, Text
from ceb.eval.sections.base import AUC, BRIER, ECE, ReportContext, critic_blocks, finite_or_none, metric_cells, section
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.summary import DISCARDED

__all__ = ["ablation_table", "gt_oracle_table", "retrieval_table", "token_cost_table", "topk_table", "vsweep_table"]


def _scores_json(r: MetricRow) -> dict[str, Any]:
    """The numbers of a headline row: its stream (or ``POOLED``) and order, step count and metrics."""
    s = r.summary
    return {
        "stream": r.stream,
        "order": r.order,
        "n": r.n,
        "ece": None if s is None else s.ece,
        "brier": None if s is None else s.brier,
        "auroc": None if s is None else s.auroc,
    }


_HEADLINE = (
    "Numbers are the main table's (lowest-order lanes): a method's pooled row when it ran on several streams, "
    "else its row on its one stream; one block per critic."
)


@section(
    'Component ablation (table "abl")',
    needs=("rows", "headline"),
    intro="CEB (the reference) against variants that each remove one component: contrastive precedents "
    "(`ceb-positives-only`), similarity retrieval (`ceb-random-retrieval`), the majority vote "
    "(`ceb-single-vote`), the repetition flag (`ceb-no-repetition`) and the whole bank (`static`). "
    f"ΔECE = ECE(variant) − ECE(CEB), positive when the variant is worse calibrated. {_HEADLINE}",
)
def _ablation(ctx: ReportContext) -> Iterator[Part]:
    rows, headline = ctx.rows, ctx.headline
    ablation = component_ablation(headline)
    yield Data(
        "ablation",
        [
            {"critic": a.critic, "method": a.method, "variant": a.variant, "delta_ece": a.delta_ece}
            | _scores_json(a.row)
            for a in ablation
        ],
    )
    if not ablation:
        variants = ", ".join(f"`{m}`" for m, _ in ablation_variants()[1:])
        yield Note(f"Skipped: needs `ceb` and at least one of {variants} scored by the same critic.")
        return
    notes = coverage_notes(rows, [(a.critic, a.method) for a in ablation])
    yield ablation_table(ablation, notes=notes)


@section(
    'Closing the gap to a ground-truth oracle (table "gt-oracle")',
    needs=("rows",),
    intro=f"**ORACLE:** `{ORACLE_METHOD}` fills its bank with the held-out ground-truth step labels instead of "
    "hindsight pseudo-labels. It reads labels no deployed system has: an upper bound, never a method. "
    "ECE of Static, CEB and the oracle per stream, pooled when all three ran on the same streams; "
    "CEB−Oracle is the error due to pseudo-label noise, Static−Oracle the headroom a perfectly labelled bank "
    'could close, and Closed = (Static − CEB) / (Static − Oracle) the share CEB closes ("oracle below static" '
    "when the oracle is worse calibrated than Static, n/a when "
    "Static = Oracle).",
)
def _gt_oracle(ctx: ReportContext) -> Iterator[Part]:
    rows = ctx.rows
    gaps = gt_oracle_gap(rows)
    yield Data("gt_oracle", [asdict(g) for g in gaps])
    if not gaps:
        yield Note(f"Skipped: needs `static`, `ceb` and `{ORACLE_METHOD}` on a shared stream and critic.")
        return
    notes = ["ORACLE: the GT oracle reads held-out labels (unavailable in deployment); it bounds, never competes."]
    yield gt_oracle_table(gaps, notes=notes)


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
        *coverage_notes(rows, [(c.critic, c.method) for c in sweep.cells]),
    ]


@section('Hindsight vote count sweep (table "vsweep")', needs=("rows", "headline", "methods", "settings"))
def _vote_sweep_section(ctx: ReportContext) -> Iterator[Part]:
    rows, headline, methods, settings = ctx.rows, ctx.headline, ctx.methods, ctx.settings
    family = (
        "The methods that differ from CEB only in V and k: `ceb` (V = ceb.votes, k = ceb.k), the sweep cells "
        "`ceb-V<v>-k<k>` (a missing part takes the run's value) and `ceb-single-vote` (V = 1; left out when a "
        "`ceb-V1-k<k>` ran). When several share a (V, k), `ceb` fills the cell, else a sweep cell."
    )
    yield Text(
        f"{family} The V sweep is taken at the k with the most distinct V (ties: ceb.k, then the smaller k); "
        f"cells are ECE / Brier / AUC, a row per critic. {_HEADLINE}"
    )
    votes = vote_sweep(headline, methods, settings)
    yield Data("v_sweep", _sweep_json(votes))
    if votes is None:
        yield Note("Skipped: needs CEB methods at two distinct V with the same k (e.g. `ceb` and `ceb-V1`).")
    else:
        yield vsweep_table(votes, notes=_sweep_notes(rows, votes))


@section(
    'Retrieval depth sweep (table "topk")',
    needs=("rows", "headline", "methods", "settings"),
    intro=f"The same methods at V = ceb.votes (else the V with the most distinct k), a row per k (precedents per "
    f"class). {_HEADLINE}",
)
def _k_sweep_section(ctx: ReportContext) -> Iterator[Part]:
    rows, headline, methods, settings = ctx.rows, ctx.headline, ctx.methods, ctx.settings
    depth = k_sweep(headline, methods, settings)
    yield Data("k_sweep", _sweep_json(depth))
    if depth is None:
        yield Note("Skipped: needs CEB methods at two distinct k with the same V (e.g. `ceb` and `ceb-k1`).")
    else:
        yield topk_table(depth, notes=_sweep_notes(rows, depth))


@section(
    'Token cost of retrieval depth (table "token-cost")',
    needs=("run", "rows", "base", "headline", "methods"),
    intro="Mean tokens per LLM-critic call over the steps that carry a count (failed steps included: the call was "
    "made), all streams of the lowest-order lanes. Tokens are counted with tiktoken `cl100k_base` on the "
    "critic prompt's message contents (chat-template tokens excluded); bank tokens are the prompt's tokens "
    "minus those of the same prompt without the precedent section. Δ vs k=1 is the relative change in mean "
    "total input tokens against the method with k = 1, the same V and otherwise the same switches. ECE is "
    "the main table's.",
)
def _token_cost(ctx: ReportContext) -> Iterator[Part]:
    rows, base, headline, methods = ctx.rows, ctx.base, ctx.headline, ctx.methods
    try:
        summary = RunDir(ctx.run).recorded_summary() or {}
    except CEBError:  # unreadable: the provenance block says so
        summary = {}
    discarded = {k: int(summary.get(k) or 0) for k in DISCARDED}
    if discarded["discarded_requests"]:
        yield Data("discarded_speculation", discarded)
        yield Note(
            f"Speculation (`speculation`) discarded {discarded['steps_discarded']} critic calls made ahead of the "
            f"bank: {discarded['discarded_requests']} requests, {discarded['discarded_prompt_tokens']} prompt and "
            f"{discarded['discarded_completion_tokens']} completion tokens as the server reported them "
            f"(the run's summary counts them in its `requests`). No row holds them, so the means below leave them out."
        )
    costs = token_costs(base, headline, methods)
    yield Data("token_cost", [asdict(t) for t in costs])
    if not costs:
        yield Note(
            "Skipped: no LLM-critic row carries `input_tokens` (score with `critic.count_tokens = true` to count)."
        )
        return
    notes = [
        f"{method_label(t.method)}{f' ({t.critic})' if t.critic else ''}: {t.n_counted} of {t.n_steps} steps "
        "carry a count."
        for t in costs
        if t.n_counted < t.n_steps
    ]
    yield token_cost_table(costs, notes=notes + coverage_notes(rows, [(t.critic, t.method) for t in costs]))


@section(
    'Retrieval mechanism (table "retrieval")',
    needs=("rows", "headline", "methods"),
    intro="CEB with precedents drawn at random from the bank (`ceb-random-retrieval`), by dense embeddings "
    "(`ceb-dense-retrieval`: all-MiniLM-L6-v2 sentence embeddings, cosine in a faiss index) and by the "
    f"run's configured retriever (`ceb`, deployed), all else identical. {_HEADLINE}",
)
def _retrieval(ctx: ReportContext) -> Iterator[Part]:
    rows, headline, methods = ctx.rows, ctx.headline, ctx.methods
    compared = retrieval_comparison(headline, methods)
    yield Data(
        "retrieval",
        [
            {"critic": r.critic, "method": r.method, "retriever": r.retriever, "deployed": r.deployed}
            | _scores_json(r.row)
            for r in compared
        ],
    )
    if not compared:
        names = ", ".join(f"`{m}`" for m in retrieval_methods())
        yield Note(f"Skipped: needs two of {names} with different retrievers, scored by the same critic.")
        return
    yield retrieval_table(compared, notes=coverage_notes(rows, [(r.critic, r.method) for r in compared]))


def ablation_table(rows: Sequence[AblationRow], *, notes: Sequence[str] = ()) -> Table:
    """The component ablation (paper table "abl"): ECE, Brier, AUC and ΔECE against CEB, a block per critic.

    ``rows`` come from :func:`ceb.eval.ablations.component_ablation`; ΔECE prints signed (``+0.065``) and
    ``—`` on the reference row.
    """
    blocks: dict[str, list[Row]] = {}
    for r in rows:
        delta = Cell(text="—") if r.method == "ceb" else Cell(r.delta_ece)
        blocks.setdefault(r.critic, []).append(Row(r.variant, (*metric_cells(r.row), delta)))
    columns = (ECE, BRIER, AUC, Column("ΔECE", signed=True, latex=r"$\Delta$ECE"))
    return Table(
        caption="Component ablation: each variant removes one component of CEB, all scoring the same steps. "
        "ΔECE is ECE(variant) − ECE(CEB); positive means the variant is worse calibrated.",
        label="abl",
        groups=(("", columns),),
        blocks=critic_blocks(blocks),
        row_header="Variant",
        notes=tuple(notes),
    )


def gt_oracle_table(gaps: Sequence[OracleGap], *, notes: Sequence[str] = ()) -> Table:
    """Static vs CEB vs the GT oracle in ECE (paper table "gt-oracle"), a row per stream, a block per critic.

    ``gaps`` come from :func:`ceb.eval.ablations.gt_oracle_gap`. Closed is
    ``(Static − CEB) / (Static − Oracle)`` in percent, ``n/a`` when the denominator is 0 and "oracle below
    static" when it is negative (a share of a gap that does not exist would mislead). No column is bold:
    the rows are streams, not competitors.
    """
    columns = (
        Column("Static"),
        Column("CEB"),
        Column("GT oracle"),
        Column("CEB−Oracle"),
        Column("Static−Oracle"),
        Column("Closed", digits=0, scale=100.0, suffix="%"),
    )
    blocks: dict[str, list[Row]] = {}
    for g in gaps:
        below = g.static_minus_oracle is not None and g.static_minus_oracle < -1e-12
        closed = Cell(text="oracle below static") if below else Cell(g.closed)
        cells = (*(Cell(v) for v in (g.static, g.ceb, g.oracle, g.ceb_minus_oracle, g.static_minus_oracle)), closed)
        label = "pooled" if g.stream == POOLED else g.stream
        blocks.setdefault(g.critic, []).append(Row(label, cells))
    return Table(
        caption="GT-oracle upper bound (ECE, lower is better). ORACLE: the GT oracle's bank holds the held-out "
        "ground-truth step labels, which no deployed system has; CEB's bank holds hindsight pseudo-labels. "
        "Closed = (Static − CEB) / (Static − Oracle).",
        label="gt-oracle",
        groups=(("", columns),),
        blocks=critic_blocks(blocks),
        row_header="Stream",
        notes=tuple(notes),
    )


def vsweep_table(sweep: Sweep, *, notes: Sequence[str] = ()) -> Table:
    """The hindsight vote count sweep (paper table "vsweep"): a column group per ``V``, a row per critic.

    ``sweep`` comes from :func:`ceb.eval.ablations.vote_sweep`. Cells are ECE / Brier / AUC, none bold (the
    rows are critics, not competitors). The unlabelled critic of a single-critic run prints as ``critic``.
    """
    columns = (Column("ECE"), Column("Brier"), Column("AUC"))
    cells = {(c.critic, c.votes): c for c in sweep.cells}
    rows = []
    for critic in dict.fromkeys(c.critic for c in sweep.cells):
        row_cells: list[Cell] = []
        for v in sweep.values:
            got = cells.get((critic, v))
            row_cells += metric_cells(None if got is None else got.row)
        rows.append(Row(critic or "critic", tuple(row_cells)))
    return Table(
        caption=f"Hindsight vote count V sweep at k={sweep.fixed}. Cells are ECE / Brier / AUC.",
        label="vsweep",
        groups=tuple((f"V={v}", columns) for v in sweep.values),
        blocks=(Block("", tuple(rows)),),
        row_header="Critic",
        notes=tuple(notes),
    )


def topk_table(sweep: Sweep, *, notes: Sequence[str] = ()) -> Table:
    """The retrieval depth sweep (paper table "topk"): a row per ``k``, a block per critic, best in bold.

    ``sweep`` comes from :func:`ceb.eval.ablations.k_sweep`.
    """
    blocks: dict[str, list[Row]] = {}
    for c in sweep.cells:
        blocks.setdefault(c.critic, []).append(Row(str(c.k), metric_cells(c.row)))
    return Table(
        caption=f"Retrieval depth k sweep (precedents per class) at V={sweep.fixed}. Best per column in bold.",
        label="topk",
        groups=(("", (ECE, BRIER, AUC)),),
        blocks=critic_blocks(blocks),
        row_header="k",
        notes=tuple(notes),
    )


def token_cost_table(costs: Sequence[TokenCost], *, notes: Sequence[str] = ()) -> Table:
    """Token cost of retrieval depth (paper table "token-cost"): mean critic prompt tokens per call.

    ``costs`` come from :func:`ceb.eval.ablations.token_costs`. Δ vs k=1 is the relative change of the mean
    total input tokens against the ``k = 1`` method with the same ``V`` and switches (``+18%``), ``—`` on
    that method itself or when none ran. A method without a bank prints ``—`` for ``V`` and ``k``.
    """
    columns = (
        Column("V", digits=0),
        Column("k (per class)", digits=0, latex=r"$k$ (per class)"),
        Column("Bank tokens", digits=0),
        Column("Total input tokens", digits=0),
        Column("Δ vs k=1", digits=0, scale=100.0, signed=True, suffix="%", latex=r"$\Delta$ vs.\ $k{=}1$"),
        ECE,
    )
    blocks: dict[str, list[Row]] = {}
    for t in costs:
        cells = (
            Cell(text="—") if t.votes is None else Cell(t.votes),
            Cell(text="—") if t.k is None else Cell(t.k),
            Cell(finite_or_none(t.bank_tokens)),
            Cell(finite_or_none(t.input_tokens)),
            Cell(text="—") if t.delta_vs_k1 is None else Cell(t.delta_vs_k1),
            Cell(t.ece),
        )
        blocks.setdefault(t.critic, []).append(Row(method_label(t.method), cells))
    return Table(
        caption="Token cost of retrieval depth: mean cl100k_base tokens per critic call (bank tokens: the "
        "precedent section). Δ vs k=1 is the relative change in total input tokens against k=1 at the same V.",
        label="token-cost",
        groups=(("", columns),),
        blocks=critic_blocks(blocks),
        notes=tuple(notes),
    )


def retrieval_table(rows: Sequence[RetrieverRow], *, notes: Sequence[str] = ()) -> Table:
    """The retrieval mechanism (paper table "retrieval"): ECE, Brier, AUC per retriever, best in bold.

    ``rows`` come from :func:`ceb.eval.ablations.retrieval_comparison`; the deployed retriever (``ceb``'s)
    is marked "(deployed)".
    """
    blocks: dict[str, list[Row]] = {}
    for r in rows:
        label = RETRIEVER_LABELS.get(r.retriever, r.retriever) + (" (deployed)" if r.deployed else "")
        blocks.setdefault(r.critic, []).append(Row(label, metric_cells(r.row)))
    return Table(
        caption="Retrieval mechanism: precedents drawn at random, by dense embeddings or by the deployed "
        "retriever, otherwise identical. Best per column in bold.",
        label="retrieval",
        groups=(("", (ECE, BRIER, AUC)),),
        blocks=critic_blocks(blocks),
        row_header="Retriever",
        notes=tuple(notes),
    )
