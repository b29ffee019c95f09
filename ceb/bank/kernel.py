"""Exact incremental TF-IDF cosine retrieval for the bank (paper section 3.3).

:class:`IncrementalTfidf` returns, for every query, the similarity vector of
:class:`~ceb.bank.retrieval.TfidfReference` (scikit-learn refit on all keys after every update) without refitting:
only new keys are tokenised; every update redoes the row norms (every idf moves with ``n``) in one pass. After an
eviction (:mod:`ceb.bank.policy`) the scores equal a fit on the kept keys within 1e-9, not bit for bit (term ids
keep the first-seen order over all keys ever added); replaying the same updates and evictions, or restoring the
term list (:attr:`IncrementalTfidf.terms`), reproduces them bit for bit.

Storage and pruning: docs/performance.md, "How it holds a million records" (raw counts ``C`` in row blocks of at
most 65,536 keys, as postings and as rows, 8 bytes an entry; counts take one byte while they fit, else two or four).
New keys go to a small *tail* block folded into the open *main* block once it outgrows ``1/8`` of it; a main block
that would pass 65,536 keys is sealed, so no fold copies more than one block. The weights
``w_ij = (c_ij * idf_j) / norm_i`` are stored (float64) only while the bank is small (:data:`_PRUNE_MIN_KEYS`); a
larger one computes those a query reads.

Arithmetic order follows scikit-learn's, operation for operation, so the scores are not just within 1e-9 of
the reference but bit-identical to it, and ties between top-k candidates break the same way:

- scikit-learn's fitted matrix keeps each row's entries in the order terms were first seen in the corpus
  (``CountVectorizer._sort_features`` renames the columns alphabetically but does not re-sort the rows). Our
  term ids *are* first-seen order, and both layouts list each row's entries by ascending term id, so row
  norms and dot products accumulate from 0.0 in the same order as ``inplace_csr_row_normalize_l2`` and the sparse
  product ``X @ q.T`` (adding a term the query lacks adds an exact ``+0.0``). scipy's ``csr_matvec`` and
  ``csc_matvec``, ``np.add.at`` and ``np.bincount`` add one by one in input order, which every pass keeps.
- The query vector is built like ``TfidfVectorizer.transform``'s, with its norm summed in alphabetical term
  order (its row is sorted by the alphabetical vocabulary index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank.retrieval import TFIDF_PARAMS
from ceb.bank.retrieval import top_k as _top_k
from ceb.errors import BankError

try:  # scipy's compiled sparse kernels (private module, stable for years); numpy does the same, slower
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
    from scipy.sparse._sparsetools import csr_matvec as _csr_matvec
except ImportError:  # pragma: no cover - tested by patching them to None
    _csc_matvec = None
    _csr_matvec = None

__all__ = ["IncrementalTfidf"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_BLOCK_ROWS = 1 << 16
"""Keys per block at most: a row within a block fits a uint16."""
_FOLD_FRACTION = 8
"""The tail is folded into the main block once its entries exceed ``1 / _FOLD_FRACTION`` of the main's."""
_FOLD_MIN_NNZ = 1 << 14
"""...and exceed this many entries, so that a small bank does not fold on every update."""
_COUNT_KEYS = 1 << 13
"""Keys tokenised per step of an update (bounds the Python objects a bulk load holds at once)."""
_PRUNE_MIN_DEAD = 1 << 12
"""Terms no kept key holds are dropped once more than this and than live terms. It keeps the live terms' order, so
changes no score, and depends on the vocabulary and document frequencies only, so a restored kernel prunes alike."""
_PRUNE_MIN_KEYS = 1 << 16
""":meth:`IncrementalTfidf.top_k` prunes from this many keys on. A smaller bank scores every key (a few ms at most,
less than the pruning's fixed work) from stored weights (float64 in column order, 8 bytes an entry, beside the
counts; twice as fast to score)."""
_STORED_NNZ = 1 << 24
"""...unless its keys are so long that the stored weights would pass 134 MB (this many entries)."""
_SEED_POSTINGS = 128
""":meth:`IncrementalTfidf.top_k` scores exactly the keys of its most selective terms until it has this many..."""
_SEED_MAX = 512
"""...and at most this many (more only to reach ``k`` keys of each class), for a first ``k``-th best per class."""
_BATCH = 2048
"""Keys a class scores exactly at a time, best upper bound first, raising its ``k``-th best as it goes."""
_BOUND_LOOSEN_MAX = 1.25
"""The bounds of :meth:`IncrementalTfidf.top_k` are recomputed from all counts once appends loosened them by this."""
_CHUNK_NNZ = 1 << 21
"""Entries per step of the passes over a block (norms, bounds): bounds their temporaries (~50 MB)."""
_WEAK_SHARE = 0.8
"""The weak terms' bound may reach this share of ``theta``. At 1.0 (classic MaxScore) the fewest postings are read,
but every key holding any strong term keeps a bound near ``theta`` and is scored exactly; leaving a margin reads
a few more postings and scores far fewer keys (1M InterCode keys: query p50 about 10 ms at 0.7-0.85, 11 at 1.0)."""
_SLACK = 1e-9
"""Every comparison with a bound gives way by this much: float rounding can keep a key in the running, never
drop one (the bounds and partial scores are within 1e-12 of exact)."""


def _count_dtype(top: int) -> type[np.unsignedinteger[Any]]:
    """The smallest unsigned type that holds counts up to ``top``."""
    if top <= np.iinfo(np.uint8).max:
        return np.uint8
    if top <= np.iinfo(np.uint16).max:
        return np.uint16
    if top <= np.iinfo(np.uint32).max:
        return np.uint32
    raise BankError(f"IncrementalTfidf: a key repeats a term {top} times")


def _ranges(starts: IntArray, lens: IntArray) -> tuple[IntArray, IntArray]:
    """Positions ``starts[t] .. starts[t] + lens[t] - 1`` for every ``t``, concatenated, and the running ends."""
    ends = np.cumsum(lens)
    total = int(ends[-1]) if ends.size else 0
    idx = np.arange(total, dtype=np.int64)
    idx += np.repeat(starts - (ends - lens), lens)
    return idx, ends


@dataclass(frozen=True, slots=True)
class _Block:
    """Raw term counts of the keys ``[start, start + n_rows)`` over the terms ``[0, n_cols)``, in both layouts."""

    start: int  # the block's first key in the bank
    n_rows: int  # at most _BLOCK_ROWS
    indptr: IntArray  # (n_cols + 1,): term j's entries are indptr[j]:indptr[j+1]
    rows: npt.NDArray[np.uint16]  # (nnz,): key of each column entry, relative to start, ascending in a column
    counts: npt.NDArray[np.unsignedinteger[Any]]  # (nnz,): raw count of each column entry
    col_len: IntArray  # (n_cols,): diff(indptr)
    row_ptr: IntArray  # (n_rows + 1,): key i's entries are row_ptr[i]:row_ptr[i+1]
    terms: npt.NDArray[np.int32]  # (nnz,): term of each row entry, ascending in a row
    row_counts: npt.NDArray[np.unsignedinteger[Any]]  # (nnz,): raw count of each row entry

    @classmethod
    def from_columns(
        cls, start: int, n_rows: int, indptr: IntArray, rows: npt.NDArray[Any], counts: npt.NDArray[Any]
    ) -> _Block:
        """Build a block from its columns; the rows are derived (a stable sort by row keeps terms ascending)."""
        if n_rows > _BLOCK_ROWS:
            raise AssertionError(f"a block of {n_rows} keys (at most {_BLOCK_ROWS})")
        nnz = len(rows)
        dtype = _count_dtype(int(counts.max()) if nnz else 0)
        col_len = np.diff(indptr)
        order = np.argsort(rows, kind="stable")
        terms = np.repeat(np.arange(len(col_len), dtype=np.int32), col_len)[order]
        row_ptr = np.zeros(n_rows + 1, dtype=np.int64)
        np.cumsum(np.bincount(rows, minlength=n_rows), out=row_ptr[1:])
        return cls(
            start,
            n_rows,
            indptr.astype(np.int64, copy=False),
            rows.astype(np.uint16, copy=False),
            counts.astype(dtype, copy=False),
            col_len,
            row_ptr,
            terms,
            counts[order].astype(dtype, copy=False),
        )

    @property
    def n_cols(self) -> int:
        """Terms the block has columns for (terms first seen later have no entries here)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return len(self.rows)

    def column_entries(self, sel: IntArray) -> tuple[IntArray, IntArray]:
        """Positions into ``rows``/``counts`` of the terms ``sel`` (ascending, ``< n_cols``), and entries per term."""
        lo = self.indptr[sel]
        lens = self.indptr[sel + 1] - lo
        idx, _ = _ranges(lo, lens)
        return idx, lens

    def row_chunks(self, target: int = _CHUNK_NNZ) -> list[tuple[int, int]]:
        """Row ranges ``[a, b)`` of about ``target`` entries each."""
        if self.n_rows == 0:
            return []
        cuts = np.searchsorted(self.row_ptr, np.arange(target, self.nnz, target, dtype=np.int64), side="right") - 1
        bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, self.n_rows), [self.n_rows]]))
        return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _block_from_coo(start: int, n_rows: int, n_cols: int, rows: IntArray, cols: IntArray, counts: IntArray) -> _Block:
    """Build a block from entries listed row by row (so that a stable sort by term keeps rows ascending)."""
    order = np.argsort(cols, kind="stable")
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n_cols), out=indptr[1:])
    return _Block.from_columns(start, n_rows, indptr, rows[order], counts[order])


def _stack(top: _Block, bottom: _Block, n_cols: int) -> _Block:
    """Stack two adjacent row blocks into one (``bottom``'s keys follow ``top``'s), in one linear pass."""
    if top.start + top.n_rows != bottom.start:
        raise AssertionError(f"blocks not adjacent: {top.start}+{top.n_rows} != {bottom.start}")
    n_rows = top.n_rows + bottom.n_rows
    if n_rows > _BLOCK_ROWS:
        raise AssertionError(f"a block of {n_rows} keys (at most {_BLOCK_ROWS})")
    top_len = np.zeros(n_cols, dtype=np.int64)
    top_len[: top.n_cols] = top.col_len
    bottom_len = np.zeros(n_cols, dtype=np.int64)
    bottom_len[: bottom.n_cols] = bottom.col_len
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(top_len + bottom_len, out=indptr[1:])
    # Destination of an entry: its column's new start plus its offset within its old column (plus, for the
    # bottom block, the length of the top block's part of the column).
    top_pos = np.arange(top.nnz, dtype=np.int64)
    top_pos += np.repeat(indptr[: top.n_cols] - top.indptr[:-1], top.col_len)
    bottom_pos = np.arange(bottom.nnz, dtype=np.int64)
    bottom_pos += np.repeat(indptr[: bottom.n_cols] + top_len[: bottom.n_cols] - bottom.indptr[:-1], bottom.col_len)
    nnz = top.nnz + bottom.nnz
    dtype = np.promote_types(top.counts.dtype, bottom.counts.dtype)
    rows = np.empty(nnz, dtype=np.uint16)
    rows[top_pos] = top.rows
    rows[bottom_pos] = bottom.rows + np.uint16(top.n_rows)
    counts = np.empty(nnz, dtype=dtype)
    counts[top_pos] = top.counts
    counts[bottom_pos] = bottom.counts
    row_ptr = np.concatenate([top.row_ptr, bottom.row_ptr[1:] + top.nnz])
    return _Block(
        top.start,
        n_rows,
        indptr,
        rows,
        counts,
        np.diff(indptr),
        row_ptr,
        np.concatenate([top.terms, bottom.terms]),
        np.concatenate([top.row_counts.astype(dtype, copy=False), bottom.row_counts.astype(dtype, copy=False)]),
    )


def _drop_rows(block: _Block, start: int, gone: npt.NDArray[np.bool_]) -> _Block:
    """The block without its rows marked in ``gone`` (shape ``(n_rows,)``), at ``start``; entry order kept."""
    keep_rows = ~gone
    new_row = (np.cumsum(keep_rows) - 1).astype(np.uint16)  # kept rows renumbered 0..m-1
    keep = keep_rows[block.rows]
    cols = np.repeat(np.arange(block.n_cols, dtype=np.int64), block.col_len)[keep]
    indptr = np.zeros(block.n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=block.n_cols), out=indptr[1:])
    row_len = np.diff(block.row_ptr)[keep_rows]
    row_ptr = np.zeros(len(row_len) + 1, dtype=np.int64)
    np.cumsum(row_len, out=row_ptr[1:])
    row_keep = np.repeat(keep_rows, np.diff(block.row_ptr))
    return _Block(
        start,
        len(row_len),
        indptr,
        new_row[block.rows[keep]],
        block.counts[keep],
        np.diff(indptr),
        row_ptr,
        block.terms[row_keep],
        block.row_counts[row_keep],
    )


def _drop_columns(block: _Block, new_id: npt.NDArray[np.int64], live: npt.NDArray[np.bool_]) -> _Block:
    """The block without the columns not ``live`` (which hold no entries); row terms renumbered by ``new_id``."""
    keep = live[: block.n_cols]
    if block.nnz and int(block.col_len[~keep].sum()):
        raise AssertionError("a dropped column holds entries")
    indptr = np.concatenate([np.zeros(1, dtype=np.int64), block.indptr[1:][keep]])
    return _Block(
        block.start,
        block.n_rows,
        indptr,
        block.rows,
        block.counts,
        np.diff(indptr),
        block.row_ptr,
        new_id[block.terms].astype(np.int32),
        block.row_counts,
    )


def _row_sums(block: _Block, a: int, b: int, data: FloatArray, x: FloatArray, out: FloatArray) -> None:
    """``out[i] += sum_e data[e] * x[terms[e]]`` over rows ``[a, b)``'s entries ``data``, in row order."""
    lo = int(block.row_ptr[a])
    terms = block.terms[lo : int(block.row_ptr[b])]
    if _csr_matvec is None:
        np.add.at(out, np.repeat(np.arange(b - a), np.diff(block.row_ptr[a : b + 1])), data * x[terms])
        return
    indptr = (block.row_ptr[a : b + 1] - lo).astype(np.int32)
    _csr_matvec(b - a, len(x), indptr, terms, data, x, out)


def _norms(block: _Block, idf: FloatArray) -> FloatArray:
    """Row norms ``sqrt(sum_j (c_ij * idf_j)**2)``, shape ``(n_rows,)`` (0 for a key with no terms)."""
    sq = np.zeros(block.n_rows, dtype=np.float64)
    ones = np.ones(len(idf), dtype=np.float64)
    for a, b in block.row_chunks():
        lo, hi = int(block.row_ptr[a]), int(block.row_ptr[b])
        tf = idf[block.terms[lo:hi]]
        tf *= block.row_counts[lo:hi]
        tf *= tf
        _row_sums(block, a, b, tf, ones, sq[a:b])
    return np.sqrt(sq, out=sq)


def _bounds(block: _Block, norms: FloatArray) -> FloatArray:
    """Per term, ``max_i c_ij / norm_i`` over the block's keys, shape ``(n_cols,)``: ``w_ij <= idf_j * bound_j``."""
    bound = np.zeros(block.n_cols, dtype=np.float64)
    full = np.flatnonzero(block.col_len)
    if not full.size:
        return bound
    ratio = block.counts / norms[block.rows]
    bound[full] = np.maximum.reduceat(ratio, block.indptr[full])
    return bound


def _weigh(block: _Block, idf: FloatArray) -> tuple[FloatArray, FloatArray]:
    """The weights ``(c_ij * idf_j) / norm_i`` in column order, shape ``(nnz,)``, and norms equal to :func:`_norms`."""
    w = np.repeat(idf[: block.n_cols], block.col_len)
    w *= block.counts
    norms = np.sqrt(np.bincount(block.rows, weights=w * w, minlength=block.n_rows))
    w /= norms[block.rows]
    return w, norms


class IncrementalTfidf:
    """Exact incremental TF-IDF cosine retriever: the refit reference's scores, without refitting.

    Implements :class:`~ceb.bank.retrieval.Retriever` with the semantics of scikit-learn's
    ``TfidfVectorizer(**TFIDF_PARAMS)`` fitted on all ``n`` keys: the same analyser (lower-cased word 1-2
    grams of tokens of two or more word characters), raw counts ``c_ij``, smoothed
    ``idf_j = ln((1 + n) / (1 + df_j)) + 1`` for the current ``n``, and L2-normalised rows. A query's terms
    outside the vocabulary are ignored; a query or bank without a usable token scores 0 everywhere. Sources: paper
    section 3.3 ("a TF-IDF embedding fit to the bank's keys"); scikit-learn ``TfidfVectorizer`` /
    ``TfidfTransformer`` (smooth_idf, norm="l2"); MaxScore pruning (Turtle and Flood, 1995).
    """

    def __init__(self) -> None:
        self._analyze: Callable[[str], list[str]] = TfidfVectorizer(**TFIDF_PARAMS).build_analyzer()
        self._reset()

    def _reset(self) -> None:
        self._n = 0
        self._last_key: str | None = None
        self._keys: Sequence[str] = ()
        # Position in ``_keys`` (the last sequence update() took) of each current key; None: the identity.
        self._key_pos: IntArray | None = None
        self._vocab: dict[str, int] = {}
        self._df = np.zeros(0, dtype=np.int64)
        self._idf = np.zeros(0, dtype=np.float64)
        self._sealed: list[_Block] = []  # full blocks, never copied again
        self._main: _Block | None = None
        self._tail: _Block | None = None
        self._norms = np.zeros(0, dtype=np.float64)  # per key: L2 norm of its tf-idf row
        self._inv_norms = np.zeros(0, dtype=np.float64)  # 1 / norm (0 for a key without terms), large banks only
        self._weights: list[FloatArray] | None = None  # per block of _blocks(), column order, while the bank is small
        self._bound = np.zeros(0, dtype=np.float64)  # per term: max over keys of count / norm
        self._bounds_valid = False  # False: the next reweighing recomputes the bounds from all counts
        self._loosened = 1.0  # factor by which the bounds may exceed the exact ones
        self._stale = False
        self._label_cache: tuple[tuple[IntArray, ...], npt.NDArray[np.int8]] | None = None

    def __len__(self) -> int:
        return self._n

    @property
    def vocabulary_size(self) -> int:
        """Distinct terms (1- and 2-grams) with an id: those of the keys, and of evicted keys until pruned."""
        return len(self._vocab)

    @property
    def terms(self) -> tuple[str, ...]:
        """The vocabulary in term-id order, shape ``(vocabulary_size,)``: what :meth:`restore` needs."""
        return tuple(self._vocab)

    @property
    def nnz(self) -> int:
        """Stored (key, term) counts: the size of the count matrix, and of each update's reweighting pass."""
        return sum(b.nnz for b in self._blocks())

    def restore(self, keys: Sequence[str], terms: Sequence[str]) -> None:
        """Start over from ``keys`` with the term ids of ``terms``: scores bit-identical to that kernel's.

        ``terms`` is the original kernel's :attr:`terms`; terms of ``keys`` missing from it are numbered after it.

        Raises:
            BankError: ``terms`` repeats a term.
        """
        self._reset()
        self._vocab = {t: j for j, t in enumerate(terms)}
        if len(self._vocab) != len(terms):
            raise BankError("IncrementalTfidf.restore: the term list repeats a term")
        self._df = np.zeros(len(terms), dtype=np.int64)
        self.update(keys)

    def update(self, keys: Sequence[str]) -> None:
        """Take the bank's keys after an update: the previous keys, in order, then the new ones.

        ``keys`` has shape ``(n,)``, its slices are lists or tuples; only ``keys[len(previous):]`` are read (plus
        the last previous key, a cheap check that the prefix is the one seen before). Empty, it clears the retriever.

        Raises:
            BankError: ``keys`` is shorter than before, or its last previous key changed.
        """
        n = len(keys)
        if n == 0:
            self._reset()
            return
        if n < self._n or (self._n and keys[self._n - 1] != self._last_key):
            raise BankError(
                f"IncrementalTfidf only appends: got {n} keys after {self._n}, and the bank's earlier keys "
                "must come first, unchanged"
            )
        self._keys, self._key_pos = keys, None
        if n == self._n:
            return
        first_new = self._n
        for block in self._count(keys, self._n):
            self._append(block)
            self._n = block.start + block.n_rows
        self._last_key = keys[n - 1]
        self._reweigh(first_new)

    def _blocks(self) -> list[_Block]:
        """Every block, in bank order."""
        return [*self._sealed, *(b for b in (self._main, self._tail) if b is not None)]

    def _reweigh(self, first_new: int | None = None) -> None:
        """New idf and norms; stored weights, or top_k's bounds (after an append: the old over the least idf ratio)."""
        old_idf, old_bound = self._idf, self._bound
        df = self._df.astype(np.float64)
        df += 1.0
        self._idf = np.log(float(self._n + 1) / df) + 1.0
        blocks = self._blocks()
        self._norms = np.zeros(self._n, dtype=np.float64)
        self._stale = False
        if self._n < _PRUNE_MIN_KEYS and self.nnz <= _STORED_NNZ:
            self._weights = []
            for b in blocks:  # one pass gives the norms and the weights
                w, self._norms[b.start : b.start + b.n_rows] = _weigh(b, self._idf)
                self._weights.append(w)
        else:
            self._weights = None
            for b in blocks:
                self._norms[b.start : b.start + b.n_rows] = _norms(b, self._idf)
        if self._n < _PRUNE_MIN_KEYS:
            self._inv_norms = np.zeros(0, dtype=np.float64)
            self._bounds_valid = False
            return
        # For the bounds of top_k (a key with no terms has no entry, so never needs its 1 / 0).
        self._inv_norms = np.divide(1.0, self._norms, out=np.zeros_like(self._norms), where=self._norms > 0)
        m = len(old_idf)
        loosen, r = np.inf, 1.0
        if first_new is not None and self._bounds_valid and m == len(old_bound):
            held = self._df[:m] > 0
            r = min(1.0, float(np.min(self._idf[:m][held] / old_idf[held]))) if held.any() else 1.0
            loosen = self._loosened / r
        bound = np.zeros(len(self._vocab), dtype=np.float64)
        if first_new is not None and loosen <= _BOUND_LOOSEN_MAX:
            bound[:m] = old_bound / r
            renewed = [b for b in blocks if b.start + b.n_rows > first_new]
            self._loosened = loosen
        else:
            renewed = blocks
            self._loosened = 1.0
        for b in renewed:  # the blocks holding new keys (their old keys' bounds only tighten here)
            mine = _bounds(b, self._norms[b.start : b.start + b.n_rows])
            np.maximum(bound[: b.n_cols], mine, out=bound[: b.n_cols])
        self._bound = bound
        self._bounds_valid = True

    def evict(self, positions: Sequence[int] | npt.NDArray[np.int64]) -> None:
        """Drop the keys at ``positions``; the others keep their order (and are renumbered ``0..n-m-1``).

        Their rows leave the count blocks and the document frequency of each of their terms drops by one; no
        key is tokenised again. Afterwards the similarities of the kept keys equal a scikit-learn fit on exactly
        those keys (within 1e-9). The next :meth:`update` takes the kept keys, in order, then any new ones.
        ``positions`` (current key order, shape ``(m,)``) may come in any order; repeats are dropped once.

        Raises:
            BankError: A position is outside ``[0, n)``.
        """
        pos = np.unique(np.asarray(positions, dtype=np.int64))
        if pos.size == 0:
            return
        if pos[0] < 0 or pos[-1] >= self._n:
            raise BankError(f"IncrementalTfidf.evict: positions must be in [0, {self._n}), got {pos[0]}..{pos[-1]}")
        if pos.size == self._n:
            self._reset()
            return
        dropped = np.zeros(self._n, dtype=np.bool_)
        dropped[pos] = True
        key_pos = np.arange(self._n, dtype=np.int64) if self._key_pos is None else self._key_pos
        self._key_pos = key_pos[~dropped]
        self._last_key = self._keys[int(self._key_pos[-1])]
        start = 0
        kept: list[_Block] = []
        for b in self._blocks():
            gone = dropped[b.start : b.start + b.n_rows]
            if gone.any():
                kept.append(_drop_rows(b, start, gone))
                self._df[: b.n_cols] -= b.col_len - kept[-1].col_len
            else:
                kept.append(replace(b, start=start))
            start += kept[-1].n_rows
        n_sealed = len(self._sealed)
        self._sealed = [b for b in kept[:n_sealed] if b.n_rows]
        rest = [b for b in kept[n_sealed:] if b.n_rows]
        self._main = rest[0] if rest else None
        self._tail = rest[1] if len(rest) > 1 else None
        self._n -= int(pos.size)
        self._bounds_valid = False
        self._prune()
        self._stale = True

    def _prune(self) -> None:
        """Drop terms no kept key holds, once they outnumber the live terms (and :data:`_PRUNE_MIN_DEAD`)."""
        live = self._df > 0
        dead = len(live) - int(np.count_nonzero(live))
        if dead <= max(_PRUNE_MIN_DEAD, len(live) - dead):
            return
        self._vocab = {t: j for j, t in enumerate(t for t, alive in zip(self._vocab, live, strict=True) if alive)}
        self._df = self._df[live]
        new_id = np.cumsum(live) - 1
        self._sealed = [_drop_columns(b, new_id, live) for b in self._sealed]
        self._main = _drop_columns(self._main, new_id, live) if self._main is not None else None
        self._tail = _drop_columns(self._tail, new_id, live) if self._tail is not None else None

    def _count(self, keys: Sequence[str], start: int) -> list[_Block]:
        """Count ``keys[start:]`` into blocks, :data:`_COUNT_KEYS` at a time; an analyser error restores vocab, df."""
        vocab = self._vocab
        n_vocab, df_before = len(vocab), self._df
        blocks: list[_Block] = []
        try:
            for a in range(start, len(keys), _COUNT_KEYS):
                piece = keys[a : a + _COUNT_KEYS]
                counted = [Counter(self._analyze(key)) for key in piece]
                rows: list[int] = []
                cols: list[int] = []
                counts: list[int] = []
                for r, key_counts in enumerate(counted):
                    for term, c in key_counts.items():
                        j = vocab.get(term)
                        if j is None:
                            # First seen now: the next id, as CountVectorizer's fitting vocabulary numbers terms.
                            j = vocab[term] = len(vocab)
                        rows.append(r)
                        cols.append(j)
                        counts.append(c)
                n_cols = len(vocab)
                col_arr = np.asarray(cols, dtype=np.int64)
                df = np.zeros(n_cols, dtype=np.int64)
                df[: len(self._df)] = self._df
                df += np.bincount(col_arr, minlength=n_cols)  # a term appears at most once per key here
                self._df = df
                blocks.append(
                    _block_from_coo(
                        a,
                        len(piece),
                        n_cols,
                        np.asarray(rows, dtype=np.int64),
                        col_arr,
                        np.asarray(counts, dtype=np.int64),
                    )
                )
        except BaseException:
            if len(vocab) > n_vocab:
                self._vocab = dict(list(vocab.items())[:n_vocab])
            self._df = df_before
            raise
        return blocks

    def _append(self, new: _Block) -> None:
        """Merge new rows into the tail, folding or sealing blocks by :data:`_FOLD_FRACTION` and :data:`_BLOCK_ROWS`."""
        n_cols = len(self._vocab)
        open_rows = sum(b.n_rows for b in (self._main, self._tail) if b is not None)
        if open_rows + new.n_rows > _BLOCK_ROWS:
            full = self._main
            if self._tail is not None:
                full = self._tail if full is None else _stack(full, self._tail, n_cols)
            if full is not None:
                self._sealed.append(full)
            self._main, self._tail = None, None
        tail = new if self._tail is None else _stack(self._tail, new, n_cols)
        main_nnz = self._main.nnz if self._main is not None else 0
        if tail.nnz > max(_FOLD_MIN_NNZ, main_nnz // _FOLD_FRACTION) or self._main is None:
            self._main = tail if self._main is None else _stack(self._main, tail, n_cols)
            self._tail = None
        else:
            self._tail = tail

    # --- queries ------------------------------------------------------------------------------------------------

    def _query(self, query: str) -> tuple[IntArray, FloatArray]:
        """The query's in-vocabulary term ids, ascending, and its L2-normalised tf-idf weights, shape ``(m,)`` each."""
        if self._stale:
            self._reweigh()
        vocab, df = self._vocab, self._df
        # A term only evicted keys held is out of the vocabulary of a fit on the kept keys.
        found = {t: c for t, c in Counter(self._analyze(query)).items() if t in vocab and df[vocab[t]] > 0}
        if not found:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        terms = sorted(found)  # alphabetical: the order of the reference's query row
        ids = np.fromiter((vocab[t] for t in terms), dtype=np.int64, count=len(terms))
        tf = np.fromiter((found[t] for t in terms), dtype=np.float64, count=len(terms))
        tf *= self._idf[ids]
        norm = np.sqrt(np.cumsum(tf * tf)[-1])  # cumsum adds strictly left to right
        q = tf / norm
        order = np.argsort(ids)
        return ids[order], q[order]

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of ``query`` to every key, in [0, 1], shape ``(n,)``, in insertion order.

        ``sim_i = sum_j w_ij * q_j`` over the query's in-vocabulary terms ``j`` (all zeros without one), with
        ``w_ij = (c_ij * idf_j) / norm_i`` and ``q_j = (c_j * idf_j) / ||c * idf||_2``; accumulated per key in
        ascending term id, like the reference's sparse product. Reads every posting of the query's terms.
        """
        return self._similarities(*self._query(query))

    def _similarities(self, ids: IntArray, q: FloatArray) -> FloatArray:
        """:meth:`similarities` of a query's term ids (ascending) and weights (:meth:`_query`)."""
        out = np.zeros(self._n, dtype=np.float64)
        if not ids.size:
            return out
        for i, block in enumerate(self._blocks()):
            m = int(np.searchsorted(ids, block.n_cols))
            if not m:
                continue
            part = out[block.start : block.start + block.n_rows]
            idx, lens = block.column_entries(ids[:m])
            if not idx.size:
                continue
            rows = block.rows[idx]
            if self._weights is not None:
                w = self._weights[i][idx]
            else:
                w = np.repeat(self._idf[ids[:m]], lens)
                w *= block.counts[idx]
                w /= self._norms[block.start : block.start + block.n_rows][rows]
            if _csc_matvec is None:
                np.add.at(part, rows, w * np.repeat(q[:m], lens))
                continue
            indptr = np.zeros(m + 1, dtype=np.int32)
            np.cumsum(lens, out=indptr[1:])
            _csc_matvec(block.n_rows, m, indptr, rows.astype(np.int32), w, np.ascontiguousarray(q[:m]), part)
        return out

    def _exact(self, q_dense: FloatArray, docs: IntArray) -> FloatArray:
        """:meth:`similarities` of the keys ``docs`` (ascending, unique) from their rows, bit-identical to it."""
        out = np.zeros(docs.size, dtype=np.float64)
        if not docs.size:
            return out
        blocks = self._blocks()
        starts = np.fromiter((b.start for b in blocks), dtype=np.int64, count=len(blocks))
        edges = np.searchsorted(docs, starts).tolist() + [docs.size]
        terms_parts, count_parts, len_parts = [], [], []
        for i, b in enumerate(blocks):
            lo_doc, hi_doc = edges[i], edges[i + 1]
            if lo_doc == hi_doc:
                continue
            rel = docs[lo_doc:hi_doc] - b.start
            lo = b.row_ptr[rel]
            lens = b.row_ptr[rel + 1] - lo
            idx, _ = _ranges(lo, lens)
            terms_parts.append(b.terms[idx])
            count_parts.append(b.row_counts[idx])
            len_parts.append(lens)
        terms = np.concatenate(terms_parts)
        # A term the query lacks adds an exact +0.0: only the entries of the query's terms are weighed and added,
        # still in ascending term id within each row.
        q_entry = q_dense[terms]
        hit = q_entry != 0.0
        hits_before = np.zeros(terms.size + 1, dtype=np.int64)  # hits among the first e entries
        np.cumsum(hit, out=hits_before[1:])
        row_end = np.zeros(docs.size + 1, dtype=np.int64)
        np.cumsum(np.concatenate(len_parts), out=row_end[1:])
        indptr = hits_before[row_end]
        terms = terms[hit]
        w = self._idf[terms]
        w *= np.concatenate(count_parts)[hit]
        w /= np.repeat(self._norms[docs], np.diff(indptr))
        if _csr_matvec is None:
            np.add.at(out, np.repeat(np.arange(docs.size), np.diff(indptr)), w * q_entry[hit])
            return out
        _csr_matvec(docs.size, len(q_dense), indptr.astype(np.int32), terms, w, q_dense, out)
        return out

    def _labels_of(self, classes: Sequence[IntArray]) -> npt.NDArray[np.int8]:
        """Class of each key (-1: none), shape ``(n,)``; cached while the bank passes the same class arrays."""
        cached = self._label_cache
        if (
            cached is not None
            and len(cached[1]) == self._n
            and len(cached[0]) == len(classes)
            and all(x is y for x, y in zip(cached[0], classes, strict=True))
        ):
            return cached[1]
        label = np.full(self._n, -1, dtype=np.int8)
        for c, members in enumerate(classes):
            label[members] = c
        self._label_cache = (tuple(classes), label)
        return label

    def top_k(self, query: str, classes: Sequence[IntArray], k: int) -> list[tuple[IntArray, FloatArray]]:
        """Per class, the ``k`` keys most similar to ``query`` and their similarities.

        The same keys, in the same order, with the same (bit-identical) similarities as
        :func:`~ceb.bank.retrieval.top_k` over :meth:`similarities` (most similar first, ties to the earlier
        key). A bank of fewer than :data:`_PRUNE_MIN_KEYS` keys scores every key. A larger one prunes exactly, in
        the manner of MaxScore: a set ``W`` of the query's terms contributes at most
        ``min(sum_W q_j * m_j, ||q_W||)`` to any key's similarity, where ``m_j = idf_j * max_i c_ij / norm_i``
        bounds a term's weight (kept per term by each update) and ``||q_W||`` is Cauchy-Schwarz with the key's
        unit norm. So once a class has a ``k``-th best score ``theta``, a key holding none of the terms outside
        such a ``W`` (bounded below ``theta``) cannot enter its top ``k``. The keys of the rarest terms give a first
        ``theta``; ``W`` takes the longest postings while its bound stays below :data:`_WEAK_SHARE` of ``theta``; a
        key's bound is its partial score plus ``W``'s, capped by ``||q_W|| * sqrt(1 - ||w_strong||^2)``; keys are
        scored exactly, best bound first, until none reaches it.

        ``classes`` hold each class's key positions, ascending, shape ``(m_c,)``, disjoint (fewer than 128); ``k >= 0``.
        Returns, per class, ``(positions, similarities)``, shape ``(min(k, m_c),)`` each.
        """
        ids, q = self._query(query)
        if k == 0 or not ids.size:
            return [(c[:k].astype(np.int64), np.zeros(min(k, c.size))) for c in classes]
        if self._n < _PRUNE_MIN_KEYS:
            every = self._similarities(ids, q)
            picks = [_top_k(every, c, k) for c in classes]
            return [(p, every[p]) for p in picks]
        label = self._labels_of(classes)
        n_cls = len(classes)
        ranked = [c for c in range(n_cls) if classes[c].size > k]  # the others: all their keys are the answer
        q_dense = np.zeros(len(self._vocab), dtype=np.float64)
        q_dense[ids] = q
        seed = self._seed(ids, label, ranked, k)
        seed_sims = self._exact(q_dense, seed)
        theta = np.zeros(n_cls, dtype=np.float64)
        self._raise_theta(theta, ranked, seed, seed_sims, label, k)
        seed_label = label[seed]
        floor = float(theta[ranked].min()) if ranked else 0.0
        cand, upper_all = self._candidates(ids, q, floor)
        cand_label = label[cand]
        out: list[tuple[IntArray, FloatArray]] = []
        for c in range(n_cls):
            if c not in ranked:
                members = classes[c].astype(np.int64)
                member_sims = self._exact(q_dense, members)
                pick = np.lexsort((members, -member_sims))
                out.append((members[pick], member_sims[pick]))
                continue
            in_class = seed_label == c
            docs, sims = [seed[in_class]], [seed_sims[in_class]]
            mine = (cand_label == c) & (upper_all >= theta[c] - _SLACK)
            mine, upper = cand[mine], upper_all[mine]
            fresh = ~np.isin(mine, docs[0])
            mine, upper = mine[fresh], upper[fresh]
            batch_size = _BATCH
            while mine.size:
                alive = upper >= theta[c] - _SLACK
                mine, upper = mine[alive], upper[alive]
                if not mine.size:
                    break
                if mine.size > batch_size:
                    best = np.argpartition(-upper, batch_size - 1)[:batch_size]
                else:
                    best = np.arange(mine.size)
                batch = np.sort(mine[best])
                batch_sims = self._exact(q_dense, batch)
                docs.append(batch)
                sims.append(batch_sims)
                self._raise_theta(theta, [c], batch, batch_sims, label, k)
                rest = np.ones(mine.size, dtype=np.bool_)
                rest[best] = False
                mine, upper = mine[rest], upper[rest]
                batch_size *= 2
            all_docs, all_sims = np.concatenate(docs), np.concatenate(sims)
            if theta[c] <= 0.0:
                # Nothing was pruned; the class may have fewer than k keys sharing a query term, and the rest
                # of its top k are its earliest keys, at similarity 0.
                zeros = np.setdiff1d(classes[c][: k + all_docs.size], all_docs)[:k]
                all_docs = np.concatenate([all_docs, zeros])
                all_sims = np.concatenate([all_sims, np.zeros(zeros.size)])
            pick = np.lexsort((all_docs, -all_sims))[:k]
            out.append((all_docs[pick], all_sims[pick]))
        return out

    def _postings(self, j: int) -> IntArray:
        """Positions of the keys holding term ``j``, ascending, shape ``(df_j,)``."""
        parts = []
        for b in self._blocks():
            if j < b.n_cols and b.col_len[j]:
                rows = b.rows[int(b.indptr[j]) : int(b.indptr[j + 1])].astype(np.int64)
                rows += b.start
                parts.append(rows)
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def _seed(self, ids: IntArray, label: npt.NDArray[np.int8], ranked: Sequence[int], k: int) -> IntArray:
        """Keys to score first for a first ``k``-th best per class: the rarest terms', then a short class's next."""
        n_cls = int(label.max()) + 1 if label.size else 0
        parts: list[IntArray] = []
        got = np.zeros(n_cls + 1, dtype=np.int64)
        total = 0
        order = np.argsort(self._df[ids], kind="stable").tolist()
        t = 0
        for t, i in enumerate(order):  # noqa: B007 - t is read after the loop
            rows = self._postings(int(ids[i]))
            parts.append(rows)
            got += np.bincount(label[rows] + 1, minlength=n_cls + 1)
            total += rows.size
            if total >= _SEED_MAX or (total >= _SEED_POSTINGS and all(got[c + 1] >= k for c in ranked)):
                break
        for c in ranked:
            have = int(got[c + 1])
            for i in order[t + 1 :]:
                if have >= k:
                    break
                rows = self._postings(int(ids[i]))
                rows = rows[label[rows] == c][:_SEED_POSTINGS]
                parts.append(rows)
                have += rows.size
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def _candidates(self, ids: IntArray, q: FloatArray, theta: float) -> tuple[IntArray, FloatArray]:
        """Keys that may reach ``theta`` (ascending) and a bound of each one's score, skipping ``W`` (:meth:`top_k`)."""
        floor = theta - _SLACK
        df = self._df[ids]
        coef = q * self._idf[ids]
        by_len = np.argsort(-df, kind="stable")
        l1 = np.cumsum((coef * self._bound[ids])[by_len])
        l2 = np.sqrt(np.cumsum((q * q)[by_len]))
        weak_bound = np.minimum(l1, l2)
        n_weak = int(np.searchsorted(weak_bound, floor * _WEAK_SHARE, side="left")) if floor > 0.0 else 0
        weak_sum = float(weak_bound[n_weak - 1]) + _SLACK if n_weak else 0.0
        weak_norm = float(l2[n_weak - 1]) + _SLACK if n_weak else 0.0
        strong = np.sort(by_len[n_weak:])
        # A key's strong weights have norm at least its partial score over ||q_strong|| (Cauchy-Schwarz), so its
        # weak ones at most sqrt(1 - that**2): the weak terms add at most ||q_W|| times this.
        inv_strong_norm = 1.0 / max(float(np.sqrt(np.sum(q[strong] ** 2))), 1e-300)
        coef_list = coef.tolist()
        need = floor - weak_sum if n_weak else 0.0  # the partial score a key must reach
        cand_parts: list[IntArray] = []
        upper_parts: list[FloatArray] = []
        for b in self._blocks():
            sel = strong[: int(np.searchsorted(ids[strong], b.n_cols))].tolist()
            lo = b.indptr[ids[sel]].tolist()
            hi = b.indptr[ids[sel] + 1].tolist()
            spans = [(x, y, coef_list[t]) for x, y, t in zip(lo, hi, sel, strict=True) if y > x]
            if not spans:
                continue
            rows = np.concatenate([b.rows[x:y] for x, y, _ in spans])
            weights = np.repeat(np.array([w for _, _, w in spans]), [y - x for x, y, _ in spans])
            weights *= np.concatenate([b.counts[x:y] for x, y, _ in spans])
            part = cast(FloatArray, np.bincount(rows, weights=weights, minlength=b.n_rows))  # float with weights
            if need > 0.0:
                # Keys whose partial score misses the floor even with the weak terms' whole bound drop out here,
                # on the block's dense arrays (cheaper than gathering the norms of every key holding a term).
                part *= self._inv_norms[b.start : b.start + b.n_rows]
                mine = np.flatnonzero(part >= need)
                upper: FloatArray = part[mine]
            else:
                mine = np.flatnonzero(part > 0.0)  # (on a bool array: several times faster than on the floats)
                upper = part[mine] * self._inv_norms[b.start : b.start + b.n_rows][mine]
            if n_weak:
                room = upper * inv_strong_norm
                room *= room
                np.subtract(1.0, room, out=room)
                np.maximum(room, 0.0, out=room)
                np.sqrt(room, out=room)
                room *= weak_norm
                room += _SLACK
                upper += np.minimum(room, weak_sum)
            cand_parts.append(mine + b.start)
            upper_parts.append(upper)
        if not cand_parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        return np.concatenate(cand_parts), np.concatenate(upper_parts)

    @staticmethod
    def _raise_theta(
        theta: FloatArray, ranked: Sequence[int], docs: IntArray, sims: FloatArray, label: npt.NDArray[np.int8], k: int
    ) -> None:
        """Raise each ranked class's ``theta`` to the ``k``-th best exact similarity among its ``docs``."""
        doc_label = label[docs]
        for c in ranked:
            s = sims[doc_label == c]
            if s.size >= k:
                theta[c] = max(theta[c], float(np.partition(s, s.size - k)[s.size - k]))
