"""Result tables in the paper's layout: the table model, its Markdown and LaTeX renderers, and the builders.

:mod:`~ceb.eval.tables.model` holds the plain-data :class:`Table`; :mod:`~ceb.eval.tables.render` prints it.
One builder module per part of the report turns analysis results into tables:
:mod:`~ceb.eval.tables.calibration`, :mod:`~ceb.eval.tables.averaging`, :mod:`~ceb.eval.tables.deployment`
and :mod:`~ceb.eval.tables.ablations` (the appendix), and :mod:`~ceb.eval.tables.paired` (paired differences).
"""

from ceb.eval.tables.ablations import (
    ablation_table,
    gt_oracle_table,
    retrieval_table,
    token_cost_table,
    topk_table,
    vsweep_table,
)
from ceb.eval.tables.averaging import averaging_table
from ceb.eval.tables.calibration import depth_table, label_shift_table, main_table, metric_detail_table
from ceb.eval.tables.deployment import selective_table, task_success_table
from ceb.eval.tables.model import Better, Block, Cell, Column, Row, Table, method_label, method_sort_key
from ceb.eval.tables.paired import paired_table
from ceb.eval.tables.render import bold_cells, format_cell, latex_escape, to_latex, to_markdown

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
    "paired_table",
    "retrieval_table",
    "selective_table",
    "task_success_table",
    "to_latex",
    "to_markdown",
    "token_cost_table",
    "topk_table",
    "vsweep_table",
]
