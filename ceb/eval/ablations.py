"""The appendix and ablation tables' numbers, derived from the main table's metric rows (nothing recomputed).

A method's headline row is its pooled row when it ran on several streams, else its one row (:func:`headline_rows`);
its ``V``, ``k`` and retriever are its :class:`~ceb.stages.methods.MethodSpec` switches over the run's ``ceb``
section. Methods this version of ``ceb`` does not know are left out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ceb.config import CEBConfig
from ceb.errors import ConfigError
from ceb.eval.calibration import MetricRow
from ceb.eval.lanes import POOLED, ScoredLane
from ceb.stages.methods import MethodSpec, ResolvedMethod, all_methods, resolve_method

__all__ = [
    "ORACLE_METHOD",
    "RETRIEVER_LABELS",
    "AblationRow",
    "OracleGap",
    "RetrieverRow",
    "Sweep",
    "SweepCell",
    "TokenCost",
    "component_ablation",
    "coverage_notes",
    "gt_oracle_gap",
    "headline_rows",
    "is_sweep_cell",
    "k_sweep",
    "ablation_variants",
    "method_settings",
    "oracle_methods",
    "retrieval_comparison",
    "retrieval_methods",
    "token_costs",
    "vote_sweep",
]


def ablation_variants() -> list[tuple[str, str]]:
    """``(method, row label)`` of the component ablation in the paper's order; the first (``ceb``) is the reference."""
    rows = [m for m in all_methods() if m.ablation]
    rows.sort(key=lambda m: (m.name != "ceb", m.group == "baseline", m.sort_key()))
    return [(m.name, m.ablation or m.name) for m in rows]


def oracle_methods() -> list[str]:
    """Methods whose bank holds the held-out labels: upper bounds no deployed system reaches."""
    return [m.name for m in all_methods() if m.group == "oracle"]


ORACLE_METHOD = "ceb-gt-oracle"
"""The GT-oracle method of the oracle-gap table (the catalogue's oracle; a test keeps the two in step)."""


def retrieval_methods() -> list[str]:
    """The retrieval-mechanism table's methods: CEB's variants that change only the retriever, then ``ceb``."""
    ceb = resolve_method("ceb")

    def only_retriever(m: MethodSpec) -> bool:
        same = (m.votes, m.k, m.behaviour) == (ceb.votes, ceb.k, ceb.behaviour)
        return m.retriever is not None and same

    return [m.name for m in all_methods() if m.name != "ceb" and only_retriever(m)] + ["ceb"]


RETRIEVER_LABELS: Mapping[str, str] = {
    "random": "Random",
    "dense": "Dense (all-MiniLM-L6-v2 + faiss)",
    "tfidf": "TF-IDF",
    "tfidf-reference": "TF-IDF (scikit-learn reference)",
}
"""Display names of the retrievers (:data:`ceb.bank.RETRIEVERS`); others print as they are."""


def method_settings(names: Iterable[str], ceb: CEBConfig) -> dict[str, ResolvedMethod]:
    """Each known method name resolved over the run's ``ceb`` section; unknown names are left out."""
    out: dict[str, ResolvedMethod] = {}
    for name in dict.fromkeys(names):
        try:
            out[name] = resolve_method(name).resolve(ceb)
        except ConfigError:
            continue
    return out


def headline_rows(rows: Iterable[MetricRow]) -> dict[tuple[str, str], MetricRow]:
    """``(critic, method) -> row``: the pooled row when the method ran on several streams, else its one row."""
    out: dict[tuple[str, str], MetricRow] = {}
    for r in rows:
        key = (r.critic, r.method)
        if key not in out or r.stream == POOLED:
            out[key] = r
    return out


def coverage_notes(rows: Iterable[MetricRow], compared: Iterable[tuple[str, str]]) -> list[str]:
    """A note per critic whose compared ``(critic, method)`` pairs ran on different streams, naming each's streams."""
    streams: dict[str, dict[str, list[str]]] = {}
    for critic, method in compared:
        streams.setdefault(critic, {}).setdefault(method, [])
    for r in rows:
        if r.method in streams.get(r.critic, {}) and r.stream != POOLED:
            streams[r.critic][r.method].append(r.stream)
    notes = []
    for critic, per_method in streams.items():
        present = {m: s for m, s in per_method.items() if s}
        if len({tuple(sorted(s)) for s in present.values()}) > 1:
            cover = "; ".join(f"{m}: {', '.join(s)}" for m, s in present.items())
            where = f"critic {critic}" if critic else "the run"
            notes.append(
                f"In {where} the methods ran on different streams ({cover}), so their rows are not on the same steps."
            )
    return notes


def _ece(row: MetricRow | None) -> float | None:
    return None if row is None or row.summary is None else row.summary.ece


def _critics(headline: Mapping[tuple[str, str], MetricRow]) -> list[str]:
    return sorted({critic for critic, _ in headline})


@dataclass(frozen=True, slots=True)
class AblationRow:
    """One variant of the component ablation (paper table "abl").

    Attributes:
        variant: Row label, e.g. ``"− contrastive (positives only)"``.
        row: The method's headline metric row.
        delta_ece: ``ECE(variant) - ECE(ceb)``; ``None`` for ``ceb`` itself and when either has no numbers.
    """

    critic: str
    method: str
    variant: str
    row: MetricRow
    delta_ece: float | None


def component_ablation(headline: Mapping[tuple[str, str], MetricRow]) -> list[AblationRow]:
    """CEB against each ablated variant that ran, in :func:`ablation_variants` order, critic by critic (sorted).

    A critic without ``ceb`` and at least one variant gets no rows.
    """
    out: list[AblationRow] = []
    variants = ablation_variants()
    reference = variants[0][0]
    for critic in _critics(headline):
        ref = headline.get((critic, reference))
        present = [(m, label) for m, label in variants if (critic, m) in headline]
        if ref is None or len(present) < 2:
            continue
        ref_ece = _ece(ref)
        for method, label in present:
            row = headline[(critic, method)]
            value = _ece(row)
            delta = None if method == reference or value is None or ref_ece is None else value - ref_ece
            out.append(AblationRow(critic, method, label, row, delta))
    return out


@dataclass(frozen=True, slots=True)
class OracleGap:
    """ECE of Static, CEB and the GT oracle (``ceb-gt-oracle``) on one stream or pooled, and the gap CEB closes.

    Attributes:
        ceb_minus_oracle: The part of CEB's error due to pseudo-label noise.
        static_minus_oracle: The headroom a perfectly labelled bank could close.
        closed: ``(static - ceb) / (static - oracle)``, a fraction; ``None`` when ``static - oracle <= 1e-12``
            (no gap to close) or a value is missing.
    """

    stream: str
    critic: str
    static: float | None
    ceb: float | None
    oracle: float | None
    ceb_minus_oracle: float | None
    static_minus_oracle: float | None
    closed: float | None


_ORACLE_SET = ("static", "ceb", ORACLE_METHOD)


def gt_oracle_gap(rows: Sequence[MetricRow]) -> list[OracleGap]:
    """Static vs CEB vs the GT oracle in ECE per stream, and pooled when all three ran on the same streams.

    Returns:
        Rows critic by critic (sorted), streams in the order of ``rows``, pooled last.
    """
    by_key = {(r.critic, r.stream, r.method): r for r in rows}
    streams = list(dict.fromkeys(r.stream for r in rows if r.stream != POOLED))
    out: list[OracleGap] = []
    for critic in sorted({r.critic for r in rows}):
        ran = {m: {s for s in streams if (critic, s, m) in by_key} for m in _ORACLE_SET}
        shared = [s for s in streams if all(s in ran[m] for m in _ORACLE_SET)]
        same = len({frozenset(v) for v in ran.values()}) == 1
        pooled = [POOLED] if same and all((critic, POOLED, m) in by_key for m in _ORACLE_SET) else []
        for stream in shared + pooled:
            s, c, o = (_ece(by_key[(critic, stream, m)]) for m in _ORACLE_SET)
            out.append(_oracle_gap(stream, critic, s, c, o))
    return out


def _oracle_gap(stream: str, critic: str, s: float | None, c: float | None, o: float | None) -> OracleGap:
    ceb_gap = None if c is None or o is None else c - o
    static_gap = None if s is None or o is None else s - o
    closed = None
    if s is not None and c is not None and static_gap is not None and static_gap > 1e-12:
        closed = (s - c) / static_gap
    return OracleGap(stream, critic, s, c, o, ceb_gap, static_gap, closed)


@dataclass(frozen=True, slots=True)
class SweepCell:
    """The metrics of one (critic, V, k) cell of a sweep; ``method`` is the method that fills it."""

    critic: str
    method: str
    votes: int
    k: int
    row: MetricRow


@dataclass(frozen=True, slots=True)
class Sweep:
    """A one-parameter sweep over the CEB methods that differ only in ``V`` and ``k``.

    Attributes:
        swept: ``"votes"`` (fixed ``k``) or ``"k"`` (fixed ``V``).
        fixed: The value of the other parameter.
        values: The swept values present, increasing.
        cells: One per (critic, swept value), critic by critic (sorted), then by value.
    """

    swept: Literal["votes", "k"]
    fixed: int
    values: tuple[int, ...]
    cells: tuple[SweepCell, ...]


def _sweep_rank(method: str) -> tuple[int, str]:
    """Which of several methods with one (V, k) fills the cell: ``ceb``, then sweep cells, then the rest."""
    return (0 if method == "ceb" else 1 if is_sweep_cell(method) else 2, method)


def is_sweep_cell(method: str) -> bool:
    """Whether ``method`` is a V / k sweep cell of the catalogue (``ceb-V<v>-k<k>``)."""
    try:
        return resolve_method(method).group == "sweep"
    except ConfigError:
        return False


def _sweep_family(
    headline: Mapping[tuple[str, str], MetricRow], methods: Mapping[str, ResolvedMethod], settings: CEBConfig
) -> list[tuple[str, ResolvedMethod]]:
    """``(critic, method)`` pairs that ran and differ from ``ceb`` in ``V`` and ``k`` only."""
    ceb = resolve_method("ceb").resolve(settings).switches
    return [(c, methods[m]) for c, m in headline if m in methods and methods[m].switches == ceb]


def _sweep(
    headline: Mapping[tuple[str, str], MetricRow],
    family: Sequence[tuple[str, ResolvedMethod]],
    swept: Literal["votes", "k"],
    fixed: int,
) -> Sweep:
    def value(m: ResolvedMethod) -> int:
        return m.votes if swept == "votes" else m.k

    def other(m: ResolvedMethod) -> int:
        return m.k if swept == "votes" else m.votes

    chosen: dict[tuple[str, int], ResolvedMethod] = {}
    for critic, m in family:
        if other(m) != fixed:
            continue
        key = (critic, value(m))
        if key not in chosen or _sweep_rank(m.method) < _sweep_rank(chosen[key].method):
            chosen[key] = m
    cells = tuple(
        SweepCell(critic, m.method, m.votes, m.k, headline[(critic, m.method)])
        for (critic, _), m in sorted(chosen.items(), key=lambda kv: kv[0])
    )
    return Sweep(swept, fixed, tuple(sorted({v for _, v in chosen})), cells)


def vote_sweep(
    headline: Mapping[tuple[str, str], MetricRow], methods: Mapping[str, ResolvedMethod], settings: CEBConfig
) -> Sweep | None:
    """The V sweep (paper table "vsweep") at the ``k`` with the most distinct ``V`` (ties: ``ceb.k``, then smaller).

    ``ceb-single-vote`` fills ``V = 1`` only when no ``ceb-V1-k<k>`` ran. ``None`` when no ``k`` has two ``V``.
    """
    family = _sweep_family(headline, methods, settings)
    by_k: dict[int, set[int]] = {}
    for _, m in family:
        by_k.setdefault(m.k, set()).add(m.votes)
    if not by_k:
        return None
    k = max(by_k, key=lambda kk: (len(by_k[kk]), kk == settings.k, -kk))
    return _sweep(headline, family, "votes", k) if len(by_k[k]) >= 2 else None


def k_sweep(
    headline: Mapping[tuple[str, str], MetricRow], methods: Mapping[str, ResolvedMethod], settings: CEBConfig
) -> Sweep | None:
    """The k sweep (paper table "topk") at ``V = ceb.votes``, else the ``V`` with the most ``k`` (ties: smaller).

    ``None`` when no ``V`` has two distinct ``k``.
    """
    family = _sweep_family(headline, methods, settings)
    by_v: dict[int, set[int]] = {}
    for _, m in family:
        by_v.setdefault(m.votes, set()).add(m.k)
    if not by_v:
        return None
    v = max(by_v, key=lambda vv: (vv == settings.votes and len(by_v[vv]) >= 2, len(by_v[vv]), -vv))
    return _sweep(headline, family, "k", v) if len(by_v[v]) >= 2 else None


@dataclass(frozen=True, slots=True)
class TokenCost:
    """Mean ``cl100k_base`` critic prompt tokens per call of one (critic, method) (paper table "token-cost").

    Attributes:
        votes: ``V``, or ``None`` for a method without a bank.
        k: Precedents per class, or ``None`` without a bank.
        n_counted: Steps carrying a count (failed steps included: their call was made).
        bank_tokens: Mean tokens of the precedent section; ``NaN`` when no step carries it.
        reference: The ``k = 1`` method with the same ``V`` and switches, if one was counted.
        delta_vs_k1: ``input_tokens / reference's - 1`` (0.18 prints as +18%), or ``None``.
    """

    critic: str
    method: str
    votes: int | None
    k: int | None
    n_steps: int
    n_counted: int
    input_tokens: float
    bank_tokens: float
    reference: str | None
    delta_vs_k1: float | None
    ece: float | None


def token_costs(
    lanes: Iterable[ScoredLane], headline: Mapping[tuple[str, str], MetricRow], methods: Mapping[str, ResolvedMethod]
) -> list[TokenCost]:
    """Mean prompt and precedent-section tokens per call of the LLM-critic methods that counted them.

    Returns:
        Per critic (sorted): methods without a bank first, then by ``(V, k)``.
    """
    grouped: dict[tuple[str, str], list[ScoredLane]] = {}
    for lane in lanes:
        m = methods.get(lane.method)
        if m is not None and m.uses_llm_critic:
            grouped.setdefault((lane.critic, lane.method), []).append(lane)
    measured: dict[tuple[str, str], tuple[int, int, float, float]] = {}
    for key, group in grouped.items():
        total = np.concatenate([lane.input_tokens for lane in group])
        bank = np.concatenate([lane.bank_tokens for lane in group])
        counted = ~np.isnan(total)
        if counted.any():
            has_bank = ~np.isnan(bank)
            bank_mean = float(bank[has_bank].mean()) if has_bank.any() else math.nan
            measured[key] = (int(total.shape[0]), int(counted.sum()), float(total[counted].mean()), bank_mean)

    def order(key: tuple[str, str]) -> tuple[str, bool, int, int, tuple[int, str]]:
        m = methods[key[1]]
        return (key[0], m.spec.use_bank, m.votes, m.k, _sweep_rank(m.method))

    out: list[TokenCost] = []
    for critic, method in sorted(measured, key=order):
        m = methods[method]
        n_steps, n_counted, total_mean, bank_mean = measured[(critic, method)]
        reference = _k1_peer(critic, m, [methods[name] for c, name in measured if c == critic])
        delta = None
        if reference is not None:
            delta = total_mean / measured[(critic, reference.method)][2] - 1.0
        out.append(
            TokenCost(
                critic=critic,
                method=method,
                votes=m.votes if m.spec.use_bank else None,
                k=m.k if m.spec.use_bank else None,
                n_steps=n_steps,
                n_counted=n_counted,
                input_tokens=total_mean,
                bank_tokens=bank_mean,
                reference=None if reference is None else reference.method,
                delta_vs_k1=delta,
                ece=_ece(headline.get((critic, method))),
            )
        )
    return out


def _k1_peer(critic: str, m: ResolvedMethod, candidates: Sequence[ResolvedMethod]) -> ResolvedMethod | None:
    if not m.spec.use_bank or m.k == 1:
        return None
    peers = [p for p in candidates if p.k == 1 and p.votes == m.votes and p.switches == m.switches]
    return min(peers, key=lambda p: _sweep_rank(p.method)) if peers else None


@dataclass(frozen=True, slots=True)
class RetrieverRow:
    """One retriever of the retrieval-mechanism table; ``deployed`` for ``ceb``'s (the run's ``ceb.retriever``)."""

    critic: str
    method: str
    retriever: str
    deployed: bool
    row: MetricRow


def retrieval_comparison(
    headline: Mapping[tuple[str, str], MetricRow], methods: Mapping[str, ResolvedMethod]
) -> list[RetrieverRow]:
    """Random, dense and the deployed retriever, per critic that ran two of them; ``ceb`` wins a shared retriever."""
    out: list[RetrieverRow] = []
    order = retrieval_methods()
    for critic in _critics(headline):
        rows: dict[str, RetrieverRow] = {}
        for method in reversed(order):  # ceb first, so it keeps its retriever's row
            m = methods.get(method)
            if m is None or (critic, method) not in headline or m.retriever in rows:
                continue
            rows[m.retriever] = RetrieverRow(critic, method, m.retriever, method == "ceb", headline[(critic, method)])
        if len(rows) >= 2:
            out += sorted(rows.values(), key=lambda r: order.index(r.method))
    return out
