"""Bounding the bank: the eviction policies and near-duplicate compression, defined exactly.

The paper's bank is append-only (a stated limitation). :class:`~ceb.config.BankConfig` picks a policy, which
:meth:`~ceb.bank.bank.Bank.add_trajectory` applies once per update, in this order:

1. **Usefulness counters** (policy ``usefulness``). Each new record is the hindsight outcome of a step whose
   precedents were retrieved from the bank as it is *before* this update. For the record's key (the step's query
   key: both are :func:`~ceb.bank.record.composite_key` of the same clipped fields) the bank takes its class-split
   top-``usefulness_k`` retrieval (:func:`judge`). Against the record's pseudo-label ``y^_t``, a precedent
   **disagreed** when its pseudo-label differs *and* it is more similar to the query than every retrieved
   precedent of class ``y^_t`` (the nearest evidence pointed the wrong way); it **agreed** when its pseudo-label
   equals ``y^_t`` and it is more similar than every retrieved precedent of the other class; others (outranked,
   or tied) are neutral. Usefulness is ``agreed - disagreed``: the up- and down-votes of ExpeL's insight
   importance counters (Zhao et al., "ExpeL: LLM Agents Are Experiential Learners", AAAI 2024), cast by the
   *pseudo-label*, never the held-out label. The retrieval is a function of the records alone, so a resume
   rebuilds the same counters (a live run reuses those it served).
2. **Append** the new records.
3. **Compression** (``compress_threshold`` set). Each new record, in order, is compared (the bank's retriever,
   refreshed with the new keys) with the records before it still held and of its own class: kept records and
   earlier new ones not merged. If the most similar has cosine ``>= compress_threshold`` (ties to the earlier
   record), the new record merges into it: it leaves the bank and adds its ``count`` to that record's, whose text
   and labels stay those of its first occurrence.
4. **Eviction** among the records still held, by policy. ``window``: the oldest records beyond ``max_records``
   go (a merged record keeps its first position). ``reservoir``: per class, Vitter's Algorithm R (Vitter, 1985,
   "Random Sampling with a Reservoir", ACM TOMS 11(1)) with capacity ``max_per_class``: the ``i``-th record of a
   class (counting records not merged) fills a free slot while there is one, else draws ``j`` uniform in
   ``[0, i)`` (:func:`reservoir_draw`) and replaces slot ``j``'s record when ``j < max_per_class``, or is dropped
   itself. ``usefulness``: while more than ``max_records`` are held, the record with the lowest usefulness goes,
   ties to the older; records of this update go only after every older one.
5. The retriever drops the evicted and merged rows (:meth:`~ceb.bank.kernel.IncrementalTfidf.evict`, no refit).

Every decision is a function of the updates, in order, and of the settings. Retrieval still ranks by the exact
cosine; each :class:`~ceb.bank.bank.Hit` carries the merged ``count``, for a critic to multiply its weight by.
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

__all__ = ["judge", "reservoir_draw", "usefulness_order"]


def reservoir_draw(seed: int, label: int, i: int) -> int:
    """The uniform draw ``j in [0, i)`` of Algorithm R for the ``i``-th record of class ``label`` (1-based).

    A 64-bit hash of ``(seed, label, i)`` (:attr:`~ceb.config.BankConfig.seed`, class 0 or 1, the class's records
    so far, this one included), so a restored bank draws what the original would have; modulo bias ``< i / 2**64``.
    """
    digest = hashlib.blake2b(f"{seed}\x1f{label}\x1f{i}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % i


def judge(
    labels: npt.NDArray[np.int8], sims: npt.NDArray[np.float64], outcome: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """``(agreed, disagreed)`` masks of the retrieved precedents against a step's pseudo-label ``outcome`` (module doc).

    ``labels`` (the precedents' pseudo-labels), ``sims`` (their similarity to the step's key) and both masks have
    shape ``(h,)``; at most one mask is set per precedent.
    """
    same = labels == outcome
    best_same = sims[same].max(initial=-np.inf)
    best_other = sims[~same].max(initial=-np.inf)
    return same & (sims > best_other), ~same & (sims > best_same)


def usefulness_order(
    usefulness: npt.NDArray[np.int64], is_new: npt.NDArray[np.bool_], ids: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]:
    """Positions in eviction order: older records first, lowest usefulness first among them, then the oldest.

    Per held record, shape ``(n,)``: ``usefulness`` (``agreed - disagreed``), ``is_new`` (came with this update) and
    ``ids`` (insertion number, ascending with age).
    """
    # lexsort sorts by the last key first.
    order: npt.NDArray[np.int64] = np.lexsort((ids, usefulness, is_new)).astype(np.int64)
    return order
