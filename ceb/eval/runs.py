"""The metrics of a run directory, pooled one way everywhere: ``metrics.json``, ``ceb score`` and ``ceb metrics``.

One entry per (critic, method, stream, order); ``(pooled)`` entries pool every stream of a (critic, method) within
one order (a step counts once); with ``R > 1`` orders, a ``(pooled)`` entry with ``order = None`` holds the mean
and sd over orders (``ece_sd``...); then the reference rows of :mod:`ceb.eval.reference_rules` (order 0, marked
``"reference": true``). Failed, ``not_available`` and unlabelled steps are left out and counted.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ceb.eval.lanes import POOLED, ScoredLane, lanes_from_rows
from ceb.eval.metrics import summarize
from ceb.eval.reference_rules import (
    BASE_RATE,
    RANK_ONLY,
    REFERENCES,
    REPETITION_FLAG,
    RepetitionFlags,
    reference_lanes,
    repetition_flags,
)
from ceb.pipeline.results import StepRow, read_step_rows
from ceb.pipeline.rundir import RunDir

__all__ = ["BASE_RATE", "MEAN_METRICS", "POOLED", "POOLING", "run_metrics", "write_metrics"]

POOLING = (
    "per stream and order; (pooled): all streams within one stream order; "
    "order = None: mean and sd over orders of the per-order pooled values"
)
"""How the entries pool, written into ``metrics.json`` and printed under the CLI table."""
MEAN_METRICS = ("ece", "ece_equal_mass", "brier", "auroc")
"""Metrics averaged over orders in the ``order = None`` entries."""

_Key = tuple[str, str, str, int]  # critic, method, stream, order


@dataclass
class _Cell:
    ys: list[int] = field(default_factory=list)
    ps: list[float] = field(default_factory=list)
    failed: int = 0
    unlabeled: int = 0
    not_available: int = 0

    def add(self, row: StepRow) -> None:
        if row.status == "not_available":
            self.not_available += 1
        elif row.score is None:
            self.failed += 1
        elif row.label is None:
            self.unlabeled += 1
        else:
            self.ys.append(row.label)
            self.ps.append(row.score)

    def merge(self, other: _Cell) -> None:
        self.ys += other.ys
        self.ps += other.ps
        self.failed += other.failed
        self.unlabeled += other.unlabeled
        self.not_available += other.not_available

    def entry(self, n_bins: int) -> dict[str, Any]:
        out: dict[str, Any] = {"failed": self.failed, "unlabeled": self.unlabeled, "not_available": self.not_available}
        if self.ys:
            out |= summarize(self.ys, self.ps, n_bins=n_bins).to_dict()
            out["ece_equal_mass"] = summarize(self.ys, self.ps, n_bins=n_bins, strategy="quantile").ece
        else:
            out["n"] = 0
        return out


def run_metrics(run_dir: str | Path, *, n_bins: int = 10) -> dict[str, Any]:
    """ECE (equal width and equal mass), Brier and AUROC of a run, pooled as the module docstring says.

    Returns:
        ``{"n_bins", "orders", "pooling", "results": [...]}``, plus ``references_missing`` when a reference could
        not be built.

    Raises:
        RunError: No complete run (:meth:`~ceb.pipeline.rundir.RunDir.require_readable`), or a bad line of
            ``scores.jsonl`` before its last (file and line named).
    """
    RunDir(run_dir).require_readable()
    cells: dict[_Key, _Cell] = defaultdict(_Cell)
    # In stream order within each lane, whatever order the rows were written in (the copies of a bank-free
    # method's rows follow their source's order, ceb.pipeline.pool), so that sums are taken in one order.
    rows = sorted(read_step_rows(RunDir(run_dir).scores), key=lambda r: (r.position, r.step))
    for row in rows:
        cells[(row.critic, row.method, row.stream, row.order)].add(row)
    results: list[dict[str, Any]] = []
    for (critic, method, stream, order), cell in sorted(cells.items()):
        results.append(_entry(critic, method, stream, order) | cell.entry(n_bins))

    pooled: dict[tuple[str, str, int], _Cell] = defaultdict(_Cell)
    for (critic, method, _, order), cell in sorted(cells.items()):
        pooled[(critic, method, order)].merge(cell)
    per_order: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for (critic, method, order), cell in sorted(pooled.items()):
        entry = _entry(critic, method, POOLED, order) | cell.entry(n_bins)
        results.append(entry)
        per_order[(critic, method)].append(entry)
    orders = len({order for *_, order in cells})
    for (critic, method), entries in sorted(per_order.items()):
        if len(entries) > 1:
            results.append(_mean_over_orders(critic, method, entries))

    flags = repetition_flags(RunDir(run_dir))
    results += _reference_entries(lanes_from_rows(r for r in rows if r.order == 0), flags, n_bins)
    out = {"n_bins": n_bins, "orders": orders, "pooling": POOLING, "results": results}
    if flags.missing:
        out["references_missing"] = {REPETITION_FLAG: dict(flags.missing)}
    return out


def _reference_entries(lanes: list[ScoredLane], flags: RepetitionFlags, n_bins: int) -> list[dict[str, Any]]:
    """The reference rows (:mod:`ceb.eval.reference_rules`) per stream in order 0, then pooled per critic."""
    refs = reference_lanes(lanes, flags)
    out = []
    pooled: dict[tuple[str, str], _Cell] = defaultdict(_Cell)
    for lane in refs:
        use = lane.usable
        cell = _Cell(ys=lane.label[use].astype(int).tolist(), ps=lane.score[use].tolist())
        out.append(_entry(lane.critic, lane.method, lane.stream, 0) | _reference_entry(lane.method, cell, n_bins))
        pooled[(lane.critic, lane.method)].merge(cell)
    out.sort(key=lambda e: (e["critic"], REFERENCES.index(e["method"]), e["stream"]))
    if len({lane.stream for lane in refs}) > 1:
        for (critic, method), cell in pooled.items():
            out.append(_entry(critic, method, POOLED, 0) | _reference_entry(method, cell, n_bins))
    return out


def _reference_entry(method: str, cell: _Cell, n_bins: int) -> dict[str, Any]:
    entry = cell.entry(n_bins) | {"reference": True}
    if method in RANK_ONLY:  # a ranking, not a probability: its ECE and Brier would describe a rule, not a confidence
        entry |= dict.fromkeys(("mean_score", "ece", "ece_equal_mass", "brier"), None)
    return entry


def _entry(critic: str, method: str, stream: str, order: int | None) -> dict[str, Any]:
    return {"stream": stream, "order": order, "critic": critic, "method": method}


def _mean_over_orders(critic: str, method: str, entries: list[dict[str, Any]]) -> dict[str, Any]:
    out = _entry(critic, method, POOLED, None) | {"orders": len(entries), "n": entries[0].get("n", 0)}
    for name in MEAN_METRICS:
        values = [e[name] for e in entries if e.get(name) is not None]
        out[name] = statistics.fmean(values) if values else None
        out[f"{name}_sd"] = statistics.stdev(values) if len(values) > 1 else None
    for count in ("failed", "unlabeled", "not_available"):
        out[count] = sum(e[count] for e in entries)
    return out


def write_metrics(run_dir: str | Path, metrics: dict[str, Any]) -> Path:
    """Write ``metrics`` to ``run_dir/metrics.json`` and return the path."""
    return RunDir(run_dir).write_metrics(metrics)
