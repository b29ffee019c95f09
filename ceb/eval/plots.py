"""Figures of the paper's analyses, drawn on :class:`matplotlib.figure.Figure` objects, never through ``pyplot``.

No global registry, no GUI backend, nothing to close; :func:`save_figure` writes PNG, PDF and / or SVG without
creation dates, so the same figure gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure
from matplotlib.legend_handler import HandlerTuple
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ceb.eval.averaging import OrderCurves
from ceb.eval.calibration import DepthBucket
from ceb.eval.lanes import method_label, method_sort_key, reference_method
from ceb.eval.metrics import ReliabilityBins

__all__ = [
    "FIGURE_FORMATS",
    "FigureFormat",
    "method_colors",
    "plot_cumulative_ece",
    "plot_depth",
    "plot_reliability",
    "save_figure",
]

FigureFormat = Literal["png", "pdf", "svg"]
FIGURE_FORMATS: tuple[FigureFormat, ...] = get_args(FigureFormat)
"""The file formats :func:`save_figure` writes: PNG (raster), PDF and SVG (vector, for papers)."""

_DPI = 120
# Files without a creation date (and SVG ids from a fixed salt), so the same report gives the same bytes.
_METADATA: dict[str, dict[str, Any]] = {"png": {}, "pdf": {"CreationDate": None}, "svg": {"Date": None}}


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """A distinct colour per method, in the paper's order: ``tab10`` up to 10, ``tab20`` up to 20, else ``turbo``."""
    names = sorted(set(methods), key=method_sort_key)
    n = len(names)
    if n <= 10:
        cmap, points = colormaps["tab10"], [i for i in range(n)]
    elif n <= 20:
        # tab20's ten dark hues first, then their light pairs: the first ten methods stay as distinct as tab10.
        cmap, points = colormaps["tab20"], [*range(0, 20, 2), *range(1, 20, 2)][:n]
    else:
        cmap, points = colormaps["turbo"], list(np.linspace(0.05, 0.95, n))
    return {m: to_hex(cmap(p)) for m, p in zip(names, points, strict=True)}


def _legend(ax: Axes) -> None:
    """The legend beside the axes (right), where it never covers a curve."""
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)


def save_figure(fig: Figure, stem: Path, formats: Sequence[FigureFormat] = ("png",)) -> list[Path]:
    """Write ``fig`` as ``stem.<format>`` per format; the paths, in order. ``ValueError`` on an unknown format."""
    unknown = [f for f in formats if f not in FIGURE_FORMATS]
    if unknown:
        raise ValueError(f"figure format(s) {unknown} not one of {', '.join(FIGURE_FORMATS)}")
    FigureCanvasAgg(fig)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = stem.with_name(f"{stem.name}.{fmt}")
        with rc_context({"svg.hashsalt": "ceb"}):
            fig.savefig(path, dpi=_DPI, format=fmt, bbox_inches="tight", metadata=_METADATA[fmt])
        paths.append(path)
    return paths


def plot_cumulative_ece(
    curves: Sequence[OrderCurves], *, title: str, colors: Mapping[str, str] | None = None
) -> Figure:
    """Cumulative ECE against tasks seen, one curve per method: mean over orders, ±std band (section 4.4)."""
    colors = colors or method_colors([c.method for c in curves])
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.add_subplot()
    for cv in sorted(curves, key=lambda c: method_sort_key(c.method)):
        x = cv.task_counts
        color = colors.get(cv.method, "black")
        ax.plot(
            x,
            cv.mean,
            color=color,
            label=f"{method_label(cv.method)} ({len(cv.orders)} order{'s' if len(cv.orders) > 1 else ''})",
        )
        if np.isfinite(cv.std).any():
            ax.fill_between(x, cv.mean - cv.std, cv.mean + cv.std, color=color, alpha=0.2, linewidth=0)
    ax.set_xlabel("tasks seen (trajectories in the stream prefix)")
    ax.set_ylabel("cumulative ECE")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def plot_depth(
    depth: Mapping[str, Sequence[DepthBucket]],
    *,
    title: str,
    colors: Mapping[str, str] | None = None,
) -> Figure:
    """Calibration by depth (Figure 1): ECE (left), mean confidence and one positive-rate line (right).

    The positive rate is the steps', drawn once in black: that of :func:`ceb.eval.lanes.reference_method`.
    """
    colors = colors or method_colors(list(depth))
    fig = Figure(figsize=(11.0, 4.0))
    ax_ece, ax_conf = fig.subplots(1, 2)
    labels = list(dict.fromkeys(b.label for buckets in depth.values() for b in buckets))
    x = np.arange(len(labels))
    for method in sorted(depth, key=method_sort_key):
        by_label = {b.label: b for b in depth[method]}
        color = colors.get(method, "black")
        ece = [_or_nan(by_label.get(lab), "ece") for lab in labels]
        conf = [_or_nan(by_label.get(lab), "mean_score") for lab in labels]
        ax_ece.plot(x, ece, marker="o", color=color, label=method_label(method))
        ax_conf.plot(x, conf, marker="o", color=color)
    reference = {b.label: b for b in depth[reference_method(depth)]} if depth else {}
    rate = [_or_nan(reference.get(lab), "positive_rate") for lab in labels]
    (positive,) = ax_conf.plot(x, rate, marker="x", linestyle=":", color="black", label="positive rate")
    for ax in (ax_ece, ax_conf):
        ax.set_xticks(x, labels)
        ax.set_xlabel("step index within the trajectory")
        ax.grid(alpha=0.3)
    ax_ece.set_ylabel("ECE")
    ax_ece.set_ylim(bottom=0)
    ax_conf.set_ylabel("mean confidence (solid) / positive rate (dotted)")
    ax_conf.set_ylim(0, 1.03)
    # One legend for both panels (a method has one colour in each), beside the right one.
    handles, names = ax_ece.get_legend_handles_labels()
    ax_conf.legend(
        [*handles, positive],
        [*names, "positive rate (labels)"],
        fontsize="small",
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
    )
    fig.suptitle(title)
    return fig


def _or_nan(bucket: DepthBucket | None, attr: str) -> float:
    value = None if bucket is None else getattr(bucket, attr)
    return float("nan") if value is None else float(value)


_GAP_COLOR = "tab:red"
_COUNT_COLOR = "0.85"


def plot_reliability(
    bins: Mapping[str, ReliabilityBins],
    *,
    title: str,
    eces: Mapping[str, float] | None = None,
    colors: Mapping[str, str] | None = None,
    ncols: int = 4,
) -> Figure:
    """Reliability diagrams (appendix E): a panel per method over a panel of its bin counts.

    A bar is a bin's positive rate, a red hatched box beside it spans the gap to its mean confidence; the dashed
    diagonal is perfect calibration. ``eces`` go in the panel titles.
    """
    methods = sorted(bins, key=method_sort_key)
    colors = colors or method_colors(methods)
    ncols = max(1, min(ncols, len(methods)))
    nrows = max(1, -(-len(methods) // ncols))
    fig = Figure(figsize=(3.4 * ncols, 4.2 * nrows + 0.6), layout="constrained")
    grid = fig.add_gridspec(2 * nrows, ncols, height_ratios=[3, 1] * nrows)
    for i, method in enumerate(methods):
        row, col = divmod(i, ncols)
        ax = fig.add_subplot(grid[2 * row, col])
        ax_counts = fig.add_subplot(grid[2 * row + 1, col], sharex=ax)
        _reliability_panel(ax, ax_counts, bins[method], colors.get(method, "tab:blue"))
        name = method_label(method)
        ax.set_title(f"{name} (ECE {eces[method]:.3f})" if eces and method in eces else name, fontsize="medium")
    # The bar's mark shows every method's colour side by side (HandlerTuple), the counts' a neutral grey.
    bars = tuple(Patch(facecolor=colors.get(m, "tab:blue"), edgecolor="black", linewidth=0.5) for m in methods)
    marks: list[Any] = [  # Artists, and one tuple of them (the stubs do not know tuple handles)
        bars,
        Patch(fill=False, hatch="////", edgecolor=_GAP_COLOR, linewidth=0.5),
        Line2D([], [], linestyle="--", color="gray", linewidth=1),
        Patch(facecolor=_COUNT_COLOR, edgecolor="black", linewidth=0.5),
    ]
    names = [
        "positive rate per bin" + (" (colour: method)" if len(methods) > 1 else ""),
        "gap |positive rate − mean confidence|",
        "perfect calibration",
        "steps per bin (lower panel, count on each bar)",
    ]
    fig.legend(
        marks,
        names,
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
        loc="outside lower center",
        ncols=2,
        fontsize="small",
        frameon=False,
    )
    fig.suptitle(title)
    return fig


def _reliability_panel(ax: Axes, ax_counts: Axes, rb: ReliabilityBins, color: str) -> None:
    lefts = rb.edges[:-1]
    widths = np.diff(rb.edges)
    filled = np.flatnonzero(rb.nonempty)
    acc = rb.accuracy[filled]
    conf = rb.mean_confidence[filled]
    # Each bin holds the bar (left 60%) and the gap box (right 30%) side by side, so neither hides the other.
    w = widths[filled]
    ax.bar(lefts[filled] + 0.05 * w, acc, width=0.6 * w, align="edge", color=color, alpha=0.8, edgecolor="black")
    ax.bar(
        lefts[filled] + 0.67 * w,
        np.abs(conf - acc),
        bottom=np.minimum(conf, acc),
        width=0.28 * w,
        align="edge",
        fill=False,
        hatch="////",
        edgecolor=_GAP_COLOR,
        linewidth=0.5,
    )
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.03)  # a bar at 1 keeps its top edge
    ax.set_ylabel("positive rate")
    ax.tick_params(labelbottom=False)

    counts = rb.counts[filled]
    ax_counts.bar(lefts[filled], counts, width=w, align="edge", color=_COUNT_COLOR, edgecolor="black", linewidth=0.5)
    for x, n in zip(lefts[filled] + w / 2, counts, strict=True):
        ax_counts.annotate(
            str(int(n)),
            (float(x), float(n)),
            textcoords="offset points",
            xytext=(0, 1),
            ha="center",
            va="bottom",
            fontsize=6,
            rotation=90 if rb.n_bins > 12 else 0,
        )
    ax_counts.set_ylim(0, max(1.0, float(counts.max(initial=0))) * 1.35)
    ax_counts.set_xlabel("confidence")
    ax_counts.set_ylabel("steps")
