"""Exact incremental TF-IDF cosine retrieval for the bank (paper section 3.3).

:class:`IncrementalTfidf` returns, for every query, the same similarity vector as
:class:`~ceb.bank.retrieval.TfidfReference` (scikit-learn's ``TfidfVectorizer`` refit on all keys after every
bank update) without refitting: keys are appended, so only the new keys are tokenised and counted. What every
update must still redo is the row norms, because the smoothed idf of *every* term moves when the number of
keys ``n`` moves; that is one vectorised pass over the stored counts. The weights themselves are never
stored: a query computes ``w_ij = (c_ij * idf_j) / norm_i`` for the entries it reads.

Keys can also be evicted (:meth:`IncrementalTfidf.evict`, for a bounded bank: :mod:`ceb.bank.policy`): their
rows are dropped from the count blocks and their terms' document frequencies decremented, again without
re-tokenising anything. The scores then equal a scikit-learn fit on exactly the kept keys (``n`` the number of
kept keys, a term no kept key holds out of the vocabulary) within 1e-9; they are not bit-identical to it,
because term ids stay in the order terms were first seen over *all* keys ever added, not only the kept ones.
Nothing but the kernel's own history decides that order, so replaying the same updates and evictions (a
resume), or restoring the term list (:attr:`IncrementalTfidf.terms`), reproduces the scores bit for bit.

Storage is the raw term-count matrix ``C`` (keys x terms) in compressed sparse column (CSC) form, so that a
query reads only the columns (postings) of its own terms. Appending rows to one CSC matrix would rewrite it,
so ``C`` is kept as two row blocks: a large immutable *main* block and a small *tail* block holding the rows
added since the last fold. Each update merges its new rows into the tail (cost linear in the tail); when the
tail outgrows ``1/8`` of the main block it is folded into it (linear in the bank, amortised to a constant
per appended entry). An entry costs eight bytes (int32 row, float32 count), about 575 MB for the 72M
entries of 1M InterCode-SQL keys; the passes over the blocks go a few million entries at a time, so their
temporaries stay small.

The bank's retrieval (:meth:`IncrementalTfidf.top_k`) does not score every key: it finds the top ``k`` of
each class exactly with MaxScore-style pruning (per-term upper bounds of the weights, kept by each update),
then scores the few keys left in the running in scikit-learn's order, so the keys, their order and their
similarities are those of the full ranking, bit for bit.

Arithmetic order follows scikit-learn's, operation for operation, so the scores are not just within 1e-9 of
the reference but bit-identical to it, and ties between top-k candidates break the same way:

- scikit-learn's fitted matrix keeps each row's entries in the order terms were first seen in the corpus
  (``CountVectorizer._sort_features`` renames the columns alphabetically but does not re-sort the rows). Our
  term ids *are* first-seen order, and a CSC block lists each row's entries by ascending term id, so row
  norms and dot products accumulate in the same order as ``inplace_csr_row_normalize_l2`` and the sparse
  product ``X @ q.T``.
- The query vector is built like ``TfidfVectorizer.transform``'s, with its norm summed in alphabetical term
  order (its row is sorted by the alphabetical vocabulary index).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank.retrieval import TFIDF_PARAMS
from ceb.bank.retrieval import top_k as _top_k
from ceb.errors import BankError

try:  # scipy's compiled sparse kernels (private module, stable for years); numpy does the same, slower
    from scipy.sparse._sparsetools import csc_matvec as _csc_matvec
except ImportError:  # pragma: no cover
    _csc_matvec = None

__all__ = ["IncrementalTfidf"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CountArray = npt.NDArray[np.float32]

_FOLD_FRACTION = 8
"""The tail is folded into the main block once its entries exceed ``1 / _FOLD_FRACTION`` of the main's."""
_FOLD_MIN_NNZ = 1 << 14
"""...and exceed this many entries, so that a small bank does not fold on every update."""
_PRUNE_MIN_DEAD = 1 << 12
"""Terms no kept key holds (after evictions) are dropped from the vocabulary once there are more of them than
this and than live terms. Pruning keeps the order of the live terms, so it changes no score; it depends only on
the vocabulary and the document frequencies, so a restored kernel prunes when the original would have."""
_SEED_POSTINGS = 32
""":meth:`IncrementalTfidf.top_k` scores exactly the keys of its most selective terms until it has this many..."""
_SEED_MAX = 128
"""...and at most this many, for a first ``k``-th best score per class."""
_PROBE = 32
"""...then scores exactly this many keys per class with the best upper bounds, to raise that ``k``-th best."""
_PRUNE_MIN_KEYS = 1 << 16
""":meth:`IncrementalTfidf.top_k` scores every key of a smaller bank (a few ms), where pruning would cost more."""
_BOUND_LOOSEN_MAX = 1.25
"""The bounds of :meth:`IncrementalTfidf.top_k` are recomputed from all counts once appends loosened them by this."""
_CHUNK_NNZ = 1 << 22
"""Entries per step of the passes over a block (norms, folds, evictions): bounds their temporaries (~100 MB)."""


@dataclass(frozen=True, slots=True)
class _Block:
    """Raw term counts of the keys ``[start, start + n_rows)`` as a CSC matrix over the terms ``[0, n_cols)``.

    Eight bytes per stored entry (an int32 row and a float32 count, exact for counts below 2**24): the weights
    are never stored, they are computed from the counts, the idf and the row norms where a query reads them.

    Attributes:
        start: Index of the block's first key in the bank.
        n_rows: Keys in the block.
        indptr: Column pointers, shape ``(n_cols + 1,)``: the entries of term ``j`` are ``indptr[j]:indptr[j+1]``.
        rows: Row (key) of each entry, relative to ``start``, ascending within a column, int32, shape ``(nnz,)``.
        counts: Raw count of the term in the key, shape ``(nnz,)``.
        col_len: Entries per column, ``diff(indptr)``, shape ``(n_cols,)``.
    """

    start: int
    n_rows: int
    indptr: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int32]
    counts: CountArray
    col_len: npt.NDArray[np.int64]

    @classmethod
    def build(
        cls, start: int, n_rows: int, indptr: npt.NDArray[np.int64], rows: npt.NDArray[Any], counts: npt.NDArray[Any]
    ) -> _Block:
        """Store the CSC triple compactly and derive the column lengths."""
        if n_rows >= np.iinfo(np.int32).max:
            raise BankError(f"IncrementalTfidf: a block of {n_rows} keys does not fit int32 row numbers")
        if counts.size and float(counts.max()) >= 2.0**24:
            raise BankError("IncrementalTfidf: a key repeats a term 2**24 times or more (float32 counts)")
        if len(counts) >= np.iinfo(np.int32).max:
            raise BankError(f"IncrementalTfidf: a block of {len(counts)} entries does not fit int32 offsets")
        return cls(
            start,
            n_rows,
            indptr.astype(np.int64, copy=False),
            rows.astype(np.int32, copy=False),
            counts.astype(np.float32, copy=False),
            np.diff(indptr),
        )

    @property
    def n_cols(self) -> int:
        """Terms the block has columns for (terms first seen later have no entries here)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        """Bytes of its arrays."""
        return self.indptr.nbytes + self.rows.nbytes + self.counts.nbytes + self.col_len.nbytes


def _col_chunks(indptr: npt.NDArray[np.int64], target: int = _CHUNK_NNZ) -> list[tuple[int, int]]:
    """Column ranges ``[a, b)`` of about ``target`` entries each (a longer single column is one range)."""
    n_cols = len(indptr) - 1
    if n_cols == 0:
        return []
    nnz = int(indptr[-1])
    cuts = np.searchsorted(indptr, np.arange(target, nnz, target, dtype=np.int64), side="right") - 1
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, n_cols), [n_cols]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]


def _add_column(
    out: npt.NDArray[Any], rows: npt.NDArray[np.int32], values: npt.NDArray[Any], coef: npt.NDArray[Any]
) -> None:
    """``out[rows] += values * coef[0]`` in place, entry by entry, for one column's postings (rows unique).

    ``out``, ``values`` and ``coef`` share a dtype (float64 for exact scores, float32 for bounds).

    scipy's own sparse kernel (``scipy.sparse._sparsetools.csc_matvec`` on a one-column view) does it
    without the copies numpy's fancy indexing makes: 1.5 ns per entry against 12 ns.
    """
    if _csc_matvec is None:
        out[rows] += values * coef[0]
        return
    _csc_matvec(len(out), 1, np.array([0, len(rows)], dtype=np.int32), rows, values, coef, out)


def _block_from_coo(
    start: int,
    n_rows: int,
    n_cols: int,
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    counts: npt.NDArray[np.int64],
) -> _Block:
    """Build a block from entries listed row by row (so that a stable sort by term keeps rows ascending)."""
    order = np.argsort(cols, kind="stable")
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n_cols), out=indptr[1:])
    return _Block.build(start, n_rows, indptr, rows[order], counts[order])


def _stack(top: _Block, bottom: _Block, n_cols: int) -> _Block:
    """Stack two adjacent row blocks into one (``bottom``'s keys follow ``top``'s), in one linear pass.

    Within each column ``top``'s entries come first, so rows stay ascending. The pass goes a few million
    entries at a time, so that its temporaries stay small next to the blocks.
    """
    if top.start + top.n_rows != bottom.start:
        raise AssertionError(f"blocks not adjacent: {top.start}+{top.n_rows} != {bottom.start}")
    top_ptr = np.full(n_cols + 1, top.indptr[-1], dtype=np.int64)
    top_ptr[: top.n_cols + 1] = top.indptr
    bottom_ptr = np.full(n_cols + 1, bottom.indptr[-1], dtype=np.int64)
    bottom_ptr[: bottom.n_cols + 1] = bottom.indptr
    indptr = top_ptr + bottom_ptr
    nnz = top.nnz + bottom.nnz
    rows = np.empty(nnz, dtype=np.int32)
    counts = np.empty(nnz, dtype=np.promote_types(top.counts.dtype, bottom.counts.dtype))
    for a, b in _col_chunks(indptr):
        # Destination of an entry: its column's new start plus its offset within its old column (plus, for the
        # bottom block, the length of the top block's part of the column).
        for src, ptr, extra, shift in (
            (top, top_ptr, np.zeros(b - a, dtype=np.int64), 0),
            (bottom, bottom_ptr, np.diff(top_ptr[a : b + 1]), top.n_rows),
        ):
            lo, hi = int(ptr[a]), int(ptr[b])
            if hi == lo:
                continue
            dest = np.arange(lo, hi, dtype=np.int64)
            dest += np.repeat(indptr[a:b] + extra - ptr[a:b], np.diff(ptr[a : b + 1]))
            rows[dest] = src.rows[lo:hi] + shift if shift else src.rows[lo:hi]
            counts[dest] = src.counts[lo:hi]
    return _Block.build(top.start, top.n_rows + bottom.n_rows, indptr, rows, counts)


def _drop_rows(block: _Block, start: int, dropped: npt.NDArray[np.bool_], before: npt.NDArray[np.int64]) -> _Block:
    """The block without the rows marked in ``dropped`` (bank positions), renumbered to start at ``start``.

    Entries keep their column order, and rows stay ascending within a column, so the arithmetic on a kept row
    is the same as before.

    Args:
        block: The block.
        start: Bank position of the block's first kept row after the eviction.
        dropped: Per bank position (before the eviction), whether it is evicted, shape ``(n,)``.
        before: Per bank position, how many positions before it are evicted, shape ``(n,)``.
    """
    kept_len = np.zeros(block.n_cols, dtype=np.int64)
    rows_out: list[npt.NDArray[np.int64]] = []
    counts_out: list[CountArray] = []
    for a, b in _col_chunks(block.indptr):
        lo, hi = int(block.indptr[a]), int(block.indptr[b])
        glob = block.rows[lo:hi].astype(np.int64) + block.start
        keep = ~dropped[glob]
        cols = np.repeat(np.arange(a, b, dtype=np.int64), block.col_len[a:b])[keep]
        kept_len += np.bincount(cols, minlength=block.n_cols)
        kept_glob = glob[keep]
        rows_out.append(kept_glob - before[kept_glob] - start)
        counts_out.append(block.counts[lo:hi][keep])
    indptr = np.zeros(block.n_cols + 1, dtype=np.int64)
    np.cumsum(kept_len, out=indptr[1:])
    end = block.start + block.n_rows
    n_rows = block.n_rows - int(np.count_nonzero(dropped[block.start : end]))
    rows = np.concatenate(rows_out) if rows_out else np.zeros(0, dtype=np.int64)
    counts = np.concatenate(counts_out) if counts_out else np.zeros(0, dtype=block.counts.dtype)
    return _Block.build(start, n_rows, indptr, rows, counts)


def _drop_columns(block: _Block, live: npt.NDArray[np.bool_]) -> _Block:
    """The block without the columns not marked ``live`` (they must hold no entries); live ones keep their order."""
    keep = live[: block.n_cols]
    if block.nnz and int(block.col_len[~keep].sum()):
        raise AssertionError("a dropped column holds entries")
    indptr = np.concatenate([np.zeros(1, dtype=np.int64), block.indptr[1:][keep]])
    return _Block.build(block.start, block.n_rows, indptr, block.rows, block.counts)


def _norms(block: _Block, idf: FloatArray) -> FloatArray:
    """Row norms of a block's tf-idf rows, shape ``(n_rows,)``: ``norm_i = sqrt(sum_j (c_ij * idf_j)**2)``.

    ``np.add.at`` adds its values one by one in input order, and the input is in column order, so each row's
    squares are summed by ascending term id starting from 0.0, as scikit-learn's row normaliser does over its
    rows; the chunks follow one another in that order, so the sum is the same as one pass. A key with no
    terms has no entries, so its zero norm is never divided by.
    """
    sq = np.zeros(block.n_rows, dtype=np.float64)
    for a, b in _col_chunks(block.indptr):
        lo, hi = int(block.indptr[a]), int(block.indptr[b])
        tf = np.repeat(idf[a:b], block.col_len[a:b])
        tf *= block.counts[lo:hi]
        tf *= tf
        np.add.at(sq, block.rows[lo:hi], tf)
    return np.sqrt(sq, out=sq)


def _bounds(block: _Block, norms: FloatArray) -> FloatArray:
    """Per term, ``max_i c_ij / norm_i`` over the block's keys, shape ``(n_cols,)`` (``norms``: the block's).

    Bounds a term's weight in any key of the block: ``w_ij <= idf_j * bound_j`` (:meth:`IncrementalTfidf.top_k`
    prunes with it).
    """
    bound = np.zeros(block.n_cols, dtype=np.float64)
    for a, b in _col_chunks(block.indptr):
        lo, hi = int(block.indptr[a]), int(block.indptr[b])
        if hi == lo:
            continue
        ratio = block.counts[lo:hi] / norms[block.rows[lo:hi]]
        full = np.flatnonzero(block.col_len[a:b])
        bound[a + full] = np.maximum.reduceat(ratio, block.indptr[a + full] - lo)
    return bound


class IncrementalTfidf:
    """Exact incremental TF-IDF cosine retriever: the refit reference's scores, without refitting.

    Implements :class:`~ceb.bank.retrieval.Retriever` with the semantics of scikit-learn's
    ``TfidfVectorizer(**TFIDF_PARAMS)`` fitted on all ``n`` keys: the same analyser (lower-cased word 1-2
    grams of tokens of two or more word characters), raw counts ``c_ij``, smoothed
    ``idf_j = ln((1 + n) / (1 + df_j)) + 1`` for the current ``n``, and L2-normalised rows. A query's terms
    outside the vocabulary are ignored; a query or bank without a usable token scores 0 everywhere.

    Per update the cost is: tokenising the new keys, merging their counts into the tail block, and one
    vectorised pass over all stored counts for the new idf and row norms (and, every few updates, a second
    for the pruning bounds). Per :meth:`similarities`: tokenising the query and reading every posting of its
    terms. Per :meth:`top_k`: the postings of its rarer terms, and lookups of the others for a few keys. Per
    eviction: one pass over the stored counts (dropping the rows), and the reweighting deferred to the next
    update or query, so that an eviction followed by an update costs one reweighting.

    Sources: paper section 3.3 ("a TF-IDF embedding fit to the bank's keys"); scikit-learn
    ``TfidfVectorizer`` / ``TfidfTransformer`` (smooth_idf, norm="l2") documentation.

    Raises:
        BankError: From :meth:`update`, when the keys are not the previous keys with new ones appended.
    """

    def __init__(self) -> None:
        self._analyze: Callable[[str], list[str]] = TfidfVectorizer(**TFIDF_PARAMS).build_analyzer()
        self._reset()

    def _reset(self) -> None:
        self._n = 0
        self._last_key: str | None = None
        self._keys: Sequence[str] = ()
        # Position in ``_keys`` (the last sequence update() took) of each current key; None: the identity.
        self._key_pos: npt.NDArray[np.int64] | None = None
        self._vocab: dict[str, int] = {}
        self._df = np.zeros(0, dtype=np.int64)
        self._idf = np.zeros(0, dtype=np.float64)
        self._main: _Block | None = None
        self._tail: _Block | None = None
        self._norms = np.zeros(0, dtype=np.float64)  # per key: L2 norm of its tf-idf row
        self._bound = np.zeros(0, dtype=np.float64)  # per term: max over keys of count / norm
        self._inv_norms = np.zeros(0, dtype=np.float64)
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
        """The vocabulary in term-id order, shape ``(vocabulary_size,)``.

        What :meth:`restore` needs to reproduce this kernel's scores bit for bit.
        """
        return tuple(self._vocab)

    @property
    def nnz(self) -> int:
        """Stored (key, term) counts: the size of the count matrix, and of each update's reweighting pass."""
        return sum(b.nnz for b in (self._main, self._tail) if b is not None)

    def restore(self, keys: Sequence[str], terms: Sequence[str]) -> None:
        """Start over from ``keys`` with the term ids of ``terms``: the state of the kernel they came from.

        Restoring a bank's kernel with its term list gives scores bit-identical to the original's (a plain
        :meth:`update` on the kept keys agrees with them within 1e-9 once keys were evicted).

        Args:
            keys: The kept keys, in order, shape ``(n,)``.
            terms: The original kernel's :attr:`terms`; terms of ``keys`` missing from it are numbered after it.

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

        Only ``keys[len(previous):]`` are read (plus the last previous key, as a cheap check that the prefix
        is the one seen before). An empty ``keys`` clears the retriever.

        Args:
            keys: All keys in insertion order, shape ``(n,)``.

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
        new_block = self._count(keys, self._n)
        self._n = n
        self._last_key = keys[n - 1]
        self._append(new_block)
        self._reweigh(new_block)

    def _reweigh(self, new: _Block | None = None) -> None:
        """Every idf moves with n, so every row norm is refreshed (one pass over all counts); bounds follow.

        The per-term bounds of :meth:`top_k` (``max_i c_ij / norm_i``) need a second pass over all counts, which
        an append (``new``: the appended rows) mostly avoids: no idf fell by more than the factor ``r`` (the
        smallest new-over-old idf ratio), so no old key's norm did either, and the old bounds divided by ``r``
        still hold for the old keys; the new keys' bounds come from their own entries. Once the bounds are
        loose by more than :data:`_BOUND_LOOSEN_MAX` in all, or after an eviction, the full pass resets them.
        """
        old_idf, old_bound = self._idf, self._bound
        df = self._df.astype(np.float64)
        df += 1.0
        self._idf = np.log(float(self._n + 1) / df) + 1.0
        self._norms = np.zeros(self._n, dtype=np.float64)
        for b in self._blocks():
            self._norms[b.start : b.start + b.n_rows] = _norms(b, self._idf)
        self._inv_norms = np.divide(1.0, self._norms, out=np.zeros_like(self._norms), where=self._norms > 0)
        m = len(old_idf)
        loosen, r = np.inf, 1.0
        if new is not None and self._bounds_valid and m == len(old_bound):
            held = self._df[:m] > 0
            r = min(1.0, float(np.min(self._idf[:m][held] / old_idf[held]))) if held.any() else 1.0
            loosen = self._loosened / r
        bound = np.zeros(len(self._vocab), dtype=np.float64)
        if new is not None and loosen <= _BOUND_LOOSEN_MAX:
            bound[:m] = old_bound / r
            mine = _bounds(new, self._norms[new.start : new.start + new.n_rows])
            np.maximum(bound[: new.n_cols], mine, out=bound[: new.n_cols])
            self._loosened = loosen
        else:
            for b in self._blocks():
                mine = _bounds(b, self._norms[b.start : b.start + b.n_rows])
                np.maximum(bound[: b.n_cols], mine, out=bound[: b.n_cols])
            self._loosened = 1.0
        self._bound = bound
        self._bounds_valid = True
        self._stale = False

    def _blocks(self) -> list[_Block]:
        return [b for b in (self._main, self._tail) if b is not None and b.nnz]

    def evict(self, positions: Sequence[int] | npt.NDArray[np.int64]) -> None:
        """Drop the keys at ``positions``; the others keep their order (and are renumbered ``0..n-m-1``).

        Their rows leave the count blocks and the document frequency of each of their terms drops by one; no
        key is tokenised again. Afterwards the similarities of the kept keys equal a scikit-learn fit on exactly
        those keys (within 1e-9). The next :meth:`update` takes the kept keys, in order, then any new ones.

        Args:
            positions: Positions (in the current key order) to drop, shape ``(m,)``, in any order; repeats are
                dropped once.

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
        before: npt.NDArray[np.int64] = np.cumsum(dropped, dtype=np.int64) - dropped  # evicted before each
        key_pos = np.arange(self._n, dtype=np.int64) if self._key_pos is None else self._key_pos
        self._key_pos = key_pos[~dropped]
        self._last_key = self._keys[int(self._key_pos[-1])]
        blocks: list[_Block] = []
        start = 0
        for b in (self._main, self._tail):
            if b is None:
                continue
            nb = _drop_rows(b, start, dropped, before)
            self._df[: b.n_cols] -= b.col_len - nb.col_len
            start += nb.n_rows
            blocks.append(nb)
        self._n -= int(pos.size)
        self._main = blocks[0] if blocks else None
        self._tail = blocks[1] if len(blocks) > 1 else None
        if self._main is not None and self._main.n_rows == 0:
            self._main, self._tail = self._tail, None
        if self._tail is not None and self._tail.n_rows == 0:
            self._tail = None
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
        self._bounds_valid = False
        self._main = _drop_columns(self._main, live) if self._main is not None else None
        self._tail = _drop_columns(self._tail, live) if self._tail is not None else None

    def _count(self, keys: Sequence[str], start: int) -> _Block:
        """Tokenise ``keys[start:]``, grow the vocabulary and df, and return their counts as a block."""
        # Tokenise everything before touching the vocabulary: a key the analyser rejects leaves no trace.
        counted = [Counter(self._analyze(key)) for key in keys[start:]]
        vocab = self._vocab
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
        return _block_from_coo(
            start,
            len(keys) - start,
            n_cols,
            np.asarray(rows, dtype=np.int64),
            col_arr,
            np.asarray(counts, dtype=np.int64),
        )

    def _append(self, new: _Block) -> None:
        """Merge new rows into the tail; fold the tail into the main block once it is large enough."""
        n_cols = len(self._vocab)
        tail = new if self._tail is None else _stack(self._tail, new, n_cols)
        main_nnz = self._main.nnz if self._main is not None else 0
        if tail.nnz > max(_FOLD_MIN_NNZ, main_nnz // _FOLD_FRACTION) or self._main is None:
            self._main = tail if self._main is None else _stack(self._main, tail, n_cols)
            self._tail = None
        else:
            self._tail = tail

    def _query(self, query: str) -> tuple[IntArray, FloatArray]:
        """The query's in-vocabulary term ids, ascending, and its L2-normalised tf-idf weights, shape ``(m,)`` each.

        Built like ``TfidfVectorizer.transform``'s row: the norm is summed in alphabetical term order.
        """
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

    def _postings(self, block: _Block, j: int) -> tuple[npt.NDArray[np.int32], FloatArray]:
        """Rows (relative to the block) of term ``j``'s entries in ``block`` and their weights ``w_ij``."""
        lo, hi = int(block.indptr[j]), int(block.indptr[j + 1])
        rows = block.rows[lo:hi]
        # (c * idf) / norm, the operations of scikit-learn's weighting and row normalisation, in its order.
        w = block.counts[lo:hi] * self._idf[j]
        w /= self._norms[block.start : block.start + block.n_rows][rows]
        return rows, w

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of ``query`` to every key, in insertion order.

        ``sim_i = sum_j w_ij * q_j`` over the query's in-vocabulary terms ``j``, with
        ``w_ij = (c_ij * idf_j) / norm_i`` and ``q_j = (c_j * idf_j) / ||c * idf||_2``; accumulated per key in
        ascending term id, like the reference's sparse product. Reads every posting of the query's terms; the
        bank's retrieval uses :meth:`top_k`, which reads far fewer.

        Args:
            query: A composite key (:func:`~ceb.bank.record.composite_key`).

        Returns:
            Similarities in [0, 1], shape ``(n,)``; zeros when no query term is in the vocabulary.
        """
        ids, q = self._query(query)
        out = np.zeros(self._n, dtype=np.float64)
        for block in self._blocks():
            part = out[block.start : block.start + block.n_rows]
            for t, j in enumerate(ids.tolist()):
                if j >= block.n_cols:
                    break
                rows, w = self._postings(block, j)
                _add_column(part, rows, w, q[t : t + 1])  # part[rows] += w * q_j, the product's order
        return out

    def _exact(self, ids: IntArray, q: FloatArray, docs: IntArray) -> FloatArray:
        """:meth:`similarities` of the keys ``docs`` only (ascending positions, unique), bit-identical to it.

        Each key's contributions are added in ascending term id starting from 0.0, as there.
        """
        out = np.zeros(docs.size, dtype=np.float64)
        if not docs.size:
            return out
        for block in self._blocks():
            a, b = np.searchsorted(docs, (block.start, block.start + block.n_rows))
            if a == b:
                continue
            rel = (docs[a:b] - block.start).astype(np.int32)
            part = out[a:b]
            norms = self._norms[docs[a:b]]
            indptr = block.indptr
            for j, qj in zip(ids.tolist(), q.tolist(), strict=True):
                if j >= block.n_cols:
                    break
                lo, hi = int(indptr[j]), int(indptr[j + 1])
                if lo == hi:
                    continue
                rows = block.rows[lo:hi]
                at = rows.searchsorted(rel)
                np.minimum(at, hi - lo - 1, out=at)
                hit = np.flatnonzero(rows[at] == rel)
                if not hit.size:
                    continue
                w = block.counts[lo:hi][at[hit]] * self._idf[j]
                w /= norms[hit]
                w *= qj
                part[hit] += w
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
        """Per class, the ``k`` keys most similar to ``query`` and their similarities, without scoring every key.

        The same keys, in the same order, with the same (bit-identical) similarities as
        :func:`~ceb.bank.retrieval.top_k` over :meth:`similarities` (most similar first, ties to the earlier
        key). Exact pruning in the manner of MaxScore (Turtle and Flood, 1995): a term's weight in any key is at
        most ``idf_j * max_i c_ij / norm_i`` (kept per term by each update), so the query's terms whose bounds
        add up to less than a class's ``k``-th best score found so far cannot lift a key that has none of the
        other terms into that class's top ``k``. Only the postings of the other (rarer) terms are read in full;
        the very common terms (``task``, ``state``, ...) are looked up for the few keys still in the running.

        Steps: exact scores of the keys holding the most selective terms give a first ``k``-th best per class
        (``theta``); the terms are split into weak ones (bounds summing below the smallest ``theta``) and strong
        ones; the strong terms' postings give every key a partial score (a lower bound) and, with the weak
        bounds added, an upper bound; the keys with the best upper bounds are scored exactly, raising
        ``theta``; the keys whose upper bound reaches ``theta`` are scored exactly and ranked.

        Args:
            query: A composite key.
            classes: Per class, its keys' positions, ascending, shape ``(m_c,)``; the classes are disjoint
                (fewer than 128).
            k: Keys wanted per class, ``>= 0``.

        Returns:
            Per class, ``(positions, similarities)``, shape ``(min(k, m_c),)`` each.
        """
        ids, q = self._query(query)
        if k == 0 or not ids.size:
            return [(c[:k].astype(np.int64), np.zeros(min(k, c.size))) for c in classes]
        if self._n < _PRUNE_MIN_KEYS:
            sims = self.similarities(query)
            picks = [_top_k(sims, c, k) for c in classes]
            return [(p, sims[p]) for p in picks]
        label = self._labels_of(classes)
        n_cls = len(classes)
        ranked = [c for c in range(n_cls) if classes[c].size > k]  # the others: all their keys are the answer
        # The bounds are summed in float32 (relative rounding ~1e-7 per term): every comparison with a bound
        # gives way by this much, so rounding can only keep a key in the running, never drop it.
        slack = 1e-4
        bound = q * self._idf[ids] * self._bound[ids]
        by_bound = np.argsort(-bound, kind="stable")
        blocks = self._blocks()
        # Seed: the keys holding the most selective terms.
        parts: list[IntArray] = []
        got = np.zeros(n_cls + 1, dtype=np.int64)
        total = 0
        for t in by_bound.tolist():
            j = int(ids[t])
            for b in blocks:
                if j < b.n_cols and b.col_len[j]:
                    rows = b.rows[int(b.indptr[j]) : int(b.indptr[j + 1])].astype(np.int64)
                    rows += b.start
                    parts.append(rows)
                    got += np.bincount(label[rows] + 1, minlength=n_cls + 1)
                    total += rows.size
            if total >= _SEED_MAX or (total >= _SEED_POSTINGS and all(got[c + 1] >= k for c in ranked)):
                break
        seed = np.unique(np.concatenate(parts))[:_SEED_MAX] if parts else np.zeros(0, dtype=np.int64)
        theta = np.full(n_cls, np.inf)
        theta[ranked] = 0.0
        scored = [(seed, self._exact(ids, q, seed))]
        self._raise_theta(theta, ranked, *scored[0], label, k)
        floor = float(theta.min()) - slack
        # Weak terms: the least bounded ones, while their bounds add up to less than the floor.
        by_weak = by_bound[::-1]
        rest = np.cumsum(bound[by_weak])
        n_weak = int(np.searchsorted(rest, floor, side="left")) if floor > 0.0 else 0
        weak_sum = float(rest[n_weak - 1]) if n_weak else 0.0
        strong = np.sort(by_weak[n_weak:])
        # Partial scores over the strong terms, a bound only (the exact scores are recomputed below in
        # scikit-learn's order): unnormalised sums, divided by the norms once.
        acc32 = np.zeros(self._n, dtype=np.float32)
        coef = (self._idf[ids] * q).astype(np.float32)
        for block in blocks:
            part = acc32[block.start : block.start + block.n_rows]
            for t in strong.tolist():
                j = int(ids[t])
                if j < block.n_cols:
                    lo, hi = int(block.indptr[j]), int(block.indptr[j + 1])
                    _add_column(part, block.rows[lo:hi], block.counts[lo:hi], coef[t : t + 1])
        acc = acc32.astype(np.float64)
        acc *= self._inv_norms
        # A key whose partial score plus every weak bound misses the floor is out of every class's running.
        alive = np.flatnonzero(acc >= floor - weak_sum - slack) if n_weak else np.flatnonzero(acc)
        alive_label = label[alive]
        picked: list[IntArray] = []
        for c in range(n_cls):
            if c not in ranked:
                picked.append(classes[c].astype(np.int64))
                continue
            mine = alive[alive_label == c]
            lower = acc[mine]  # partial sums: lower bounds of the similarities (up to rounding)
            if mine.size > k:
                top = np.argpartition(-lower, min(_PROBE, mine.size) - 1)[:_PROBE]
                theta[c] = max(theta[c], float(np.sort(lower[top])[-k]) - slack)
                best = np.sort(mine[top])
                scored.append((best, self._exact(ids, q, best)))
                self._raise_theta(theta, [c], *scored[-1], label, k)
            elif not n_weak:
                picked.append(classes[c].astype(np.int64))  # fewer than k keys score above 0: all are in
                continue
            picked.append(mine[lower + weak_sum >= theta[c] - slack])
        known = np.concatenate([d for d, _ in scored])
        fresh = np.setdiff1d(np.concatenate(picked), known)
        docs, first = np.unique(np.concatenate([known, fresh]), return_index=True)
        sims = np.concatenate([s for _, s in scored] + [self._exact(ids, q, fresh)])[first]
        out = []
        doc_label = label[docs]
        for c in range(n_cls):
            inside = doc_label == c
            mine, s = docs[inside], sims[inside]
            pick = np.lexsort((mine, -s))[:k]
            out.append((mine[pick], s[pick]))
        return out

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
