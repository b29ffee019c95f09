"""PNG figures of the paper's analyses: cumulative ECE over the stream, calibration by depth, reliability.

Figures are drawn on :class:`matplotlib.figure.Figure` objects rendered by the Agg canvas, never through
``pyplot``: no global figure registry, no GUI backend, nothing to close, safe in threads and tests.
Each function writes one PNG and returns its path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from ceb.eval.averaging import OrderCurves
from ceb.eval.calibration import DepthBucket
from ceb.eval.metrics import ReliabilityBins
from ceb.eval.tables import method_label, method_sort_key

__all__ = ["method_colors", "plot_cumulative_ece", "plot_depth", "plot_reliability"]

_DPI = 120


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """A distinct colour per method, in the paper's method order, shared by all figures of a report.

    Up to 10 methods take matplotlib's ``tab10``, up to 20 ``tab20`` (dark hues first); more are spread
    evenly over ``turbo``, so no two methods of a report share a colour.
    """
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


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI, format="png", bbox_inches="tight")
    return path


def plot_cumulative_ece(
    curves: Sequence[OrderCurves], path: Path, *, title: str, colors: Mapping[str, str] | None = None
) -> Path:
    """Cumulative ECE against tasks seen, mean over orders with a ±std band (section 4.4, Figure "learning").

    Args:
        curves: The curves of one (stream, critic), one per method.
        path: Output PNG path.
        title: Figure title.
        colors: Colour per method (default :func:`method_colors`).

    Returns:
        ``path``.
    """
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
    return _save(fig, path)


def plot_depth(
    depth: Mapping[str, Sequence[DepthBucket]],
    path: Path,
    *,
    title: str,
    colors: Mapping[str, str] | None = None,
) -> Path:
    """Calibration by within-trajectory depth (Figure 1): ECE (left), mean confidence and accuracy (right).

    Args:
        depth: Buckets per method, all with the same bucket labels.
        path: Output PNG path.
        title: Figure title.
        colors: Colour per method (default :func:`method_colors`).

    Returns:
        ``path``.
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
        acc = [_or_nan(by_label.get(lab), "positive_rate") for lab in labels]
        ax_ece.plot(x, ece, marker="o", color=color, label=method_label(method))
        ax_conf.plot(x, conf, marker="o", color=color)
        ax_conf.plot(x, acc, marker="x", linestyle=":", color=color)
    for ax in (ax_ece, ax_conf):
        ax.set_xticks(x, labels)
        ax.set_xlabel("step index within the trajectory")
        ax.grid(alpha=0.3)
    ax_ece.set_ylabel("ECE")
    ax_ece.set_ylim(bottom=0)
    ax_conf.set_ylabel("mean confidence (solid) / positive rate (dotted)")
    ax_conf.set_ylim(0, 1)
    # One legend for both panels (a method has one colour in each), beside the right one.
    handles, names = ax_ece.get_legend_handles_labels()
    ax_conf.legend(handles, names, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.suptitle(title)
    return _save(fig, path)


def _or_nan(bucket: DepthBucket | None, attr: str) -> float:
    value = None if bucket is None else getattr(bucket, attr)
    return float("nan") if value is None else float(value)


def plot_reliability(
    bins: Mapping[str, ReliabilityBins],
    path: Path,
    *,
    title: str,
    eces: Mapping[str, float] | None = None,
    colors: Mapping[str, str] | None = None,
    ncols: int = 4,
) -> Path:
    """Reliability diagrams, one panel per method (appendix E, Figure "reliability").

    Bars are the positive rate (empirical accuracy) per confidence bin, the dashed diagonal is perfect
    calibration, the red hatched box between each bar's top and the bin's mean confidence is the
    calibration gap, and the number over each bar is the bin's step count.

    Args:
        bins: Bins per method (:func:`ceb.eval.metrics.reliability_bins`).
        path: Output PNG path.
        title: Figure title.
        eces: ECE per method, shown in the panel titles.
        colors: Bar colour per method (default :func:`method_colors`).
        ncols: Panels per row.

    Returns:
        ``path``.
    """
    methods = sorted(bins, key=method_sort_key)
    colors = colors or method_colors(methods)
    ncols = max(1, min(ncols, len(methods)))
    nrows = max(1, -(-len(methods) // ncols))
    fig = Figure(figsize=(3.2 * ncols, 3.3 * nrows))
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    for ax, method in zip(axes, methods, strict=False):
        _reliability_panel(ax, bins[method], colors.get(method, "tab:blue"))
        name = method_label(method)
        ax.set_title(f"{name} (ECE {eces[method]:.3f})" if eces and method in eces else name, fontsize="medium")
    for ax in axes[len(methods) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def _reliability_panel(ax: Axes, rb: ReliabilityBins, color: str) -> None:
    lefts = rb.edges[:-1]
    widths = np.diff(rb.edges)
    filled = rb.nonempty
    acc = np.where(filled, rb.accuracy, 0.0)
    ax.bar(lefts, acc, width=widths, align="edge", color=color, alpha=0.75, edgecolor="black", linewidth=0.5)
    for k in np.flatnonzero(filled):
        low, high = sorted((float(rb.accuracy[k]), float(rb.mean_confidence[k])))
        ax.bar(
            lefts[k],
            high - low,
            bottom=low,
            width=widths[k],
            align="edge",
            fill=False,
            hatch="////",
            edgecolor="tab:red",
            linewidth=0.5,
        )
        ax.annotate(
            str(int(rb.counts[k])),
            (lefts[k] + widths[k] / 2, max(float(rb.accuracy[k]), float(rb.mean_confidence[k]))),
            textcoords="offset points",
            xytext=(0, 2),
            ha="center",
            fontsize=6,
        )
    ax.plot([0, 1], [0, 1], linestyle="--", color="gray", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("confidence")
    ax.set_ylabel("positive rate")
