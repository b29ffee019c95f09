"""The appendix and ablation tables on hand-computed cases.

Most methods score two steps: trajectory A (label 1) with confidence ``a`` and trajectory B (label 0) with
``b``. With ``a`` and ``b`` in different ECE bins, ECE = ((1 - a) + b) / 2, Brier = ((1 - a)^2 + b^2) / 2 and
AUC = 1 when ``a > b``; with ``a == b`` (one bin), ECE = |a - 0.5| and AUC = 0.5.
"""

from __future__ import annotations

from typing import Any

import pytest

from ceb.config import CEBConfig
from ceb.eval.ablations import (
    component_ablation,
    coverage_notes,
    gt_oracle_gap,
    headline_rows,
    k_sweep,
    method_settings,
    retrieval_comparison,
    token_costs,
    vote_sweep,
)
from ceb.eval.calibration import MetricRow, metric_rows
from ceb.eval.lanes import POOLED, base_lanes, lanes_from_rows
from ceb.eval.render import bold_cells, to_latex, to_markdown
from ceb.eval.sections.appendix import (
    ablation_table,
    gt_oracle_table,
    retrieval_table,
    token_cost_table,
    topk_table,
    vsweep_table,
)
from ceb.stages.methods import MethodSpec, ResolvedMethod
from tests.support.builders import step_rows


def _pair(method: str, a: float | None, b: float | None, *, stream: str = "web", **kw: Any) -> list[dict[str, Any]]:
    """Trajectory A: one step, label 1, confidence ``a``; trajectory B: one step, label 0, confidence ``b``."""
    common = {"stream": stream, "method": method, "step": 0} | kw
    return [
        common | {"trajectory": f"{stream}/A", "score": a, "label": 1},
        common | {"trajectory": f"{stream}/B", "score": b, "label": 0},
    ]


def _rows(*groups: list[dict[str, Any]]) -> list[MetricRow]:
    return metric_rows(lanes_from_rows(step_rows([r for g in groups for r in g])), n_boot=0)


# --- settings ---------------------------------------------------------------------------------------------


def test_method_settings_resolve_v_k_retriever_and_skip_unknown_names() -> None:
    got = method_settings(
        ["ceb", "ceb-single-vote", "ceb-V3", "ceb-k1", "ceb-V2-k4", "ceb-random-retrieval", "nope"],
        CEBConfig(votes=3, k=1),
    )
    assert {m: (s.votes, s.k, s.retriever) for m, s in got.items()} == {
        "ceb": (3, 1, "tfidf"),
        "ceb-single-vote": (1, 1, "tfidf"),
        "ceb-V3": (3, 1, "tfidf"),
        "ceb-k1": (3, 1, "tfidf"),
        "ceb-V2-k4": (2, 4, "tfidf"),
        "ceb-random-retrieval": (3, 1, "random"),
    }
    assert got["ceb"].switches == got["ceb-V2-k4"].switches != got["ceb-random-retrieval"].switches


def test_headline_row_is_pooled_when_a_method_ran_on_several_streams() -> None:
    rows = _rows(_pair("ceb", 0.85, 0.25), _pair("ceb", 0.95, 0.15, stream="os"), _pair("static", 0.85, 0.85))
    head = headline_rows(rows)
    assert head[("", "ceb")].stream == POOLED and head[("", "ceb")].n == 4
    assert head[("", "static")].stream == "web"
    (note,) = coverage_notes(rows, [("", "ceb"), ("", "static")])
    assert "ceb: os, web; static: web" in note
    assert coverage_notes(rows, [("", "static")]) == []


# --- component ablation -----------------------------------------------------------------------------------


def test_component_ablation_delta_ece_by_hand() -> None:
    rows = _rows(
        _pair("ceb", 0.8, 0.2),  # ECE (0.2 + 0.2) / 2 = 0.20, Brier (0.04 + 0.04) / 2 = 0.04
        _pair("ceb-positives-only", 0.7, 0.3),  # ECE 0.30, Brier 0.09
        _pair("ceb-no-repetition", 0.85, 0.35),  # ECE 0.25
        _pair("static", 0.9, 0.9),  # one bin: ECE |0.9 - 0.5| = 0.40, Brier (0.01 + 0.81) / 2 = 0.41, AUC 0.5
        _pair("ppl", 0.5, 0.5),  # not a row of the ablation
    )
    ablation = component_ablation(headline_rows(rows))
    assert [a.method for a in ablation] == ["ceb", "ceb-positives-only", "ceb-no-repetition", "static"]
    deltas = {a.method: a.delta_ece for a in ablation}
    assert deltas["ceb"] is None
    assert deltas["ceb-positives-only"] == pytest.approx(0.10)
    assert deltas["ceb-no-repetition"] == pytest.approx(0.05)
    assert deltas["static"] == pytest.approx(0.20)
    static = ablation[-1].row.summary
    assert static is not None and static.brier == pytest.approx(0.41) and static.auroc == pytest.approx(0.5)

    table = ablation_table(ablation)
    md = to_markdown(table)
    # Bold: best per column; the three methods with AUC 1 tie.
    assert "| CEB (reference) | **0.200** | **0.040** | **1.000** | — |" in md
    assert "| − contrastive (positives only) | 0.300 | 0.090 | **1.000** | +0.100 |" in md
    assert "| Static (no bank) | 0.400 | 0.410 | 0.500 | +0.200 |" in md
    latex = to_latex(table)
    assert r"\label{tab:abl}" in latex and r"$\Delta$ECE" in latex
    assert r"$-$ contrastive (positives only) & 0.300 & 0.090 & \textbf{1.000} & $+0.100$ \\" in latex


def test_component_ablation_needs_ceb_and_a_variant_per_critic() -> None:
    assert component_ablation(headline_rows(_rows(_pair("ceb", 0.85, 0.25), _pair("ppl", 0.5, 0.5)))) == []
    assert component_ablation(headline_rows(_rows(_pair("static", 0.5, 0.5), _pair("ceb-single-vote", 0.5, 0.5)))) == []
    # One critic qualifies, the other ran CEB alone: one block.
    rows = _rows(
        _pair("ceb", 0.85, 0.25, critic="gpt"),
        _pair("static", 0.85, 0.85, critic="gpt"),
        _pair("ceb", 0.85, 0.25, critic="qwen"),
    )
    assert {a.critic for a in component_ablation(headline_rows(rows))} == {"gpt"}


# --- GT oracle --------------------------------------------------------------------------------------------


def test_gt_oracle_gap_per_stream_and_pooled_by_hand() -> None:
    rows = _rows(
        _pair("static", 0.85, 0.85),  # web: 0.35
        _pair("ceb", 0.85, 0.25),  # web: 0.20
        _pair("ceb-gt-oracle", 0.95, 0.15),  # web: 0.10
        _pair("static", 0.85, 0.85, stream="os"),  # os: 0.35
        _pair("ceb", 0.95, 0.15, stream="os"),  # os: 0.10
        _pair("ceb-gt-oracle", 0.95, 0.15, stream="os"),  # os: 0.10
    )
    gaps = {g.stream: g for g in gt_oracle_gap(rows)}
    assert list(gaps) == ["os", "web", POOLED]  # streams sorted (lanes_from_rows), pooled last
    web = gaps["web"]
    assert (web.static, web.ceb, web.oracle) == pytest.approx((0.35, 0.20, 0.10))
    assert (web.ceb_minus_oracle, web.static_minus_oracle) == pytest.approx((0.10, 0.25))
    assert web.closed == pytest.approx(0.60)  # (0.35 - 0.20) / (0.35 - 0.10)
    assert gaps["os"].closed == pytest.approx(1.0)
    # Pooled, 4 steps each: static 0.35; ceb |1-.85|,.25,|1-.95|,.15 -> 0.15; oracle 0.10. (0.35-0.15)/0.25.
    pooled = gaps[POOLED]
    assert (pooled.static, pooled.ceb, pooled.oracle) == pytest.approx((0.35, 0.15, 0.10))
    assert pooled.closed == pytest.approx(0.80)

    md = to_markdown(gt_oracle_table(list(gaps.values())))
    assert "| web | 0.350 | 0.200 | 0.100 | 0.100 | 0.250 | 60% |" in md
    assert "| pooled | 0.350 | 0.150 | 0.100 | 0.050 | 0.250 | 80% |" in md
    assert "ORACLE" in md and "**" not in md.split("\n", 1)[1]  # no bold: streams do not compete
    assert r"60\%" in to_latex(gt_oracle_table(list(gaps.values())))


def test_gt_oracle_closed_is_na_when_static_equals_oracle_and_needs_all_three() -> None:
    rows = _rows(_pair("static", 0.95, 0.15), _pair("ceb", 0.85, 0.25), _pair("ceb-gt-oracle", 0.95, 0.15))
    (gap,) = gt_oracle_gap(rows)
    assert gap.static_minus_oracle == pytest.approx(0.0) and gap.closed is None
    assert "| web | 0.100 | 0.200 | 0.100 | 0.100 | 0.000 | n/a |" in to_markdown(gt_oracle_table([gap]))
    assert gt_oracle_gap(_rows(_pair("static", 0.85, 0.85), _pair("ceb", 0.85, 0.25))) == []
    # The oracle ran on one of two streams: that stream only, and no pooled row over different steps.
    two = _rows(
        _pair("static", 0.85, 0.85), _pair("ceb", 0.85, 0.25), _pair("ceb-gt-oracle", 0.95, 0.15),
        _pair("static", 0.85, 0.85, stream="os"), _pair("ceb", 0.85, 0.25, stream="os"),
    )  # fmt: skip
    assert [g.stream for g in gt_oracle_gap(two)] == ["web"]


# --- V and k sweeps ---------------------------------------------------------------------------------------


def _sweep_inputs(
    names: list[str], settings: CEBConfig
) -> tuple[dict[tuple[str, str], MetricRow], dict[str, ResolvedMethod]]:
    rows = _rows(*(_pair(name, 0.85 - 0.01 * i, 0.25) for i, name in enumerate(names)))
    return headline_rows(rows), method_settings(names, settings)


def test_vote_sweep_ceb_v1_v3_gives_three_groups_at_k2() -> None:
    settings = CEBConfig()
    head, methods = _sweep_inputs(
        ["ceb", "ceb-V1", "ceb-V3", "ceb-single-vote", "ceb-positives-only", "ceb-k1"], settings
    )
    sweep = vote_sweep(head, methods, settings)
    assert sweep is not None
    assert (sweep.swept, sweep.fixed, sweep.values) == ("votes", 2, (1, 3, 5))
    # ceb-V1 fills V=1 rather than the ablation ceb-single-vote; the positives-only ablation is not a sweep cell.
    assert [(c.votes, c.method) for c in sweep.cells] == [(1, "ceb-V1"), (3, "ceb-V3"), (5, "ceb")]
    # ECE of ceb-V3 (index 2): ((1 - 0.83) + 0.25) / 2.
    assert sweep.cells[1].row.summary is not None and sweep.cells[1].row.summary.ece == pytest.approx(0.21)

    table = vsweep_table(sweep)
    md = to_markdown(table)
    assert "| Critic | V=1: ECE | V=1: Brier | V=1: AUC | V=3: ECE |" in md
    assert md.count("| critic |") == 1 and not bold_cells(table)
    assert r"\multicolumn{3}{c|}{\textbf{V=1}}" in to_latex(table)


def test_vote_sweep_uses_ceb_v1_without_a_sweep_cell_and_needs_two_v() -> None:
    settings = CEBConfig()
    head, methods = _sweep_inputs(["ceb", "ceb-single-vote"], settings)
    sweep = vote_sweep(head, methods, settings)
    assert sweep is not None and [(c.votes, c.method) for c in sweep.cells] == [(1, "ceb-single-vote"), (5, "ceb")]
    head, methods = _sweep_inputs(["ceb", "ceb-k1", "static", "ceb-positives-only"], settings)
    assert vote_sweep(head, methods, settings) is None


def test_sweeps_follow_the_run_config() -> None:
    # ceb.votes = 3, ceb.k = 1: ceb is (3, 1), like ceb-V3; ceb fills the shared cell.
    settings = CEBConfig(votes=3, k=1, retriever="tfidf")
    head, methods = _sweep_inputs(["ceb", "ceb-V3", "ceb-V1", "ceb-V3-k2", "ceb-V1-k2"], settings)
    votes = vote_sweep(head, methods, settings)
    # k=1 and k=2 both have V in {1, 3}: the tie goes to ceb.k.
    assert votes is not None and votes.fixed == 1
    assert [(c.votes, c.method) for c in votes.cells] == [(1, "ceb-V1"), (3, "ceb")]
    depth = k_sweep(head, methods, settings)
    assert depth is not None and (depth.fixed, depth.values) == (3, (1, 2))
    assert [(c.k, c.method) for c in depth.cells] == [(1, "ceb"), (2, "ceb-V3-k2")]


def test_k_sweep_at_config_votes_else_the_v_with_most_k() -> None:
    settings = CEBConfig()
    head, methods = _sweep_inputs(["ceb", "ceb-k1", "ceb-k5", "ceb-V3-k1", "ceb-V3-k2", "ceb-V3-k3"], settings)
    sweep = k_sweep(head, methods, settings)
    # V=3 has more k values, but V = ceb.votes = 5 has two and is preferred.
    assert sweep is not None and (sweep.fixed, sweep.values) == (5, (1, 2, 5))
    head, methods = _sweep_inputs(["ceb", "ceb-V3-k1", "ceb-V3-k2"], settings)
    sweep = k_sweep(head, methods, settings)
    assert sweep is not None and (sweep.fixed, [c.method for c in sweep.cells]) == (3, ["ceb-V3-k1", "ceb-V3-k2"])
    md = to_markdown(topk_table(sweep))
    # ceb-V3-k1 (index 1): ECE ((1 - 0.84) + 0.25) / 2 = 0.205; ceb-V3-k2 (index 2): 0.21. Best in bold.
    assert "| 1 | **0.205** |" in md and "| 2 | 0.210 |" in md
    head, methods = _sweep_inputs(["ceb", "ceb-V3"], settings)
    assert k_sweep(head, methods, settings) is None


# --- token cost -------------------------------------------------------------------------------------------


def _tokens(rows: list[dict[str, Any]], inputs: list[int | None], banks: list[int | None]) -> list[dict[str, Any]]:
    return [r | {"input_tokens": i, "bank_tokens": b} for r, i, b in zip(rows, inputs, banks, strict=True)]


def test_token_costs_means_and_delta_vs_k1_by_hand() -> None:
    failed = {"stream": "web", "method": "ceb", "trajectory": "web/C", "step": 0, "score": None, "label": 1}
    old = {"stream": "web", "method": "ceb", "trajectory": "web/D", "step": 0, "score": 0.85, "label": 1}
    raw = [
        *_tokens(_pair("static", 0.85, 0.85), [1400, 1400], [0, 0]),
        # ceb: the failed step's call was made and counts; the old row without the keys does not.
        *_tokens(_pair("ceb", 0.85, 0.25), [2000, 2100], [600, 700]),
        failed | {"input_tokens": 2200, "bank_tokens": 800},
        old,
        *_tokens(_pair("ceb-k1", 0.75, 0.25), [1700, 1800], [300, 400]),
        *_tokens(_pair("ceb-k5", 0.85, 0.15), [2975, 2975], [1550, 1550]),
        *_tokens(_pair("ceb-V3", 0.85, 0.25), [2100, 2100], [700, 700]),
        *_tokens(_pair("ceb-positives-only", 0.85, 0.25), [1800, 1800], [380, 380]),
        *_pair("ppl", 0.5, 0.5),  # a baseline: no counts, no row
    ]
    lanes = lanes_from_rows(step_rows(raw))
    head = headline_rows(metric_rows(lanes, n_boot=0))
    settings = CEBConfig()
    costs = token_costs(base_lanes(lanes), head, method_settings([la.method for la in lanes], settings))
    assert [c.method for c in costs] == ["static", "ceb-V3", "ceb-k1", "ceb", "ceb-positives-only", "ceb-k5"]
    by = {c.method: c for c in costs}
    ceb = by["ceb"]
    assert (ceb.n_steps, ceb.n_counted) == (4, 3)
    assert ceb.input_tokens == pytest.approx(2100.0)  # (2000 + 2100 + 2200) / 3
    assert ceb.bank_tokens == pytest.approx(700.0)
    assert ceb.reference == "ceb-k1" and ceb.delta_vs_k1 == pytest.approx(0.20)  # 2100 / 1750 - 1
    assert by["ceb-k5"].delta_vs_k1 == pytest.approx(0.70)  # 2975 / 1750 - 1
    assert by["ceb-k1"].delta_vs_k1 is None  # k = 1 itself
    assert by["ceb-V3"].delta_vs_k1 is None  # no V=3, k=1 method
    assert by["ceb-positives-only"].delta_vs_k1 is None  # other switches
    assert (by["static"].votes, by["static"].k, by["static"].bank_tokens) == (None, None, 0.0)
    # ceb's ECE has the old row too (scored, labelled): bins 0.85 (2 positives) and 0.25: (2 * 0.15 + 0.25) / 3.
    assert ceb.ece == pytest.approx(0.55 / 3) and by["ceb-k1"].ece == pytest.approx(0.25)

    md = to_markdown(token_cost_table(costs))
    assert "| Method | V | k (per class) | Bank tokens | Total input tokens | Δ vs k=1 | ECE↓ |" in md
    assert "| Static | — | — | 0 | 1400 | — | 0.350 |" in md
    assert "| CEB | 5 | 2 | 700 | 2100 | +20% | 0.183 |" in md
    assert "| ceb-k5 | 5 | 5 | 1550 | 2975 | +70% | **0.150** |" in md
    assert r"$+70$\%" in to_latex(token_cost_table(costs))


def test_token_costs_need_a_count() -> None:
    lanes = lanes_from_rows(step_rows(_pair("ceb", 0.85, 0.25) + _pair("static", 0.5, 0.5)))
    head = headline_rows(metric_rows(lanes, n_boot=0))
    assert token_costs(lanes, head, method_settings(["ceb", "static"], CEBConfig())) == []


# --- retrieval --------------------------------------------------------------------------------------------


def _dense(settings: CEBConfig) -> ResolvedMethod:
    """``ceb-dense-retrieval`` built here, so the test does not depend on the registry knowing it."""
    return MethodSpec("ceb-dense-retrieval", retriever="dense").resolve(settings)


def test_retrieval_comparison_rows_and_table() -> None:
    settings = CEBConfig()
    rows = _rows(
        _pair("ceb-random-retrieval", 0.75, 0.35),  # 0.30
        _pair("ceb-dense-retrieval", 0.85, 0.35),  # 0.25
        _pair("ceb", 0.85, 0.25),  # 0.20
    )
    head = headline_rows(rows)
    methods = method_settings(["ceb", "ceb-random-retrieval"], settings) | {"ceb-dense-retrieval": _dense(settings)}
    compared = retrieval_comparison(head, methods)
    assert [(r.method, r.retriever, r.deployed) for r in compared] == [
        ("ceb-random-retrieval", "random", False),
        ("ceb-dense-retrieval", "dense", False),
        ("ceb", "tfidf", True),
    ]
    md = to_markdown(retrieval_table(compared))
    assert "| Random | 0.300 |" in md
    assert "| Dense (all-MiniLM-L6-v2 + faiss) | 0.250 |" in md
    assert "| TF-IDF (deployed) | **0.200** |" in md
    # A method this version does not know is left out; one retriever alone is no comparison.
    without_dense = {m: s for m, s in methods.items() if m != "ceb-dense-retrieval"}
    assert [r.method for r in retrieval_comparison(head, without_dense)] == ["ceb-random-retrieval", "ceb"]
    only_ceb = {m: s for m, s in without_dense.items() if m == "ceb"}
    assert retrieval_comparison(head, only_ceb) == []


def test_retrieval_comparison_keeps_ceb_when_it_is_the_dense_run() -> None:
    settings = CEBConfig(retriever="dense")
    head = headline_rows(_rows(_pair("ceb-dense-retrieval", 0.85, 0.35), _pair("ceb", 0.85, 0.25)))
    methods = method_settings(["ceb"], settings) | {"ceb-dense-retrieval": _dense(settings)}
    assert retrieval_comparison(head, methods) == []  # one retriever: ceb's row, no comparison
