"""Figures: reliability diagrams (legend, gap beside the bar, bin counts), depth, and the file formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation

from ceb.eval.calibration import depth_calibration
from ceb.eval.metrics import reliability_bins
from ceb.eval.plots import FIGURE_FORMATS, plot_depth, plot_reliability, save_figure

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF-"}

rng = np.random.default_rng(0)
SCORES = {m: rng.uniform(0, 1, 200) for m in ("static", "ceb", "ppl")}
LABELS = (rng.uniform(0, 1, 200) < SCORES["ceb"]).astype(float)
BINS = {m: reliability_bins(LABELS, p, n_bins=10) for m, p in SCORES.items()}


def test_the_reliability_diagram_has_one_legend_naming_each_mark() -> None:
    fig = plot_reliability(BINS, title="t")
    (legend,) = fig.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert names[0].startswith("positive rate per bin")
    assert any(n.startswith("gap |positive rate") for n in names)
    assert "perfect calibration" in names
    assert any(n.startswith("steps per bin") for n in names)


def _panels(fig: Figure) -> list[tuple[Axes, Axes]]:
    """(diagram, counts) axes per method: each diagram is followed by its counts panel."""
    axes = fig.get_axes()
    return list(zip(axes[::2], axes[1::2], strict=True))


def test_every_non_empty_bin_is_labelled_with_its_count() -> None:
    fig = plot_reliability(BINS, title="t")
    panels = _panels(fig)
    assert len(panels) == 3
    for (diagram, counts), method in zip(panels, ("ppl", "static", "ceb"), strict=True):  # the paper's order
        assert diagram.get_title().startswith({"ppl": "PPL", "static": "Static", "ceb": "CEB"}[method])
        rb = BINS[method]
        labels = [int(a.get_text()) for a in counts.texts if isinstance(a, Annotation)]
        assert labels == [int(n) for n in rb.counts if n > 0]
        heights = [p.get_height() for p in counts.patches]
        assert heights == [float(n) for n in rb.counts if n > 0]
        assert counts.get_xlabel() == "confidence"


def test_the_gap_is_drawn_beside_the_bar_never_over_it() -> None:
    fig = plot_reliability(BINS, title="t")
    for diagram, _ in _panels(fig):
        rects = [p for p in diagram.patches if isinstance(p, Rectangle)]
        bars = [r for r in rects if r.get_fill()]
        gaps = [r for r in rects if not r.get_fill() and r.get_hatch()]
        assert len(bars) == len(gaps) > 0
        for bar, gap in zip(bars, gaps, strict=True):
            assert bar.get_x() + bar.get_width() <= gap.get_x()  # apart along x
            low, high = gap.get_y(), gap.get_y() + gap.get_height()
            assert bar.get_height() == pytest.approx(low) or bar.get_height() == pytest.approx(high)


def test_the_gap_spans_positive_rate_to_mean_confidence() -> None:
    rb = BINS["ceb"]
    fig = plot_reliability({"ceb": rb}, title="t")
    ((diagram, _),) = _panels(fig)
    gaps = [r for r in diagram.patches if isinstance(r, Rectangle) and not r.get_fill()]
    filled = rb.nonempty
    lows = [g.get_y() for g in gaps]
    highs = [g.get_y() + g.get_height() for g in gaps]
    assert lows == pytest.approx(np.minimum(rb.accuracy, rb.mean_confidence)[filled])
    assert highs == pytest.approx(np.maximum(rb.accuracy, rb.mean_confidence)[filled])


def test_the_depth_plot_draws_the_positive_rate_once() -> None:
    steps = np.tile(np.arange(8), 25)
    depth = {m: depth_calibration(LABELS, p, steps) for m, p in SCORES.items()}
    fig = plot_depth(depth, title="t")
    ax_ece, ax_conf = fig.get_axes()
    positive = [line for line in ax_conf.get_lines() if line.get_label() == "positive rate"]
    assert len(positive) == 1
    assert len(ax_conf.get_lines()) == len(depth) + 1  # a confidence line per method, one positive-rate line
    # The reference method's (CEB's) steps; every method here scores the same steps.
    assert list(positive[0].get_ydata()) == pytest.approx([b.positive_rate for b in depth["ceb"]])
    legend = ax_conf.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["PPL", "Static", "CEB", "positive rate (labels)"]


@pytest.mark.parametrize("fmt", FIGURE_FORMATS)
def test_each_format_is_written_with_its_magic_and_the_same_bytes_each_time(tmp_path: Path, fmt: str) -> None:
    fig = plot_reliability(BINS, title="t")
    (path,) = save_figure(fig, tmp_path / "a" / "rel", [fmt])
    assert path == tmp_path / "a" / f"rel.{fmt}"
    data = path.read_bytes()
    if fmt == "svg":
        assert data.startswith(b"<?xml") and b"<svg" in data[:1000]
    else:
        assert data.startswith(MAGIC[fmt])
    (again,) = save_figure(plot_reliability(BINS, title="t"), tmp_path / "b" / "rel", [fmt])
    assert again.read_bytes() == data


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="not one of png, pdf, svg"):
        save_figure(plot_reliability(BINS, title="t"), Path("x"), ["jpg"])


def test_the_report_command_offers_exactly_the_figure_formats() -> None:
    from typing import get_args

    from ceb.cli import report as report_cmd

    assert get_args(report_cmd.FigureFormat) == FIGURE_FORMATS


def test_the_regeneration_figure_draws_each_selection_as_computed_in_both_panels() -> None:
    from ceb.eval.regeneration import RegenerationCurve, plot_regeneration

    def curve(name: str, rate: tuple[float, ...], task: tuple[float, ...], std: float = 0.0) -> RegenerationCurve:
        spread = (0.0, std, std)
        return RegenerationCurve(name, (0.0, 10.0, 50.0), rate, task, spread, spread, (0, 1, 5), (0, 1, 2), (0, 0, 0))

    curves = [
        curve("ceb", (0.2, 0.3, 0.4), (0.25, 0.35, 0.45)),
        curve("ppl@c", (0.2, 0.1, 0.2), (0.25, 0.15, 0.2)),
        curve("random", (0.2, 0.22, 0.3), (0.25, 0.26, 0.3), std=0.05),
        curve("oracle", (0.2, 0.5, 0.7), (0.25, 0.55, 0.75)),
    ]
    fig = plot_regeneration(curves, title="t")
    rate, task = fig.get_axes()
    names = ["CEB", "PPL @ c", "Random (lower bound)", "Oracle (upper bound)"]
    assert [t.get_text() for t in rate.get_legend().get_texts()] == names
    for ax, field in ((rate, "positive_rate"), (task, "task_accuracy")):
        for line, c in zip(ax.get_lines(), curves, strict=True):
            assert list(line.get_xdata()) == [0.0, 10.0, 50.0]
            assert list(line.get_ydata()) == list(getattr(c, field))
        styles = [line.get_linestyle() for line in ax.get_lines()]
        assert styles == ["-", "-", "--", ":"]
        (band,) = ax.collections  # Random's seed spread, nothing else
        ys = band.get_paths()[0].vertices[:, 1]
        y, spread = np.array(getattr(curves[2], field)), np.array((0.0, 0.05, 0.05))
        assert ys.max() == pytest.approx((y + spread).max()) and ys.min() == pytest.approx((y - spread).min())
