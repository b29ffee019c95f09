"""Exact incremental TF-IDF cosine retrieval for the bank (paper section 3.3).

:class:`IncrementalTfidf` returns, for every query, the same similarity vector as
:class:`~ceb.bank.retrieval.TfidfReference` (scikit-learn's ``TfidfVectorizer`` refit on all keys after every
bank update) without refitting: keys are appended, so only the new keys are tokenised and counted. What every
update must still redo is the weighting, because the smoothed idf of *every* term moves when the number of
keys ``n`` moves; that is one vectorised pass over the stored counts.

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
per appended entry).

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

import numpy as np
import numpy.typing as npt
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank.retrieval import TFIDF_PARAMS
from ceb.errors import BankError

__all__ = ["IncrementalTfidf"]

FloatArray = npt.NDArray[np.float64]
IdxArray = npt.NDArray[np.int32] | npt.NDArray[np.int64]

_FOLD_FRACTION = 8
"""The tail is folded into the main block once its entries exceed ``1 / _FOLD_FRACTION`` of the main's."""
_FOLD_MIN_NNZ = 1 << 14
"""...and exceed this many entries, so that a small bank does not fold on every update."""
_PRUNE_MIN_DEAD = 1 << 12
"""Terms no kept key holds (after evictions) are dropped from the vocabulary once there are more of them than
this and than live terms. Pruning keeps the order of the live terms, so it changes no score; it depends only on
the vocabulary and the document frequencies, so a restored kernel prunes when the original would have."""


@dataclass(frozen=True, slots=True)
class _Block:
    """Raw term counts of the keys ``[start, start + n_rows)`` as a CSC matrix over the terms ``[0, n_cols)``.

    Attributes:
        start: Index of the block's first key in the bank.
        n_rows: Keys in the block.
        indptr: Column pointers, shape ``(n_cols + 1,)``: the entries of term ``j`` are ``indptr[j]:indptr[j+1]``.
        rows: Row (key) of each entry, relative to ``start``, ascending within a column, shape ``(nnz,)``.
        counts: Raw count of the term in the key, as float64, shape ``(nnz,)``.
        col_len: Entries per column, ``diff(indptr)``, shape ``(n_cols,)`` (spreads the idf over the entries).
        sp_rows: ``rows`` as scipy's index dtype (int32 while it fits), so that wrapping the weights in a
            ``csc_matrix`` on every update copies nothing.
        sp_indptr: ``indptr`` likewise.
    """

    start: int
    n_rows: int
    indptr: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64]
    counts: FloatArray
    col_len: npt.NDArray[np.int64]
    sp_rows: IdxArray
    sp_indptr: IdxArray

    @classmethod
    def build(
        cls, start: int, n_rows: int, indptr: npt.NDArray[np.int64], rows: npt.NDArray[np.int64], counts: FloatArray
    ) -> _Block:
        """Derive the cached arrays from the CSC triple."""
        sp_rows: IdxArray = rows
        sp_indptr: IdxArray = indptr
        if max(len(rows), n_rows, len(indptr)) < np.iinfo(np.int32).max:
            sp_rows, sp_indptr = rows.astype(np.int32), indptr.astype(np.int32)
        return cls(start, n_rows, indptr, rows, counts, np.diff(indptr), sp_rows, sp_indptr)

    @property
    def n_cols(self) -> int:
        """Terms the block has columns for (terms first seen later have no entries here)."""
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        """Stored entries."""
        return len(self.rows)


def _block_from_coo(
    start: int,
    n_rows: int,
    n_cols: int,
    rows: npt.NDArray[np.int64],
    cols: npt.NDArray[np.int64],
    counts: FloatArray,
) -> _Block:
    """Build a block from entries listed row by row (so that a stable sort by term keeps rows ascending)."""
    order = np.argsort(cols, kind="stable")
    indptr = np.zeros(n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=n_cols), out=indptr[1:])
    return _Block.build(start, n_rows, indptr, rows[order], counts[order])


def _stack(top: _Block, bottom: _Block, n_cols: int) -> _Block:
    """Stack two adjacent row blocks into one (``bottom``'s keys follow ``top``'s), in one linear pass.

    Within each column ``top``'s entries come first, so rows stay ascending.
    """
    if top.start + top.n_rows != bottom.start:
        raise AssertionError(f"blocks not adjacent: {top.start}+{top.n_rows} != {bottom.start}")
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
    rows = np.empty(nnz, dtype=np.int64)
    rows[top_pos] = top.rows
    rows[bottom_pos] = bottom.rows + top.n_rows
    counts = np.empty(nnz, dtype=np.float64)
    counts[top_pos] = top.counts
    counts[bottom_pos] = bottom.counts
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
    glob = block.rows + block.start
    keep = ~dropped[glob]
    cols = np.repeat(np.arange(block.n_cols, dtype=np.int64), block.col_len)[keep]
    indptr = np.zeros(block.n_cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(cols, minlength=block.n_cols), out=indptr[1:])
    kept_glob = glob[keep]
    rows = kept_glob - before[kept_glob] - start
    end = block.start + block.n_rows
    n_rows = block.n_rows - int(np.count_nonzero(dropped[block.start : end]))
    return _Block.build(start, n_rows, indptr, rows, block.counts[keep])


def _drop_columns(block: _Block, live: npt.NDArray[np.bool_]) -> _Block:
    """The block without the columns not marked ``live`` (they must hold no entries); live ones keep their order."""
    keep = live[: block.n_cols]
    if block.nnz and int(block.col_len[~keep].sum()):
        raise AssertionError("a dropped column holds entries")
    indptr = np.concatenate([np.zeros(1, dtype=np.int64), block.indptr[1:][keep]])
    return _Block.build(block.start, block.n_rows, indptr, block.rows, block.counts)


def _weigh(block: _Block, idf: FloatArray) -> sparse.csc_matrix:
    """L2-normalised tf-idf weights of a block, as a CSC matrix of shape ``(n_rows, n_cols)``.

    ``w_ij = (c_ij * idf_j) / sqrt(sum_j' (c_ij' * idf_j')**2)``. ``np.bincount`` adds its weights one by one
    in input order, and the input is in column order, so each row's squares are summed by ascending term id
    starting from 0.0, as scikit-learn's row normaliser does over its rows. A key with no terms has no entries,
    so its zero norm is never divided by.
    """
    tf = np.repeat(idf[: block.n_cols], block.col_len)
    tf *= block.counts
    norms = np.sqrt(np.bincount(block.rows, weights=tf * tf, minlength=block.n_rows))
    tf /= np.take(norms, block.rows)
    return sparse.csc_matrix((tf, block.sp_rows, block.sp_indptr), shape=(block.n_rows, block.n_cols), copy=False)


class IncrementalTfidf:
    """Exact incremental TF-IDF cosine retriever: the refit reference's scores, without refitting.

    Implements :class:`~ceb.bank.retrieval.Retriever` with the semantics of scikit-learn's
    ``TfidfVectorizer(**TFIDF_PARAMS)`` fitted on all ``n`` keys: the same analyser (lower-cased word 1-2
    grams of tokens of two or more word characters), raw counts ``c_ij``, smoothed
    ``idf_j = ln((1 + n) / (1 + df_j)) + 1`` for the current ``n``, and L2-normalised rows. A query's terms
    outside the vocabulary are ignored; a query or bank without a usable token scores 0 everywhere.

    Per update the cost is: tokenising the new keys, merging their counts into the tail block, and one
    vectorised pass over all stored counts for the new idf and row norms. Per query: tokenising the query
    and reading the postings of its terms (a CSC column slice and a sparse matrix-vector product). Per
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
        self._weights: list[tuple[_Block, sparse.csc_matrix]] = []
        self._stale = False

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
        self._reweigh()

    def _reweigh(self) -> None:
        """Every idf moves with n, so every weight and row norm is refreshed (one pass over all counts)."""
        df = self._df.astype(np.float64)
        df += 1.0
        self._idf = np.log(float(self._n + 1) / df) + 1.0
        self._weights = [(b, _weigh(b, self._idf)) for b in (self._main, self._tail) if b is not None and b.nnz]
        self._stale = False

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
        n_cols = len(self._vocab)
        blocks: list[_Block] = []
        start = 0
        for b in (self._main, self._tail):
            if b is None:
                continue
            gone = dropped[b.rows + b.start]
            gone_cols = np.repeat(np.arange(b.n_cols, dtype=np.int64), b.col_len)[gone]
            self._df -= np.bincount(gone_cols, minlength=n_cols)
            nb = _drop_rows(b, start, dropped, before)
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
            np.asarray(counts, dtype=np.float64),
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

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of ``query`` to every key, in insertion order.

        ``sim_i = sum_j w_ij * q_j`` over the query's in-vocabulary terms ``j``, with
        ``q_j = (c_j * idf_j) / ||c * idf||_2``; accumulated per key in ascending term id, like the
        reference's sparse product.

        Args:
            query: A composite key (:func:`~ceb.bank.record.composite_key`).

        Returns:
            Similarities in [0, 1], shape ``(n,)``; zeros when no query term is in the vocabulary.
        """
        if self._stale:
            self._reweigh()
        out = np.zeros(self._n, dtype=np.float64)
        vocab, df = self._vocab, self._df
        # A term only evicted keys held is out of the vocabulary of a fit on the kept keys.
        found = {t: c for t, c in Counter(self._analyze(query)).items() if t in vocab and df[vocab[t]] > 0}
        if not found:
            return out
        terms = sorted(found)  # alphabetical: the order of the reference's query row
        ids = np.fromiter((vocab[t] for t in terms), dtype=np.int64, count=len(terms))
        tf = np.fromiter((found[t] for t in terms), dtype=np.float64, count=len(terms))
        tf *= self._idf[ids]
        norm = np.sqrt(np.cumsum(tf * tf)[-1])  # cumsum adds strictly left to right
        q = tf / norm
        order = np.argsort(ids)
        ids, q = ids[order], q[order]
        for block, weights in self._weights:
            m = int(np.searchsorted(ids, block.n_cols))
            if m:
                out[block.start : block.start + block.n_rows] = weights[:, ids[:m]] @ q[:m]
        return out
