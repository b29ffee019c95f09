"""The table model: columns, cells, rows and blocks of a result table, and the paper's method names and order.

A :class:`Table` is plain data: column groups (one per stream, like the dataset groups of the paper's
Table 1), blocks of rows (one per critic, like its "Model" blocks) and cells holding numbers. Rendering
lives in :mod:`ceb.eval.tables.render`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from ceb.errors import ConfigError
from ceb.stages.methods import GROUPS, resolve_method

__all__ = ["Better", "Block", "Cell", "Column", "Row", "Table", "method_label", "method_sort_key"]

Better = Literal["lower", "higher"]
"""Which direction of a column is better."""


def method_label(method: str) -> str:
    """The table name of ``method`` from the catalogue (``"ptrue"`` -> ``"P(True)"``), or ``method`` when unknown."""
    try:
        return resolve_method(method).display
    except ConfigError:
        return method


def method_sort_key(method: str) -> tuple[int, int, str]:
    """Sort key of the paper's row order: baselines, Static, CEB, ablations, oracle, sweep cells, then unknowns.

    The order is the catalogue's (:meth:`~ceb.stages.methods.MethodSpec.sort_key`).
    """
    try:
        return resolve_method(method).sort_key()
    except ConfigError:
        return (len(GROUPS), 0, method)


@dataclass(frozen=True, slots=True)
class Column:
    """One numeric column.

    Attributes:
        name: Header text (plain text; escaped for LaTeX unless ``latex`` is given).
        better: ``"lower"`` or ``"higher"`` to bold the best value, ``None`` for no bold.
        digits: Decimals printed.
        scale: Factor applied before printing (100 prints fractions as percentages).
        latex: Header as LaTeX source, used verbatim.
        signed: Print a sign on positive values too (``+0.065``), for differences.
        suffix: Printed right after the number (``"%"`` gives ``+18%``); escaped for LaTeX.
    """

    name: str
    better: Better | None = None
    digits: int = 3
    scale: float = 1.0
    latex: str | None = None
    signed: bool = False
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class Cell:
    """One cell: a value with an optional spread, or a fixed text.

    Attributes:
        value: The number, or ``None`` for "n/a".
        low: Lower end of an interval printed as ``[low, high]``.
        high: Upper end of the interval.
        std: Standard deviation printed as ``± std``.
        text: Printed instead of the number (never bold).
    """

    value: float | None = None
    low: float | None = None
    high: float | None = None
    std: float | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One row: a label and one cell per column; ``compete=False`` marks a reference row (never bold)."""

    label: str
    cells: tuple[Cell, ...]
    compete: bool = True


@dataclass(frozen=True, slots=True)
class Block:
    """A block of rows sharing a label (a critic), separated from the next block by a rule."""

    label: str
    rows: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class Table:
    r"""A table in the paper's layout.

    Attributes:
        caption: Caption (plain text).
        label: LaTeX label and file stem, e.g. ``"main"`` (``\label{tab:main}``).
        groups: Column groups as ``(group header, columns)``; a single group with an empty header prints no
            group row.
        blocks: Row blocks; when every block label is empty the block column is omitted.
        row_header: Header of the row-label column.
        block_header: Header of the block-label column.
        notes: Lines printed under the Markdown table.
    """

    caption: str
    label: str
    groups: tuple[tuple[str, tuple[Column, ...]], ...]
    blocks: tuple[Block, ...]
    row_header: str = "Method"
    block_header: str = "Critic"
    notes: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[Column, ...]:
        """All columns, group by group."""
        return tuple(c for _, cols in self.groups for c in cols)
