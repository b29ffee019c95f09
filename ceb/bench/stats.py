"""Every benchmark's percentiles (numpy's linear interpolation, as vLLM's serving benchmark) and shares of a whole."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["Summary", "percent", "share", "summarize"]


@dataclass(frozen=True, slots=True)
class Summary:
    """A sample of ``n`` values summarised, in its units times ``scale``; ``nan`` figures for an empty one."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


def summarize(values: Iterable[float], *, scale: float = 1.0) -> Summary:
    """Summarise ``values`` multiplied by ``scale`` (e.g. ``1e3``: seconds in, milliseconds out)."""
    a = np.fromiter(values, dtype=np.float64) * scale
    if not a.size:
        return Summary(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    p50, p90, p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
    return Summary(int(a.size), float(a.mean()), p50, p90, p99, float(a.max()))


def share(part: float, whole: float) -> float | None:
    """``part / whole``; ``None`` for an empty whole."""
    return part / whole if whole else None


def percent(x: float | None) -> str:
    """A share as ``12.3%``; ``-`` for ``None``."""
    return "-" if x is None else f"{x:.1%}"
