"""Result tables in the paper's layout, rendered as Markdown and LaTeX, with the best value per column in bold.

A :class:`Table` is plain data: column groups (one per stream, like the dataset groups of the paper's
Table 1), blocks of rows (one per critic, like its "Model" blocks) and cells holding numbers. The builders
(:func:`main_table`, :func:`selective_table`, ...) turn the results of :mod:`ceb.eval.analyses` into
tables; :func:`to_markdown` and :func:`to_latex` render any table.

Bold follows the paper: within each block, the best value of each column that has a direction (lower is
better for ECE and Brier, higher for AUROC and the selective-execution and task-success rates) is bold,
comparing the values as printed, so ties at the printed precision are all bold. A column is left plain
when fewer than two rows compete or every competing row prints the same value (the ``b = 0`` and ``m = 0``
base-rate columns). Reference rows (the task-success Oracle) never compete.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ceb.errors import ConfigError
from ceb.eval.ablations import RETRIEVER_LABELS, AblationRow, OracleGap, RetrieverRow, Sweep, TokenCost
from ceb.eval.averaging import STREAM_CHECKPOINTS, OrderCurves
from ceb.eval.bootstrap import Interval
from ceb.eval.calibration import DepthBucket, LabelShift, MetricRow
from ceb.eval.deployment import TaskSuccess
from ceb.eval.lanes import POOLED
from ceb.stages.methods import GROUPS, resolve_method

__all__ = [
    "Better",
    "Block",
    "Cell",
    "Column",
    "Row",
    "Table",
    "ablation_table",
    "averaging_table",
    "bold_cells",
    "depth_table",
    "format_cell",
    "gt_oracle_table",
    "label_shift_table",
    "latex_escape",
    "main_table",
    "method_label",
    "method_sort_key",
    "metric_detail_table",
    "retrieval_table",
    "selective_table",
    "task_success_table",
    "to_latex",
    "to_markdown",
    "token_cost_table",
    "topk_table",
    "vsweep_table",
]

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


# --- the table model --------------------------------------------------------------------------------------


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


def format_cell(cell: Cell, column: Column, *, latex: bool = False) -> str:
    """Print ``cell`` at ``column``'s precision: ``0.176``, ``0.176 ± 0.010``, ``0.176 [0.150, 0.201]``, ``n/a``."""
    if cell.text is not None:
        return latex_escape(cell.text) if latex else cell.text
    if cell.value is None or not np.isfinite(cell.value):
        return "n/a"
    text = _number(cell.value, column)
    if latex and column.signed:
        text = f"${text}$"  # a math minus / plus, as the paper prints differences
    text += latex_escape(column.suffix) if latex else column.suffix
    if cell.std is not None and np.isfinite(cell.std):
        text += (r" $\pm$ " if latex else " ± ") + _number(cell.std, column)
    if cell.low is not None and cell.high is not None:
        interval = f"[{_number(cell.low, column)}, {_number(cell.high, column)}]"
        text += r" {\scriptsize " + interval + "}" if latex else " " + interval
    return text


def _number(value: float, column: Column) -> str:
    sign = "+" if column.signed else ""
    return f"{value * column.scale:{sign}.{column.digits}f}"


def bold_cells(table: Table) -> set[tuple[int, int, int]]:
    """Positions ``(block, row, column)`` of the cells printed in bold (see the module docstring)."""
    out: set[tuple[int, int, int]] = set()
    for b, block in enumerate(table.blocks):
        for c, column in enumerate(table.columns):
            if column.better is None:
                continue
            printed: dict[int, float] = {}
            for r, row in enumerate(block.rows):
                cell = row.cells[c]
                if row.compete and cell.text is None and cell.value is not None and np.isfinite(cell.value):
                    printed[r] = float(_number(cell.value, column))
            if len(printed) < 2 or len(set(printed.values())) == 1:
                continue
            best = min(printed.values()) if column.better == "lower" else max(printed.values())
            out.update((b, r, c) for r, v in printed.items() if v == best)
    return out


def _arrow(column: Column) -> str:
    if column.better is None:
        return ""
    return "↓" if column.better == "lower" else "↑"


def _latex_header(column: Column) -> str:
    text = column.latex if column.latex is not None else latex_escape(column.name)
    if column.better is None:
        return text
    arrow = r"\downarrow" if column.better == "lower" else r"\uparrow"
    # "$x$$\uparrow$" would open display math; put the arrow inside a trailing math group instead.
    return text[:-1] + arrow + "$" if text.endswith("$") else text + "$" + arrow + "$"


def to_markdown(table: Table) -> str:
    """Render ``table`` as a GitHub-flavoured Markdown table, caption first, notes after.

    Column groups are folded into the headers (``"stream: ECE↓"``); the block label is printed on the first
    row of its block.
    """
    with_blocks = any(block.label for block in table.blocks)
    headers = [table.block_header] if with_blocks else []
    headers.append(table.row_header)
    for group, columns in table.groups:
        headers += [f"{group}: {c.name}{_arrow(c)}" if group else f"{c.name}{_arrow(c)}" for c in columns]
    lines = [f"**{table.caption}**", "", "| " + " | ".join(_md_escape(h) for h in headers) + " |"]
    lines.append("|" + "|".join(["---"] * (len(headers) - len(table.columns)) + ["---:"] * len(table.columns)) + "|")
    bold = bold_cells(table)
    for b, block in enumerate(table.blocks):
        for r, row in enumerate(block.rows):
            cells = [_md_escape(block.label) if r == 0 else ""] if with_blocks else []
            cells.append(_md_escape(row.label) if row.compete else f"*{_md_escape(row.label)}*")
            for c, (cell, column) in enumerate(zip(row.cells, table.columns, strict=True)):
                text = _md_escape(format_cell(cell, column))
                if (b, r, c) in bold:
                    head, _, tail = text.partition(" ")
                    text = f"**{head}**" + (f" {tail}" if tail else "")
                cells.append(text)
            lines.append("| " + " | ".join(cells) + " |")
    if table.notes:
        lines.append("")
        lines += [f"- {_md_escape(note)}" for note in table.notes]
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    return text.replace("|", r"\|")


_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
    "—": "---",
    "→": r"$\to$",
    "↓": r"$\downarrow$",
    "↑": r"$\uparrow$",
    "−": "$-$",
    "Δ": r"$\Delta$",
}


def latex_escape(text: str) -> str:
    r"""Escape LaTeX's special characters (``_`` -> ``\_``, ``%`` -> ``\%``, ...) in plain ``text``."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(table: Table) -> str:
    r"""Render ``table`` as a LaTeX ``table`` environment in the paper's style (booktabs; multirow for blocks).

    The block label spans its block with ``\multirow``; groups get a ``\multicolumn`` header separated by
    vertical rules, as in the paper's Table 1. Needs ``\usepackage{booktabs}`` and ``\usepackage{multirow}``.
    """
    with_blocks = any(block.label for block in table.blocks)
    lead = 2 if with_blocks else 1
    grouped = not (len(table.groups) == 1 and not table.groups[0][0])
    spec = "l" * lead + "".join(("|" if grouped else "") + "c" * len(cols) for _, cols in table.groups)
    lines = [
        "% Requires \\usepackage{booktabs} and \\usepackage{multirow}.",
        r"\begin{table}[tbp]",
        r"\centering",
        r"\caption{" + latex_escape(table.caption) + "}",
        r"\label{tab:" + table.label + "}",
        r"\small",
        r"\begin{tabular}{" + spec + "}",
        r"\toprule",
    ]
    if grouped:
        heads = []
        for i, (group, cols) in enumerate(table.groups):
            rule = "|" if i + 1 < len(table.groups) else ""
            heads.append(rf"\multicolumn{{{len(cols)}}}{{c{rule}}}{{\textbf{{{latex_escape(group)}}}}}")
        lines.append(" & ".join([""] * lead + heads) + r" \\")
    header = [rf"\textbf{{{latex_escape(table.block_header)}}}"] if with_blocks else []
    header.append(rf"\textbf{{{latex_escape(table.row_header)}}}")
    header += [_latex_header(c) for c in table.columns]
    lines += [" & ".join(header) + r" \\", r"\midrule"]
    bold = bold_cells(table)
    for b, block in enumerate(table.blocks):
        if b:
            lines.append(r"\midrule")
        for r, row in enumerate(block.rows):
            cells = []
            if with_blocks:
                cells.append(rf"\multirow{{{len(block.rows)}}}{{*}}{{{latex_escape(block.label)}}}" if r == 0 else "")
            label = latex_escape(row.label)
            cells.append(label if row.compete else rf"\textit{{{label}}}")
            for c, (cell, column) in enumerate(zip(row.cells, table.columns, strict=True)):
                text = format_cell(cell, column, latex=True)
                if (b, r, c) in bold:
                    head, _, tail = text.partition(" ")
                    text = rf"\textbf{{{head}}}" + (f" {tail}" if tail else "")
                cells.append(text)
            lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


# --- builders ---------------------------------------------------------------------------------------------

_ECE = Column("ECE", "lower")
_BRIER = Column("Brier", "lower")
_AUC = Column("AUC", "higher")


def _grid(
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


def main_table(
    rows: Sequence[MetricRow], *, caption: str | None = None, label: str = "main", notes: Sequence[str] = ()
) -> Table:
    """The paper's Table 1: ECE, Brier and AUC per stream (column groups) and critic (blocks).

    Pooled rows (``stream == POOLED``) become a last column group named ``"pooled"``. Methods with no
    numbers print ``n/a``.
    """
    by_key = {(r.stream, r.critic, r.method): r for r in rows}
    keys = [k for k in by_key if k[0] != POOLED] + [k for k in by_key if k[0] == POOLED]

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        row = by_key.get((stream, critic, method))
        if row is None or row.summary is None:
            return None
        s = row.summary
        return (Cell(s.ece), Cell(s.brier), Cell(s.auroc))

    table = _grid(
        keys,
        (_ECE, _BRIER, _AUC),
        cells,
        caption=caption or "Step-level confidence estimation: ECE (equal width), Brier and AUC per stream.",
        label=label,
        notes=notes,
    )
    groups = tuple(("pooled" if g == POOLED else g, cols) for g, cols in table.groups)
    return Table(table.caption, table.label, groups, table.blocks, notes=table.notes)


def metric_detail_table(
    rows: Sequence[MetricRow], *, caption: str | None = None, label: str = "main-ci", notes: Sequence[str] = ()
) -> Table:
    """Every metric row with its counts and 95% bootstrap intervals; one block per (stream, critic)."""
    blocks: dict[tuple[str, str], list[MetricRow]] = {}
    for r in rows:
        blocks.setdefault((r.stream, r.critic), []).append(r)
    columns = (
        Column("steps", digits=0),
        Column("failed", digits=0),
        Column("trajectories", digits=0),
        Column("ECE", "lower"),
        Column("Brier", "lower"),
        Column("AUC", "higher"),
    )
    out = []
    for (stream, critic), group in blocks.items():
        block_rows = []
        for r in sorted(group, key=lambda x: method_sort_key(x.method)):
            s, ci = r.summary, r.ci
            counts = (Cell(r.n), Cell(r.failed), Cell(r.n_trajectories))
            if s is None:
                metrics = (Cell(), Cell(), Cell())
            else:
                metrics = (
                    Cell(s.ece, *_bounds(ci.ece if ci else None)),
                    Cell(s.brier, *_bounds(ci.brier if ci else None)),
                    Cell(s.auroc, *_bounds(ci.auroc if ci else None)),
                )
            block_rows.append(Row(method_label(r.method), counts + metrics))
        name = "pooled" if stream == POOLED else stream
        out.append(Block(f"{name} / {critic}" if critic else name, tuple(block_rows)))
    return Table(
        caption=caption or "Metrics with 95% percentile bootstrap intervals over trajectories.",
        label=label,
        groups=(("", columns),),
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )


def _bounds(interval: Interval | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval.low, interval.high)


def averaging_table(curves: Sequence[OrderCurves], *, notes: Sequence[str] = ()) -> Table:
    """Multi-order stream averaging (section 4.4): cumulative ECE mean ± std over orders at checkpoints.

    Columns: the number of orders and tasks, the cumulative ECE after the checkpoint task counts of
    :data:`ceb.eval.averaging.STREAM_CHECKPOINTS` that some stream reaches, the final cumulative ECE (whole
    stream) and the final gap to the reference (``ECE(static) - ECE(method)``, higher is better).
    """
    reached = [c for c in STREAM_CHECKPOINTS if any(c in cv.task_counts for cv in curves)]
    columns = (
        Column("orders", digits=0),
        Column("tasks", digits=0),
        *(Column(f"ECE@{c}", "lower") for c in reached),
        Column("final ECE", "lower"),
        Column("gap vs Static", "higher", latex=r"$\Delta$ vs Static"),
    )
    blocks: dict[tuple[str, str], list[OrderCurves]] = {}
    for cv in curves:
        blocks.setdefault((cv.stream, cv.critic), []).append(cv)
    out = []
    for (stream, critic), group in blocks.items():
        rows = []
        for cv in sorted(group, key=lambda x: method_sort_key(x.method)):
            final = int(cv.task_counts[-1])
            cells = [Cell(len(cv.orders)), Cell(final)]
            for c in reached:
                at = cv.at(c)
                cells.append(Cell() if at is None else Cell(_num(at[0]), std=_num(at[1])))
            mean, std = _num(cv.mean[-1]), _num(cv.std[-1])
            cells.append(Cell(mean, std=std))
            gap = Cell(_num(cv.gap_mean[-1]), std=_num(cv.gap_std[-1]))
            cells.append(gap if cv.gap_orders else Cell(text="—"))
            rows.append(Row(method_label(cv.method), tuple(cells)))
        out.append(Block(f"{stream} / {critic}" if critic else stream, tuple(rows)))
    return Table(
        caption="Cumulative ECE over the stream, mean ± std over stream orders (section 4.4).",
        label="stream-averaging",
        groups=(("", columns),),
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )


def _num(value: float) -> float | None:
    return None if not np.isfinite(value) else float(value)


def depth_table(depth: Mapping[tuple[str, str, str], Sequence[DepthBucket]], *, notes: Sequence[str] = ()) -> Table:
    """Calibration by within-trajectory depth (Figure 1): per bucket, ECE and mean score / positive rate.

    ``depth`` maps ``(stream, critic, method)`` to :func:`ceb.eval.calibration.depth_calibration`'s buckets.
    Blocks are (stream, critic) pairs.
    """
    labels = list(dict.fromkeys(b.label for buckets in depth.values() for b in buckets))
    groups = tuple((f"step {lab}", (Column("ECE", "lower"), Column("conf. / acc."))) for lab in labels)
    blocks: dict[tuple[str, str], list[tuple[str, Sequence[DepthBucket]]]] = {}
    for (stream, critic, method), buckets in depth.items():
        blocks.setdefault((stream, critic), []).append((method, buckets))
    out = []
    for (stream, critic), group in blocks.items():
        rows = []
        for method, buckets in sorted(group, key=lambda x: method_sort_key(x[0])):
            by_label = {b.label: b for b in buckets}
            cells: list[Cell] = []
            for lab in labels:
                b = by_label.get(lab)
                if b is None or b.n == 0:
                    cells += [Cell(), Cell()]
                else:
                    cells += [Cell(b.ece), Cell(text=f"{b.mean_score:.2f} / {b.positive_rate:.2f} (n={b.n})")]
            rows.append(Row(method_label(method), tuple(cells)))
        out.append(Block(f"{stream} / {critic}" if critic else stream, tuple(rows)))
    return Table(
        caption="Calibration by within-trajectory depth (Figure 1): ECE and mean confidence / positive rate "
        "per step-index bucket.",
        label="depth",
        groups=groups,
        blocks=tuple(out),
        block_header="Stream",
        notes=tuple(notes),
    )


def selective_table(
    rates: Mapping[tuple[str, str, str], Sequence[float | None]],
    budgets: Sequence[int],
    *,
    notes: Sequence[str] = (),
) -> Table:
    """Selective execution (section 4.5, table "gating"): retained GT positive rate per abstention budget.

    ``rates`` maps ``(stream, critic, method)`` to :func:`ceb.eval.deployment.selective_execution`'s output.
    """
    columns = tuple(
        Column(f"b={b}%" if b else "b=0", "higher", latex=f"$b{{=}}{b}\\%$" if b else "$b{=}0$") for b in budgets
    )

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        got = rates.get((stream, critic, method))
        return None if got is None else tuple(Cell(v) for v in got)

    return _grid(
        list(rates),
        columns,
        cells,
        caption="Selective execution: GT positive rate among retained steps after deferring the lowest-confidence "
        "b% of steps (higher is better; b=0 is the base rate).",
        label="selective",
        notes=notes,
    )


def task_success_table(
    success: Mapping[tuple[str, str, str], TaskSuccess],
    oracle: Mapping[tuple[str, str], TaskSuccess],
    *,
    notes: Sequence[str] = (),
) -> Table:
    """Task success rate (%) under a per-task review budget ``m`` (section 4.5, table "tasksucc").

    ``success`` maps ``(stream, critic, method)`` to :func:`ceb.eval.deployment.task_success`; ``oracle`` maps
    ``(stream, critic)`` to :func:`ceb.eval.deployment.oracle_task_success`, printed as the reference row
    *Oracle* at the end of each block.
    """
    budgets = next(iter(success.values())).budgets if success else ()
    columns = tuple(Column(f"m={m}", "higher", digits=1, scale=100.0, latex=f"$m{{={m}}}$") for m in budgets)

    def cells(stream: str, critic: str, method: str) -> tuple[Cell, ...] | None:
        got = success.get((stream, critic, method))
        return None if got is None else tuple(Cell(v) for v in got.rates)

    def oracle_rows(critic: str, streams: Sequence[str]) -> list[Row]:
        found = [oracle.get((s, critic)) for s in streams]
        if all(o is None for o in found):
            return []
        row: list[Cell] = []
        for o in found:
            row += [Cell(v) for v in o.rates] if o is not None else [Cell() for _ in columns]
        return [Row("Oracle", tuple(row), compete=False)]

    return _grid(
        list(success),
        columns,
        cells,
        caption="Task success rate (%) when each task's m lowest-confidence steps are reviewed and fixed "
        "(higher is better; m=0 is the un-reviewed base rate; Oracle reviews exactly the wrong steps).",
        label="task-success",
        extra_rows=oracle_rows,
        notes=notes,
    )


def label_shift_table(shifts: Mapping[tuple[str, str, str], LabelShift | None], *, notes: Sequence[str] = ()) -> Table:
    """Strict vs alternative labels (appendix A, table "judge-shift-main"); one block per label column.

    ``shifts`` maps ``(stream, critic, alt label name)`` to :func:`ceb.eval.calibration.label_shift`.
    """
    columns = (
        Column("steps", digits=0),
        Column("strict pos."),
        Column("alt pos."),
        Column("agreement %", digits=1, scale=100.0, latex=r"agreement (\%)"),
        Column("0→1 %", digits=1, scale=100.0, latex=r"$0{\to}1$ (\%)"),
        Column("1→0 %", digits=1, scale=100.0, latex=r"$1{\to}0$ (\%)"),
    )
    blocks: dict[str, list[Row]] = {}
    for (stream, critic, name), s in shifts.items():
        label = f"{stream} / {critic}" if critic else stream
        if s is None:
            cells = (Cell(0), *(Cell() for _ in columns[1:]))
        else:
            cells = (
                Cell(s.n),
                Cell(s.strict_positive_rate),
                Cell(s.alt_positive_rate),
                Cell(s.agreement),
                Cell(s.zero_to_one),
                Cell(s.one_to_zero),
            )
        blocks.setdefault(name, []).append(Row(label, cells))
    return Table(
        caption="Strict labels vs alternative labels: positive rates, agreement and the share of steps "
        "relabelled 0→1 and 1→0.",
        label="label-shift",
        groups=(("", columns),),
        blocks=tuple(Block(name, tuple(rows)) for name, rows in blocks.items()),
        row_header="Stream",
        block_header="Labels",
        notes=tuple(notes),
    )


# --- appendix and ablation tables -------------------------------------------------------------------------


def _metric_cells(row: MetricRow | None) -> tuple[Cell, Cell, Cell]:
    if row is None or row.summary is None:
        return (Cell(), Cell(), Cell())
    s = row.summary
    return (Cell(s.ece), Cell(s.brier), Cell(s.auroc))


def _critic_blocks(rows: Mapping[str, list[Row]]) -> tuple[Block, ...]:
    return tuple(Block(critic, tuple(block)) for critic, block in rows.items())


def ablation_table(rows: Sequence[AblationRow], *, notes: Sequence[str] = ()) -> Table:
    """The component ablation (paper table "abl"): ECE, Brier, AUC and ΔECE against CEB, a block per critic.

    ``rows`` come from :func:`ceb.eval.ablations.component_ablation`; ΔECE prints signed (``+0.065``) and
    ``—`` on the reference row.
    """
    blocks: dict[str, list[Row]] = {}
    for r in rows:
        delta = Cell(text="—") if r.method == "ceb" else Cell(r.delta_ece)
        blocks.setdefault(r.critic, []).append(Row(r.variant, (*_metric_cells(r.row), delta)))
    columns = (_ECE, _BRIER, _AUC, Column("ΔECE", signed=True, latex=r"$\Delta$ECE"))
    return Table(
        caption="Component ablation: each variant removes one component of CEB, all scoring the same steps. "
        "ΔECE is ECE(variant) − ECE(CEB); positive means the variant is worse calibrated.",
        label="abl",
        groups=(("", columns),),
        blocks=_critic_blocks(blocks),
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
        blocks=_critic_blocks(blocks),
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
            row_cells += _metric_cells(None if got is None else got.row)
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
        blocks.setdefault(c.critic, []).append(Row(str(c.k), _metric_cells(c.row)))
    return Table(
        caption=f"Retrieval depth k sweep (precedents per class) at V={sweep.fixed}. Best per column in bold.",
        label="topk",
        groups=(("", (_ECE, _BRIER, _AUC)),),
        blocks=_critic_blocks(blocks),
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
        _ECE,
    )
    blocks: dict[str, list[Row]] = {}
    for t in costs:
        cells = (
            Cell(text="—") if t.votes is None else Cell(t.votes),
            Cell(text="—") if t.k is None else Cell(t.k),
            Cell(_num(t.bank_tokens)),
            Cell(_num(t.input_tokens)),
            Cell(text="—") if t.delta_vs_k1 is None else Cell(t.delta_vs_k1),
            Cell(t.ece),
        )
        blocks.setdefault(t.critic, []).append(Row(method_label(t.method), cells))
    return Table(
        caption="Token cost of retrieval depth: mean cl100k_base tokens per critic call (bank tokens: the "
        "precedent section). Δ vs k=1 is the relative change in total input tokens against k=1 at the same V.",
        label="token-cost",
        groups=(("", columns),),
        blocks=_critic_blocks(blocks),
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
        blocks.setdefault(r.critic, []).append(Row(label, _metric_cells(r.row)))
    return Table(
        caption="Retrieval mechanism: precedents drawn at random, by dense embeddings or by the deployed "
        "retriever, otherwise identical. Best per column in bold.",
        label="retrieval",
        groups=(("", (_ECE, _BRIER, _AUC)),),
        blocks=_critic_blocks(blocks),
        row_header="Retriever",
        notes=tuple(notes),
    )
