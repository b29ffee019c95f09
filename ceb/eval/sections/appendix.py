"""Report sections of the appendix tables: ablation, GT oracle, V and k sweeps, token cost, retrieval (8-13)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from ceb.errors import CEBError
from ceb.eval.ablations import (
    ORACLE_METHOD,
    Sweep,
    ablation_variants,
    component_ablation,
    coverage_note,
    gt_oracle_gap,
    k_sweep,
    retrieval_comparison,
    retrieval_methods,
    token_costs,
    vote_sweep,
)
from ceb.eval.calibration import MetricRow
from ceb.eval.sections.base import (
    ReportContext,
    ReportWriter,
    section,
)
from ceb.eval.tables import (
    ablation_table,
    gt_oracle_table,
    method_label,
    retrieval_table,
    token_cost_table,
    topk_table,
    vsweep_table,
)
from ceb.pipeline.rundir import RunDir
from ceb.pipeline.summary import DISCARDED

__all__ = [
    "ablation",
    "gt_oracle",
    "k_sweep_section",
    "retrieval",
    "token_cost",
    "vote_sweep_section",
]


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


@section('Component ablation (table "abl")', needs=("rows", "headline"))
def ablation(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Component ablation (table 'abl')."""
    rows, headline = ctx.rows, ctx.headline
    rep.intro(
        "CEB (the reference) against variants that each remove one component: contrastive precedents "
        "(`ceb-positives-only`), similarity retrieval (`ceb-random-retrieval`), the majority vote (`ceb-single-vote`), "
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


@section('Closing the gap to a ground-truth oracle (table "gt-oracle")', needs=("rows",))
def gt_oracle(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Closing the gap to a ground-truth oracle (table 'gt-oracle')."""
    rows = ctx.rows
    rep.intro(
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


@section('Hindsight vote count sweep (table "vsweep")', needs=("rows", "headline", "methods", "settings"))
def vote_sweep_section(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Hindsight vote count sweep (table 'vsweep')."""
    rows, headline, methods, settings = ctx.rows, ctx.headline, ctx.methods, ctx.settings
    family = (
        "The methods that differ from CEB only in V and k: `ceb` (V = ceb.votes, k = ceb.k), the sweep cells "
        "`ceb-V<v>-k<k>` (a missing part takes the run's value) and `ceb-single-vote` (V = 1; left out when a "
        "`ceb-V1-k<k>` ran). When several share a (V, k), `ceb` fills the cell, else a sweep cell."
    )
    rep.intro(
        f"{family} The V sweep is taken at the k with the most distinct V (ties: ceb.k, then the smaller k); "
        f"cells are ECE / Brier / AUC, a row per critic. {_HEADLINE}",
    )
    votes = vote_sweep(headline, methods, settings)
    rep.data["v_sweep"] = _sweep_json(votes)
    if votes is None:
        rep.note("Skipped: needs CEB methods at two distinct V with the same k (e.g. `ceb` and `ceb-V1`).")
    else:
        rep.table(vsweep_table(votes, notes=_sweep_notes(rows, votes)))


@section('Retrieval depth sweep (table "topk")', needs=("rows", "headline", "methods", "settings"))
def k_sweep_section(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Retrieval depth sweep (table 'topk')."""
    rows, headline, methods, settings = ctx.rows, ctx.headline, ctx.methods, ctx.settings
    rep.intro(
        f"The same methods at V = ceb.votes (else the V with the most distinct k), a row per k (precedents per "
        f"class). {_HEADLINE}",
    )
    depth = k_sweep(headline, methods, settings)
    rep.data["k_sweep"] = _sweep_json(depth)
    if depth is None:
        rep.note("Skipped: needs CEB methods at two distinct k with the same V (e.g. `ceb` and `ceb-k1`).")
    else:
        rep.table(topk_table(depth, notes=_sweep_notes(rows, depth)))


@section('Token cost of retrieval depth (table "token-cost")', needs=("run", "rows", "base", "headline", "methods"))
def token_cost(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Token cost of retrieval depth (table 'token-cost')."""
    rows, base, headline, methods = ctx.rows, ctx.base, ctx.headline, ctx.methods
    try:
        summary = RunDir(ctx.run).recorded_summary() or {}
    except CEBError:  # unreadable: the provenance block says so
        summary = {}
    discarded = {k: int(summary.get(k) or 0) for k in DISCARDED}
    if discarded["discarded_requests"]:
        rep.data["discarded_speculation"] = discarded
        rep.note(
            f"Speculation (`speculation`) discarded {discarded['steps_discarded']} critic calls made ahead of the "
            f"bank: {discarded['discarded_requests']} requests, {discarded['discarded_prompt_tokens']} prompt and "
            f"{discarded['discarded_completion_tokens']} completion tokens as the server reported them "
            f"(`summary.json`; counted in its `requests`). No row holds them, so the means below leave them out."
        )
    rep.intro(
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


@section('Retrieval mechanism (table "retrieval")', needs=("rows", "headline", "methods"))
def retrieval(rep: ReportWriter, ctx: ReportContext) -> None:
    """Report section: Retrieval mechanism (table 'retrieval')."""
    rows, headline, methods = ctx.rows, ctx.headline, ctx.methods
    rep.intro(
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
