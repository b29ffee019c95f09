"""The report's one renderer: the parts a section returns and how each is written to report.md, LaTeX and JSON.

A :class:`Table` is plain data in the paper's layout: column groups (one per stream, as Table 1's datasets), blocks
of rows (one per critic, as its "Model" blocks), cells of numbers. Bold follows the paper: within a block, the best
printed value of each column with a direction is bold (ties all bold); a column where fewer than two rows compete
or all print the same value stays plain. Reference rows never compete. Untrusted text is escaped in every format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np
import orjson
from matplotlib.figure import Figure as MplFigure

from ceb.eval.lanes import method_label, method_sort_key
from ceb.eval.plots import FigureFormat, save_figure

__all__ = [
    "Better",
    "Block",
    "Cell",
    "Column",
    "Data",
    "Figure",
    "Grid",
    "Heading",
    "Lines",
    "Note",
    "Part",
    "Renderer",
    "Result",
    "Row",
    "Table",
    "Text",
    "bold_cells",
    "OUTSIDE_MARK",
    "OUTSIDE_NOTE",
    "footnotes",
    "format_cell",
    "latex_escape",
    "mark_rows",
    "markdown_inline",
    "method_label",
    "method_sort_key",
    "to_latex",
    "to_markdown",
]

Better = Literal["lower", "higher"]


@dataclass(frozen=True, slots=True)
class Column:
    """One numeric column.

    Attributes:
        better: ``"lower"`` or ``"higher"`` to bold the best value, ``None`` for no bold.
        scale: Factor applied before printing (100 prints fractions as percentages).
        latex: Header as LaTeX source, used verbatim (``name`` is escaped otherwise).
        signed: Print a sign on positive values too (``+0.065``), for differences.
        suffix: Printed right after the number (``"%"``).
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
    """A value printed ``value [low, high]`` or ``value ± std`` (``n/a`` when ``None``), or a fixed ``text``."""

    value: float | None = None
    low: float | None = None
    high: float | None = None
    std: float | None = None
    text: str | None = None


@dataclass(frozen=True, slots=True)
class Row:
    """One row; ``compete=False`` marks a reference row (italic, never bold)."""

    label: str
    cells: tuple[Cell, ...]
    compete: bool = True


@dataclass(frozen=True, slots=True)
class Block:
    """A block of rows sharing a label (a critic), ruled off from the next."""

    label: str
    rows: tuple[Row, ...]


@dataclass(frozen=True, slots=True)
class Table:
    r"""A table in the paper's layout.

    Attributes:
        label: LaTeX label and file stem (``"main"``: ``\label{tab:main}``, ``main.md``, ``main.tex``).
        groups: ``(group header, columns)``; a single group with an empty header prints no group row.
        blocks: Row blocks; when every block label is empty the block column is omitted.
        notes: Lines under the Markdown table.
        footnotes: Lines under the table in every format (what a mark in the table means).
    """

    caption: str
    label: str
    groups: tuple[tuple[str, tuple[Column, ...]], ...]
    blocks: tuple[Block, ...]
    row_header: str = "Method"
    block_header: str = "Critic"
    notes: tuple[str, ...] = field(default=())
    footnotes: tuple[str, ...] = field(default=())

    @property
    def columns(self) -> tuple[Column, ...]:
        """All columns, group by group."""
        return tuple(c for _, cols in self.groups for c in cols)


def format_cell(cell: Cell, column: Column, *, latex: bool = False) -> str:
    """``cell`` at ``column``'s precision: ``0.176``, ``0.176 ± 0.010``, ``0.176 [0.150, 0.201]``, ``n/a``."""
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
        interval += OUTSIDE_MARK if _outside(cell, column) else ""
        text += r" {\scriptsize " + latex_escape(interval) + "}" if latex else " " + interval
    return text


OUTSIDE_MARK = "‡"
"""Printed after an interval that does not hold its own point estimate (as printed)."""

OUTSIDE_NOTE = (
    f"{OUTSIDE_MARK} The point estimate lies outside its own percentile interval. A percentile interval is the spread "
    "of the bootstrap replicates, not an interval centred on the point, and ECE is biased upward under resampling "
    "(a replicate's per-bin gaps cancel less than the sample's), so an ECE near 0, such as the base rate's, or a "
    "difference of ECEs can fall outside every replicate. The interval is shown as computed, not moved to hold "
    "the point: read it as the resampling spread of the statistic."
)
"""The footnote of a table with an :data:`OUTSIDE_MARK` (docs/methods.md)."""


def _outside(cell: Cell, column: Column) -> bool:
    """Whether the printed point lies outside the printed ``[low, high]``."""
    values = (cell.value, cell.low, cell.high)
    if any(v is None or not np.isfinite(v) for v in values):
        return False
    point, low, high = (float(_number(v, column)) for v in values if v is not None)
    return not low <= point <= high


def footnotes(table: Table) -> tuple[str, ...]:
    """The table's footnotes, and :data:`OUTSIDE_NOTE` when a cell's interval misses its point."""
    outside = any(
        _outside(cell, column)
        for block in table.blocks
        for row in block.rows
        for cell, column in zip(row.cells, table.columns, strict=True)
    )
    return (*table.footnotes, *((OUTSIDE_NOTE,) if outside else ()))


def mark_rows(table: Table, marks: Mapping[str, str], mark: str = "†") -> Table:
    """``table`` with ``mark`` after each row label in ``marks`` (label -> footnote) and a footnote per label."""
    found = [label for label in marks if any(row.label == label for block in table.blocks for row in block.rows)]
    if not found:
        return table
    blocks = tuple(
        replace(block, rows=tuple(replace(r, label=r.label + mark) if r.label in marks else r for r in block.rows))
        for block in table.blocks
    )
    notes = tuple(f"{mark} {label}: {marks[label]}" for label in found)
    return replace(table, blocks=blocks, footnotes=(*table.footnotes, *notes))


def _number(value: float, column: Column) -> str:
    """``value`` at the column's precision; a value that rounds to zero prints without a minus."""
    sign = "+" if column.signed else ""
    text = f"{value * column.scale:{sign}.{column.digits}f}"
    return f"{0.0:{sign}.{column.digits}f}" if float(text) == 0 else text


def bold_cells(table: Table) -> set[tuple[int, int, int]]:
    """Positions ``(block, row, column)`` of the cells printed in bold (module docstring)."""
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
    """``table`` as a GitHub-flavoured Markdown table: caption, header (``"stream: ECE↓"``), rows, notes."""
    with_blocks = any(block.label for block in table.blocks)
    headers = [table.block_header] if with_blocks else []
    headers.append(table.row_header)
    for group, columns in table.groups:
        headers += [f"{group}: {c.name}{_arrow(c)}" if group else f"{c.name}{_arrow(c)}" for c in columns]
    lines = [f"**{markdown_inline(table.caption)}**", "", "| " + " | ".join(_md_escape(h) for h in headers) + " |"]
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
    notes = (*table.notes, *footnotes(table))
    if notes:
        lines.append("")
        lines += [f"- {_md_escape(note)}" for note in notes]
    return "\n".join(lines) + "\n"


def _md_escape(text: str) -> str:
    """A table cell: :func:`markdown_inline` with its pipes escaped."""
    return markdown_inline(text).replace("|", r"\|")


_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_TICKS = re.compile(r"`+")


def markdown_inline(text: str) -> str:
    """``text`` safe inline in report.md: one line, ``<``, ``>`` and ``&`` HTML-escaped outside code spans.

    Code spans pair as CommonMark pairs them (a run of n backticks closes at the next run of exactly n; a backslash
    escapes the next character outside them), so a task holding ``<script>`` or a backtick cannot open HTML.
    """
    line = " ".join(text.splitlines()) if "\n" in text or "\r" in text else text
    out: list[str] = []
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\" and i + 1 < len(line):  # a backslash escape: the next character is literal
            out.append(ch + _HTML.get(line[i + 1], line[i + 1]))
            i += 2
        elif ch == "`":
            run = _TICKS.match(line, i)
            assert run is not None
            width = len(run.group())
            close = next((m for m in _TICKS.finditer(line, run.end()) if len(m.group()) == width), None)
            end = close.end() if close is not None else run.end()
            out.append(line[i:end])
            i = end
        else:
            out.append(_HTML.get(ch, ch))
            i += 1
    return "".join(out)


def _grid_cell(text: str) -> str:
    """A cell of an inline grid (no Markdown of its own): backslashes, pipes, backticks and HTML escaped."""
    return markdown_inline(text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`"))


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
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "±": r"$\pm$",
    "—": "---",
    "→": r"$\to$",
    "↓": r"$\downarrow$",
    "↑": r"$\uparrow$",
    "−": "$-$",
    "Δ": r"$\Delta$",
    "†": r"\dag{}",
    "‡": r"\ddag{}",
}


def latex_escape(text: str) -> str:
    r"""``text`` with LaTeX's special characters escaped (``_`` -> ``\_``)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def to_latex(table: Table) -> str:
    """``table`` as a LaTeX ``table`` in the paper's style; needs ``booktabs`` and ``multirow``."""
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
    lines += [r"\bottomrule", r"\end{tabular}"]
    lines += [r"\par\footnotesize " + latex_escape(note) for note in footnotes(table)]
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class Text:
    """A paragraph of report.md."""

    text: str


@dataclass(frozen=True, slots=True)
class Note:
    """A quoted note of report.md (a skipped analysis, a caveat)."""

    text: str


@dataclass(frozen=True, slots=True)
class Heading:
    """A sub-heading inside a section (``###``)."""

    text: str


@dataclass(frozen=True, slots=True)
class Lines:
    """Lines of report.md as they are (the run header, bullet lists)."""

    lines: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Grid:
    """A table inline in report.md only: a header, each column's alignment (``---`` / ``---:``), rows."""

    header: tuple[str, ...]
    align: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Figure:
    """A figure written as ``<stem>.<format>`` per figure format, embedded in report.md with ``caption``."""

    figure: MplFigure
    stem: str
    caption: str


@dataclass(frozen=True, slots=True)
class Data:
    """An entry ``key: value`` of ``report.json`` (entries keep the order they come in)."""

    key: str
    value: Any


Part = Text | Note | Heading | Lines | Grid | Table | Figure | Data


@dataclass(frozen=True, slots=True)
class Result:
    """What a section returns: its parts in report order."""

    parts: tuple[Part, ...]


class Renderer:
    """Writes results into a report directory: report.md, each table's .md / .tex, the figures, report.json.

    Args:
        out_dir: The report directory (exists).
        figure_formats: Formats of each figure (:data:`ceb.eval.plots.FIGURE_FORMATS`); report.md embeds the
            first PNG or SVG and links every file.
        marks: Row label -> footnote, marked in every table (:func:`mark_rows`).
    """

    def __init__(
        self, out_dir: Path, figure_formats: Sequence[FigureFormat] = ("png",), marks: Mapping[str, str] | None = None
    ) -> None:
        self.out_dir = out_dir
        self.figure_formats = tuple(figure_formats)
        self.marks = dict(marks or {})
        self.lines: list[str] = []
        self.data: dict[str, Any] = {}

    def write(self, result: Result, heading: str | None = None) -> None:
        """Render ``result``, under a ``## heading`` when given."""
        if heading is not None:
            self.lines += ["", f"## {heading}", ""]
        for part in result.parts:
            if isinstance(part, Data):
                self.data[part.key] = part.value
            else:
                self.lines += self._markdown(part)

    def _markdown(self, part: Text | Note | Heading | Lines | Grid | Table | Figure) -> list[str]:
        if isinstance(part, Text):
            return [markdown_inline(part.text), ""]
        if isinstance(part, Note):
            return [f"> {markdown_inline(part.text)}", ""]
        if isinstance(part, Heading):
            return [f"### {markdown_inline(part.text)}", ""]
        if isinstance(part, Lines):
            return [markdown_inline(line) for line in part.lines]
        if isinstance(part, Grid):
            rows = [part.header, *part.rows]
            lines = ["| " + " | ".join(_grid_cell(cell) for cell in row) + " |" for row in rows]
            return [lines[0], "|" + "|".join(part.align) + "|", *lines[1:], ""]
        if isinstance(part, Table):
            part = mark_rows(part, self.marks)
            md, tex = f"{part.label}.md", f"{part.label}.tex"
            (self.out_dir / md).write_text(to_markdown(part), encoding="utf-8")
            (self.out_dir / tex).write_text(to_latex(part), encoding="utf-8")
            return [f"Table: [{md}]({md}) · [{tex}]({tex})", "", to_markdown(part)]
        names = [p.name for p in save_figure(part.figure, self.out_dir / part.stem, self.figure_formats)]
        shown = next((n for n in names if not n.endswith(".pdf")), None)
        caption = markdown_inline(part.caption)
        embed = [f"![{caption}]({shown})", ""] if shown is not None else []
        return [*embed, f"Figure: {' · '.join(f'[{n}]({n})' for n in names)} — {caption}", ""]

    def finish(self) -> Path:
        """Write report.json and report.md; returns report.md's path."""
        self.lines += ["", "All numbers: [report.json](report.json)", ""]
        (self.out_dir / "report.json").write_bytes(orjson.dumps(_jsonable(self.data), option=orjson.OPT_INDENT_2))
        path = self.out_dir / "report.md"
        path.write_text("\n".join(self.lines).lstrip("\n"), encoding="utf-8")
        return path


def _jsonable(value: Any) -> Any:
    """Plain JSON values: arrays to lists, NaN and infinities to ``None``."""
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
