"""The kernel's pruned top-k (``IncrementalTfidf.top_k``) against the class-split top-k over all similarities.

The pruning must change nothing: the same records, in the same order, with bit-identical similarities, for
every class and ``k``, including ties (repeated keys), classes smaller than ``k``, empty classes, queries with no
known term, and banks whose tail block and evictions are in play.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ceb.bank import Bank, BankRecord, IncrementalTfidf, TfidfReference, composite_key
from ceb.bank import kernel as kernel_module
from ceb.bank.retrieval import top_k

WORDS = ("select", "from", "users", "where", "id", "ls", "la", "cat", "grep", "foo", "bar", "x1", "tmp", "name")
text_st = st.lists(st.sampled_from(WORDS), min_size=0, max_size=6).map(" ".join)
key_st = st.builds(composite_key, text_st, text_st, text_st)


@pytest.fixture(autouse=True, scope="module")
def always_prune() -> Iterator[None]:
    """Prune at any size: the kernel scores every key of a bank under 65k keys, which would test nothing here."""
    old, kernel_module._PRUNE_MIN_KEYS = kernel_module._PRUNE_MIN_KEYS, 0
    yield
    kernel_module._PRUNE_MIN_KEYS = old


def check(ker: IncrementalTfidf, labels: np.ndarray, queries: list[str]) -> None:
    classes = [np.flatnonzero(labels == c).astype(np.int64) for c in (1, 0)]
    for q in queries:
        sims = ker.similarities(q)
        for k in (0, 1, 2, 5):
            got = ker.top_k(q, classes, k)
            for (pos, s), members in zip(got, classes, strict=True):
                want = top_k(sims, members, k)
                assert pos.tolist() == want.tolist(), (q, k)
                assert np.array_equal(s, sims[want]), (q, k)  # bit for bit


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(key_st, min_size=1, max_size=60),
    repeats=st.integers(1, 4),
    label_bits=st.integers(0, 2**60),
    queries=st.lists(key_st, min_size=1, max_size=4),
    evict=st.lists(st.floats(0, 1, exclude_max=True), max_size=5),
)
def test_pruned_top_k_equals_the_full_ranking(keys, repeats, label_bits, queries, evict):
    ker = IncrementalTfidf()
    bank_keys: list[str] = []
    for _ in range(repeats):  # repeated keys tie exactly: the earlier record must win
        bank_keys.extend(keys)
        ker.update(tuple(bank_keys))
    if evict:
        pos = sorted({int(f * len(bank_keys)) for f in evict})
        if len(pos) < len(bank_keys):
            ker.evict(pos)
            bank_keys = [k for i, k in enumerate(bank_keys) if i not in set(pos)]
    labels = np.array([(label_bits >> (i % 60)) & 1 for i in range(len(bank_keys))], dtype=np.int8)
    check(ker, labels, [*queries, bank_keys[0], bank_keys[-1], "nothing known here"])


def test_pruned_top_k_on_a_bank_large_enough_to_prune():
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(400)]
    # Zipf-like term use: a few terms in nearly every key, most in a few.
    p = 1.0 / np.arange(1, len(vocab) + 1)
    p /= p.sum()

    def key() -> str:
        return composite_key(*(" ".join(rng.choice(vocab, size=rng.integers(1, 12), p=p)) for _ in range(3)))

    keys = [key() for _ in range(3000)]
    keys += keys[:500]  # exact repeats
    ker = IncrementalTfidf()
    for end in range(500, len(keys) + 1, 500):  # several updates: a main block and a tail
        ker.update(tuple(keys[:end]))
    labels = (rng.random(len(keys)) < 0.3).astype(np.int8)
    check(ker, labels, [*keys[:20], key(), key(), "task state action"])
    classes = [np.flatnonzero(labels == c).astype(np.int64) for c in (1, 0)]
    # The query's own record is its best match in its class, at similarity 1.
    for i in range(20):
        (pos, s), (neg, t) = ker.top_k(keys[i], classes, 2)
        best = (pos, s) if labels[i] == 1 else (neg, t)
        assert best[0][0] == i and abs(best[1][0] - 1.0) < 1e-12


def test_the_numpy_fallback_gives_the_scipy_kernels_scores(monkeypatch: pytest.MonkeyPatch):
    # scipy's csc_matvec is private; without it the kernel adds with numpy, and nothing may change.
    keys = [composite_key(f"task {i % 7}", f"state {i % 5} ls", f"cat x{i % 11} grep foo") for i in range(300)]
    ker = IncrementalTfidf()
    ker.update(tuple(keys[:200]))
    ker.update(tuple(keys))
    labels = (np.arange(len(keys)) % 3 == 0).astype(np.int8)
    classes = [np.flatnonzero(labels == c).astype(np.int64) for c in (1, 0)]
    queries = [keys[0], keys[123], composite_key("task 3", "state 1", "cat x4")]
    with_scipy = [(ker.similarities(q), ker.top_k(q, classes, 2)) for q in queries]
    monkeypatch.setattr(kernel_module, "_csc_matvec", None)
    monkeypatch.setattr(kernel_module, "_csr_matvec", None)
    for q, (sims, best) in zip(queries, with_scipy, strict=True):
        assert np.allclose(ker.similarities(q), sims, rtol=0, atol=1e-12)
        for (pos, s), (want_pos, want_s) in zip(ker.top_k(q, classes, 2), best, strict=True):
            assert pos.tolist() == want_pos.tolist() and np.allclose(s, want_s, rtol=0, atol=1e-12)


def test_the_bank_retrieves_the_same_records_through_the_pruned_path_as_through_the_reference():
    rng = np.random.default_rng(4)

    def record(i: int) -> BankRecord:
        words = rng.choice(WORDS, size=int(rng.integers(1, 8)))
        return BankRecord(
            task=f"task {i % 5}",
            state=" ".join(words[:3]),
            action=" ".join(words[3:]) or "ls",
            observation="",
            pseudo_label=int(rng.integers(0, 2)),
            soft_vote=0.5,
            score=None,
            agreement=None,
            trajectory_id=f"t{i // 4}",
            step=i % 4,
        )

    records = [record(i) for i in range(160)]
    pruned, reference = Bank(), Bank(TfidfReference())
    for start in range(0, len(records), 4):  # a trajectory at a time
        pruned.add_trajectory(records[start : start + 4])
        reference.add_trajectory(records[start : start + 4])
    for r in records[::7]:
        for k in (1, 2, 5):
            got, want = pruned.retrieve(r.key, k), reference.retrieve(r.key, k)
            assert [h.record for h in got.hits] == [h.record for h in want.hits]
            assert [h.similarity for h in got.hits] == pytest.approx([h.similarity for h in want.hits], abs=1e-12)
