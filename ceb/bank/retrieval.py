"""Class-split top-k retrieval (paper section 3.3) and the scikit-learn TF-IDF reference retriever.

:class:`TfidfReference` refits scikit-learn's ``TfidfVectorizer`` on every bank update: the slow reference that
a faster kernel must reproduce (same top-k records, same scores within 1e-9).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer

__all__ = ["TFIDF_PARAMS", "Retriever", "TfidfReference", "class_split_topk", "top_k"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

TFIDF_PARAMS: dict[str, object] = {
    "ngram_range": (1, 2),
    "lowercase": True,
    "token_pattern": r"(?u)\b\w\w+\b",
    "norm": "l2",
    "use_idf": True,
    "smooth_idf": True,
    "sublinear_tf": False,
    "dtype": np.float64,
}
"""The TF-IDF settings of the paper's retriever (word 1-2 grams, appendix "Experimental Details"): smoothed idf
``ln((1 + n) / (1 + df)) + 1``, raw term counts, L2-normalised rows."""


class Retriever(Protocol):
    """What the bank needs from a retriever."""

    def update(self, keys: Sequence[str]) -> None:
        """Take the bank's keys after an update: all of them, in insertion order (shape ``(n,)``)."""

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of ``query`` to every key, shape ``(n,)``, in insertion order."""


class TfidfReference:
    """TF-IDF cosine retriever refit on all keys per update (paper section 3.3, literally); linear in the text."""

    def __init__(self) -> None:
        self._vectorizer: TfidfVectorizer | None = None
        self._matrix: sparse.csr_matrix | None = None
        self._n = 0

    def update(self, keys: Sequence[str]) -> None:
        """Refit on ``keys``; an empty bank clears the fit."""
        self._n = len(keys)
        if not keys:
            self._vectorizer, self._matrix = None, None
            return
        vec = TfidfVectorizer(**TFIDF_PARAMS)
        try:
            self._matrix = sparse.csr_matrix(vec.fit_transform(keys))
        except ValueError:
            # Every key lacks a token of two or more word characters: nothing is similar to anything.
            self._vectorizer, self._matrix = None, None
            return
        self._vectorizer = vec

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of ``query`` to every key (rows are L2-normalised, so a dot product)."""
        if self._vectorizer is None or self._matrix is None:
            return np.zeros(self._n, dtype=np.float64)
        q = self._vectorizer.transform([query])
        return np.asarray((self._matrix @ q.T).toarray()).ravel()


def class_split_topk(sims: FloatArray, labels: npt.NDArray[np.int8], k: int) -> tuple[IntArray, IntArray]:
    """``(positive_idx, negative_idx)``: the top-``k`` most similar records of each class (paper section 3.3).

    ``sims`` and ``labels`` (pseudo-labels in {0, 1}) have shape ``(n,)``. A class with fewer than ``k`` records
    gives all of them. Most similar first, ties to the earlier record (independent of sort stability).

    Raises:
        ValueError: ``k < 0`` or shapes differ.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if sims.shape != labels.shape:
        raise ValueError(f"sims {sims.shape} and labels {labels.shape} differ in shape")
    pos = top_k(sims, np.flatnonzero(labels == 1).astype(np.int64), k)
    neg = top_k(sims, np.flatnonzero(labels == 0).astype(np.int64), k)
    return pos, neg


def top_k(sims: FloatArray, idx: IntArray, k: int) -> IntArray:
    """The ``k`` records of ``idx`` with the highest similarity, most similar first, ties to the earlier record.

    ``sims`` has shape ``(n,)``, ``idx`` (one class, ascending) ``(m,)``, the result ``(min(k, m),)``, ``k >= 0``.
    Partial selection, ``O(len(idx))``, in exactly the order of a stable sort.
    """
    if k == 0 or idx.size == 0:
        return np.empty(0, dtype=np.int64)
    s = sims[idx]
    m = idx.size
    if m <= k or np.isnan(s).any():
        # Small classes, and NaN (placed differently by partition): descending similarity, then ascending index.
        first: IntArray = idx[np.lexsort((idx, -s))[:k]]
        return first
    kth = np.partition(s, m - k)[m - k]
    above = np.flatnonzero(s > kth)
    above = above[np.lexsort((above, -s[above]))]
    tied = np.flatnonzero(s == kth)[: k - above.size]
    picked: IntArray = idx[np.concatenate([above, tied])]
    return picked
