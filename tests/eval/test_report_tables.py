from __future__ import annotations

from ceb.eval.calibration import metric_rows
from ceb.eval.deployment import TaskSuccess
from ceb.eval.lanes import lanes_from_rows
from ceb.eval.render import (
    OUTSIDE_NOTE,
    Block,
    Cell,
    Column,
    Row,
    Table,
    bold_cells,
    format_cell,
    latex_escape,
    mark_rows,
    method_label,
    to_latex,
    to_markdown,
)
from ceb.eval.sections.calibration import main_table
from ceb.eval.sections.deployment import selective_table, task_success_table
from tests.support.builders import step_rows


def _table(rows: list[Row], columns: tuple[Column, ...]) -> Table:
    return Table(caption="t", label="t", groups=(("", columns),), blocks=(Block("", tuple(rows)),))


def test_bold_marks_lowest_ece_and_highest_auc() -> None:
    cols = (Column("ECE", "lower"), Column("AUC", "higher"), Column("n", digits=0))
    table = _table(
        [
            Row("a", (Cell(0.30), Cell(0.61), Cell(10))),
            Row("b", (Cell(0.20), Cell(0.72), Cell(20))),
            Row("c", (Cell(None), Cell(0.70), Cell(30))),
        ],
        cols,
    )
    assert bold_cells(table) == {(0, 1, 0), (0, 1, 1)}  # row b, both metric columns; n has no direction
    md = to_markdown(table)
    assert "| b | **0.200** | **0.720** | 20 |" in md
    assert "| c | n/a | 0.700 | 30 |" in md
    assert r"\textbf{0.200}" in to_latex(table)


def test_bold_ties_at_printed_precision_and_skips_uniform_columns_and_references() -> None:
    cols = (Column("rate", "higher", digits=1, scale=100.0), Column("base", "higher"))
    table = _table(
        [
            Row("a", (Cell(0.4471), Cell(0.198))),
            Row("b", (Cell(0.4469), Cell(0.198))),
            Row("c", (Cell(0.30), Cell(0.198))),
            Row("Oracle", (Cell(0.90), Cell(0.198)), compete=False),
        ],
        cols,
    )
    # 44.7 and 44.7 tie as printed; the all-equal base column stays plain; Oracle never competes.
    assert bold_cells(table) == {(0, 0, 0), (0, 1, 0)}
    assert "*Oracle*" in to_markdown(table)
    assert r"\textit{Oracle}" in to_latex(table)


def test_bold_is_per_block() -> None:
    cols = (Column("ECE", "lower"),)
    table = Table(
        caption="t",
        label="t",
        groups=(("", cols),),
        blocks=(
            Block("critic-1", (Row("a", (Cell(0.1),)), Row("b", (Cell(0.2),)))),
            Block("critic-2", (Row("a", (Cell(0.4),)), Row("b", (Cell(0.3),)))),
        ),
    )
    assert bold_cells(table) == {(0, 0, 0), (1, 1, 0)}
    latex = to_latex(table)
    assert r"\multirow{2}{*}{critic-1}" in latex and latex.count(r"\midrule") == 2


def test_latex_escapes_underscores_and_specials() -> None:
    assert latex_escape("ceb_v1 50% & $x#") == r"ceb\_v1 50\% \& \$x\#"
    cols = (Column("ECE", "lower"),)
    table = Table(
        caption="run my_run",
        label="t",
        groups=(("web_stream", cols),),
        blocks=(Block("", (Row("ceb_custom", (Cell(0.1),)), Row("x", (Cell(0.2),)))),),
    )
    latex = to_latex(table)
    assert r"\caption{run my\_run}" in latex
    assert r"\textbf{web\_stream}" in latex
    assert r"ceb\_custom & \textbf{0.100} \\" in latex
    assert "ceb_custom" not in latex.replace(r"ceb\_custom", "")
    # Headers never produce "$$" (display math) when a math header meets the arrow.
    assert "$$" not in to_latex(selective_table({("s", "", "ceb"): [0.5, 0.6]}, (0, 10)))


def test_untrusted_text_is_escaped_in_markdown_and_latex() -> None:
    evil = "<img src=x onerror=alert(1)> & <script>alert(1)</script>"
    cols = (Column("ECE", "lower"),)
    table = Table(
        caption=f"caption {evil}",
        label="t",
        groups=(("web", cols),),
        blocks=(Block(evil, (Row(evil, (Cell(text=evil),)), Row("x`<b>`", (Cell(0.2),)))),),
        notes=(f"note {evil} and a backtick that closes nothing: `{evil}",),
    )
    md = to_markdown(table)
    assert "<img" not in md and "<script" not in md and "& " not in md
    assert "&lt;img src=x onerror=alert(1)&gt; &amp; &lt;script&gt;" in md
    assert "x`<b>`" in md  # inside a code span the text is shown as it is, never as HTML
    latex = to_latex(table)
    assert "<" not in latex and ">" not in latex
    assert r"\textless{}img src=x onerror=alert(1)\textgreater{} \& " in latex


def test_format_cell_std_interval_and_text() -> None:
    col = Column("ECE", "lower")
    assert format_cell(Cell(0.1764, std=0.0101), col) == "0.176 ± 0.010"
    assert format_cell(Cell(0.1764, low=0.15, high=0.2), col) == "0.176 [0.150, 0.200]"
    assert format_cell(Cell(0.1764, std=0.0101), col, latex=True) == r"0.176 $\pm$ 0.010"
    assert format_cell(Cell(float("nan")), col) == "n/a"
    assert format_cell(Cell(text="a_b"), col, latex=True) == r"a\_b"


def test_main_table_paper_layout_with_na_method() -> None:
    rows = [
        {"stream": "web", "method": "ceb", "trajectory": "A", "step": 0, "score": 0.9, "label": 1},
        {"stream": "web", "method": "ceb", "trajectory": "A", "step": 1, "score": 0.2, "label": 0},
        {"stream": "web", "method": "ppl", "trajectory": "A", "step": 0, "score": None, "label": 1,
         "error": "not available"},
        {"stream": "web", "method": "ptrue", "trajectory": "A", "step": 0, "score": 0.5, "label": 1},
        {"stream": "web", "method": "ptrue", "trajectory": "A", "step": 1, "score": 0.5, "label": 0},
    ]  # fmt: skip
    table = main_table(metric_rows(lanes_from_rows(step_rows(rows)), n_boot=0))
    md = to_markdown(table)
    # Paper row order (PPL, P(True), CEB), display names, n/a for the unavailable method.
    assert md.index("| PPL |") < md.index("| P(True) |") < md.index("| CEB |")
    assert "| PPL | n/a | n/a | n/a |" in md
    assert "web: ECE↓" in md
    assert method_label("ceb-V3-k1") == "ceb-V3-k1"


def test_task_success_table_prints_percent_and_oracle_row() -> None:
    success = {("s", "", "ceb"): TaskSuccess((0, 1), (0.25, 0.5), 4, 0)}
    success[("s", "", "static")] = TaskSuccess((0, 1), (0.25, 0.375), 4, 0)
    oracle = {("s", ""): TaskSuccess((0, 1), (0.25, 1.0), 4, 0)}
    md = to_markdown(task_success_table(success, oracle))
    assert "| CEB | 25.0 | **50.0** |" in md
    assert "| *Oracle* | 25.0 | 100.0 |" in md


def _interval_table(cell: Cell) -> Table:
    rows = (Row("base rate", (cell,)),)
    return Table("t", "t", (("", (Column("ECE", "lower"),)),), (Block("", rows),))


def test_an_interval_that_misses_its_own_point_is_marked_and_explained_in_every_format() -> None:
    outside = _interval_table(Cell(0.0, 0.001, 0.075))  # ECE 0.000 [0.001, 0.075]: biased upward when resampled
    md, tex = to_markdown(outside), to_latex(outside)
    assert "0.000 [0.001, 0.075]‡" in md and OUTSIDE_NOTE in md
    assert r"[0.001, 0.075]\ddag{}" in tex and r"\par\footnotesize \ddag{} The point estimate lies outside" in tex
    inside = _interval_table(Cell(0.05, 0.001, 0.075))
    assert "‡" not in to_markdown(inside) and r"\ddag" not in to_latex(inside)
    rounded = _interval_table(Cell(0.0004, 0.0, 0.075))  # outside before rounding, inside as printed: no mark
    assert "‡" not in to_markdown(rounded)
    assert "‡" not in to_markdown(_interval_table(Cell(0.0, float("nan"), 0.075)))  # no interval to miss


def test_marked_rows_carry_the_mark_and_their_footnote_in_every_format() -> None:
    table = Table("t", "t", (("", (Column("ECE", "lower"),)),), (Block("", (Row("P(True)", (Cell(0.1),)),)),))
    marked = mark_rows(table, {"P(True)": "the <b>paper</b> reads the True token", "PRO": "unused"})
    md, tex = to_markdown(marked), to_latex(marked)
    assert "| P(True)† |" in md and "- † P(True): the &lt;b&gt;paper&lt;/b&gt; reads the True token" in md
    assert "PRO" not in md
    assert r"P(True)\dag{} &" in tex and r"\dag{} P(True): the \textless{}b\textgreater{}paper" in tex
    assert mark_rows(table, {"PRO": "x"}) is table
