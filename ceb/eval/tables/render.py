"""Rendering of a :class:`~ceb.eval.tables.model.Table` as Markdown or LaTeX, with the best values in bold.

Bold follows the paper: within each block, the best value of each column that has a direction (lower is
better for ECE and Brier, higher for AUROC and the selective-execution and task-success rates) is bold,
comparing the values as printed, so ties at the printed precision are all bold. A column is left plain
when fewer than two rows compete or every competing row prints the same value (the ``b = 0`` and ``m = 0``
base-rate columns). Reference rows (the task-success Oracle) never compete.
"""

from __future__ import annotations

import numpy as np

from ceb.eval.tables.model import Cell, Column, Table

__all__ = ["bold_cells", "format_cell", "latex_escape", "to_latex", "to_markdown"]


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
