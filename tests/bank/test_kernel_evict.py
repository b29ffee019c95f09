"""Eviction from the incremental TF-IDF kernel against scikit-learn fitted on exactly the kept keys.

After any sequence of appends and evictions the kernel's similarities must equal
``TfidfVectorizer(**TFIDF_PARAMS).fit(kept_keys)`` cosine within 1e-9 (``n`` = kept keys in the idf, terms only
evicted keys held out of the vocabulary), with no refit from text; a kernel restored from the term list must
reproduce the evolved one bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank import TFIDF_PARAMS, IncrementalTfidf
from ceb.bank import kernel as kernel_module
from ceb.errors import BankError

WORDS = ("ls", "la", "cat", "grep", "foo", "bar", "select", "from", "users", "x", "Ünï", "42")
key_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=7).map(" ".join)
# An operation: ("add", keys) or ("evict", fractions in [0, 1) picking positions of the current keys).
op_st = st.one_of(
    st.tuples(st.just("add"), st.lists(key_st, min_size=1, max_size=5)),
    st.tuples(st.just("evict"), st.lists(st.floats(0, 1, exclude_max=True), min_size=1, max_size=4)),
)
QUERIES = ("ls la", "cat foo bar", "select from users", "grep", "Ünï 42 x", "nothing here")


def sklearn_sims(kept: list[str], query: str) -> np.ndarray:
    """Cosine of ``query`` to each kept key under a scikit-learn fit on the kept keys (zeros if none has a token)."""
    vec = TfidfVectorizer(**TFIDF_PARAMS)  # type: ignore[arg-type]
    try:
        m = vec.fit_transform(kept)
    except ValueError:  # empty vocabulary
        return np.zeros(len(kept))
    return np.asarray((m @ vec.transform([query]).T).toarray()).ravel()


def run(ops: list[tuple[str, list]]) -> tuple[IncrementalTfidf, list[str]]:
    ker = IncrementalTfidf()
    kept: list[str] = []
    for kind, arg in ops:
        if kind == "add":
            kept = kept + list(arg)
            ker.update(tuple(kept))
        elif kept:
            pos = sorted({int(f * len(kept)) for f in arg})
            ker.evict(pos)
            kept = [k for i, k in enumerate(kept) if i not in set(pos)]
            if len(ker) != len(kept):
                raise AssertionError("length")
        for q in QUERIES:
            want, got = sklearn_sims(kept, q), ker.similarities(q)
            assert got.shape == (len(kept),)
            assert np.max(np.abs(want - got), initial=0.0) <= 1e-9, (kind, kept, q)
    return ker, kept


@pytest.mark.slow  # 120 examples, each a scikit-learn refit per operation: a minute and a half on a loaded machine
@settings(max_examples=120, deadline=None)
@given(st.lists(op_st, min_size=1, max_size=12))
def test_random_add_evict_sequences_match_a_scikit_learn_fit_on_the_kept_keys(ops):
    ker, kept = run(ops)
    # A kernel restored from the term list and the kept keys is the evolved one, bit for bit.
    restored = IncrementalTfidf()
    restored.restore(tuple(kept), ker.terms)
    for q in QUERIES:
        assert np.array_equal(restored.similarities(q), ker.similarities(q))


@pytest.mark.slow  # 40 examples, a refit per operation: 45 s on a loaded machine
@settings(max_examples=40, deadline=None)
@given(st.lists(op_st, min_size=4, max_size=16))
def test_pruning_dead_terms_changes_no_score(ops):
    old = kernel_module._PRUNE_MIN_DEAD
    kernel_module._PRUNE_MIN_DEAD = 0  # prune as soon as dead terms outnumber live ones
    try:
        ker, _ = run(ops)  # run() checks every score against the refit
        live = int(np.count_nonzero(ker._df > 0))  # white-box: the dead terms were pruned
        assert ker.vocabulary_size - live <= live
    finally:
        kernel_module._PRUNE_MIN_DEAD = old


def test_eviction_across_folded_blocks_and_the_tail_matches_the_refit():
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(300)]
    ker = IncrementalTfidf()
    kept: list[str] = []
    for i in range(60):
        kept += [" ".join(rng.choice(words, 50)) for _ in range(8)]
        ker.update(tuple(kept))
        if i % 3 == 2:
            pos = sorted(set(rng.integers(0, len(kept), 10).tolist()))
            ker.evict(pos)
            kept = [k for j, k in enumerate(kept) if j not in set(pos)]
    assert ker._main is not None and ker._tail is not None  # white-box: both blocks took evictions
    for q in (" ".join(rng.choice(words, 20)) for _ in range(3)):
        assert np.max(np.abs(sklearn_sims(kept, q) - ker.similarities(q))) <= 1e-9


def test_evict_checks_positions_and_the_next_update_must_start_with_the_kept_keys():
    ker = IncrementalTfidf()
    ker.update(("ls la", "cat foo", "grep bar"))
    with pytest.raises(BankError, match=r"positions must be in \[0, 3\)"):
        ker.evict([3])
    ker.evict([1, 1])
    assert len(ker) == 2
    with pytest.raises(BankError, match="only appends"):
        ker.update(("ls la", "cat foo", "grep bar"))
    ker.evict([1])  # twice without an update in between
    ker.update(("ls la", "select x"))
    assert ker.similarities("grep bar").tolist() == [0.0, 0.0]  # 'grep' and 'bar' left with their key
    ker.evict([0, 1])
    assert len(ker) == 0 and ker.vocabulary_size == 0
