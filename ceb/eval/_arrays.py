"""Array types and the checked (labels, confidences) pair shared by the eval analyses."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def checked_pair(y_true: npt.ArrayLike, y_prob: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Both arrays as float64, checked: 1-D, one length, labels 0/1/NaN, confidences in [0, 1] or NaN."""
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_prob, dtype=np.float64)
    if y.ndim != 1 or y.shape != p.shape:
        raise ValueError(f"y_true and y_prob must be 1-D arrays of one length, got shapes {y.shape} and {p.shape}")
    bad = np.flatnonzero(~np.isnan(y) & (y != 0) & (y != 1))
    if bad.size:
        raise ValueError(f"y_true[{bad[0]}] = {y[bad[0]]!r} is not a binary label (0, 1 or NaN)")
    bad = np.flatnonzero(~np.isnan(p) & ((p < 0) | (p > 1)))
    if bad.size:
        raise ValueError(f"y_prob[{bad[0]}] = {p[bad[0]]!r} is outside [0, 1]")
    return y, p
