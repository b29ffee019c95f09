"""Builders of the appendix tables: component ablation, GT oracle gap, V and k sweeps, token cost, retrieval."""

from __future__ import annotations

from collections.abc import Sequence

from ceb.eval.ablations import RETRIEVER_LABELS, AblationRow, OracleGap, RetrieverRow, Sweep, TokenCost
from ceb.eval.lanes import POOLED
from ceb.eval.tables._common import AUC, BRIER, ECE, critic_blocks, finite_or_none, metric_cells
from ceb.eval.tables.model import Block, Cell, Column, Row, Table, method_label

__all__ = ["ablation_table", "gt_oracle_table", "retrieval_table", "token_cost_table", "topk_table", "vsweep_table"]


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
    ``(Static − CEB) / (Static − Oracle)`` in percent, ``n/a`` when the denominator is 0. No column is bold:
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
        cells = (g.static, g.ceb, g.oracle, g.ceb_minus_oracle, g.static_minus_oracle, g.closed)
        label = "pooled" if g.stream == POOLED else g.stream
        blocks.setdefault(g.critic, []).append(Row(label, tuple(Cell(v) for v in cells)))
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
