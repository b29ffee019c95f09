"""Pieces shared by the table builders: the metric columns and the per-critic, per-stream grid."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from ceb.eval.calibration import MetricRow
from ceb.eval.tables.model import Block, Cell, Column, Row, Table, method_label, method_sort_key

__all__ = ["AUC", "BRIER", "ECE", "critic_blocks", "finite_or_none", "grid", "metric_cells"]

ECE = Column("ECE", "lower")
"""Equal-width ECE, lower is better."""
BRIER = Column("Brier", "lower")
"""Brier score, lower is better."""
AUC = Column("AUC", "higher")
"""AUROC, higher is better."""


def grid(
    keys: Sequence[tuple[str, str, str]],
    columns: tuple[Column, ...],
    cells: Callable[[str, str, str], tuple[Cell, ...] | None],
    *,
    caption: str,
    label: str,
    extra_rows: Callable[[str, Sequence[str]], list[Row]] | None = None,
    notes: Sequence[str] = (),
) -> Table:
    """Blocks per critic, column groups per stream, rows per method, from ``(stream, critic, method)`` keys."""
    streams = list(dict.fromkeys(k[0] for k in keys))
    critics = sorted({k[1] for k in keys})
    blocks = []
    for critic in critics:
        methods = sorted({k[2] for k in keys if k[1] == critic}, key=method_sort_key)
        rows = []
        for method in methods:
            row_cells: list[Cell] = []
            for stream in streams:
                got = cells(stream, critic, method)
                row_cells += list(got) if got is not None else [Cell() for _ in columns]
            rows.append(Row(method_label(method), tuple(row_cells)))
        if extra_rows is not None:
            rows += extra_rows(critic, streams)
        blocks.append(Block(critic, tuple(rows)))
    groups = tuple((stream, columns) for stream in streams)
    return Table(caption=caption, label=label, groups=groups, blocks=tuple(blocks), notes=tuple(notes))


def finite_or_none(value: float) -> float | None:
    """``value`` as a float, or ``None`` (printed ``n/a``) when it is NaN or infinite."""
    return None if not np.isfinite(value) else float(value)


def metric_cells(row: MetricRow | None) -> tuple[Cell, Cell, Cell]:
    """ECE, Brier and AUC cells of a metric row; three ``n/a`` cells when it has no numbers."""
    if row is None or row.summary is None:
        return (Cell(), Cell(), Cell())
    s = row.summary
    return (Cell(s.ece), Cell(s.brier), Cell(s.auroc))


def critic_blocks(rows: Mapping[str, list[Row]]) -> tuple[Block, ...]:
    """One block per critic, in the mapping's order."""
    return tuple(Block(critic, tuple(block)) for critic, block in rows.items())
