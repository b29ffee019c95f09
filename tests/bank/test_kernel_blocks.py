"""The kernel's block layout: sealed blocks, both layouts (columns and rows), wide counts, failed updates.

A block holds at most ``_BLOCK_ROWS`` keys (a row fits a uint16); these tests shrink it so that a few hundred keys
spread over many sealed blocks, and check that nothing a caller sees depends on where the block edges fall: the
similarities stay bit-identical to scikit-learn's, the pruned top-k equals the full ranking, and evictions across
sealed blocks agree with a refit on the kept keys.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank import TFIDF_PARAMS, IncrementalTfidf, TfidfReference
from ceb.bank import kernel as kernel_module
from ceb.bank.retrieval import top_k

WORDS = [f"w{i}" for i in range(120)]


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Blocks of 37 keys, folds from the first update on, and the large-bank paths (no stored weights, pruning)."""
    monkeypatch.setattr(kernel_module, "_BLOCK_ROWS", 37)
    monkeypatch.setattr(kernel_module, "_FOLD_MIN_NNZ", 0)
    monkeypatch.setattr(kernel_module, "_COUNT_KEYS", 16)
    monkeypatch.setattr(kernel_module, "_STORED_NNZ", -1)
    monkeypatch.setattr(kernel_module, "_PRUNE_MIN_KEYS", 0)
    yield


def random_keys(rng: np.random.Generator, n: int) -> list[str]:
    p = 1.0 / np.arange(1, len(WORDS) + 1)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 25)), p=p / p.sum())) for _ in range(n)]


def test_sealed_blocks_give_the_reference_scores_and_the_full_ranking(small_blocks: None) -> None:
    rng = np.random.default_rng(11)
    keys: list[str] = []
    ker, ref = IncrementalTfidf(), TfidfReference()
    for size in (5, 40, 1, 90, 33, 120):  # updates that cross block edges, and one larger than a block
        keys += random_keys(rng, size)
        ker.update(tuple(keys))
    ref.update(keys)
    assert len(ker._sealed) >= 6  # white-box: many sealed blocks, each within the cap
    assert all(b.n_rows <= 37 for b in ker._blocks())
    assert sum(b.n_rows for b in ker._blocks()) == len(keys)
    labels = (rng.random(len(keys)) < 0.4).astype(np.int8)
    classes = [np.flatnonzero(labels == c).astype(np.int64) for c in (1, 0)]
    for q in [*keys[::29], *random_keys(rng, 5), "nothing known"]:
        sims = ker.similarities(q)
        assert np.array_equal(sims, ref.similarities(q))
        for k in (1, 2, 5):
            for (pos, s), members in zip(ker.top_k(q, classes, k), classes, strict=True):
                want = top_k(sims, members, k)
                assert pos.tolist() == want.tolist() and np.array_equal(s, sims[want]), (q, k)


def test_evictions_across_sealed_blocks_match_the_refit(small_blocks: None) -> None:
    rng = np.random.default_rng(5)
    kept: list[str] = []
    ker = IncrementalTfidf()
    for i in range(12):
        kept += random_keys(rng, 30)
        ker.update(tuple(kept))
        if i % 2:
            pos = sorted(set(rng.integers(0, len(kept), 25).tolist()))
            ker.evict(pos)
            kept = [k for j, k in enumerate(kept) if j not in set(pos)]
    assert len(ker._sealed) >= 3
    vec = TfidfVectorizer(**TFIDF_PARAMS)  # type: ignore[arg-type]
    matrix = vec.fit_transform(kept)
    labels = (np.arange(len(kept)) % 3 == 0).astype(np.int8)
    classes = [np.flatnonzero(labels == c).astype(np.int64) for c in (1, 0)]
    for q in [*kept[::17], *random_keys(rng, 3)]:
        want = np.asarray((matrix @ vec.transform([q]).T).toarray()).ravel()
        sims = ker.similarities(q)
        assert np.max(np.abs(want - sims)) <= 1e-9
        for (pos, s), members in zip(ker.top_k(q, classes, 2), classes, strict=True):
            assert pos.tolist() == top_k(sims, members, 2).tolist() and np.array_equal(s, sims[pos])


def test_stored_and_computed_weights_agree_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    keys = random_keys(rng, 200)
    stored = IncrementalTfidf()
    stored.update(tuple(keys))
    assert stored._weights is not None  # a small bank stores its weights
    monkeypatch.setattr(kernel_module, "_STORED_NNZ", -1)
    monkeypatch.setattr(kernel_module, "_PRUNE_MIN_KEYS", 0)
    computed = IncrementalTfidf()
    computed.update(tuple(keys))
    assert computed._weights is None
    for q in keys[:10]:
        assert np.array_equal(stored.similarities(q), computed.similarities(q))


def test_counts_past_one_byte_are_kept_exactly() -> None:
    keys = ["ls " * 300 + "cat", "ls cat " * 70_000, "grep"]
    ker, ref = IncrementalTfidf(), TfidfReference()
    ker.update(keys[:1])
    ker.update(keys)  # the tail (uint8 counts would wrap) stacks onto a block with wider counts
    ref.update(keys)
    assert {b.counts.dtype for b in ker._blocks()} <= {np.dtype(np.uint16), np.dtype(np.uint32)}
    for q in ("ls ls cat", "cat", "grep ls"):
        assert np.array_equal(ker.similarities(q), ref.similarities(q))


def test_an_update_the_analyser_rejects_leaves_the_kernel_as_it_was(small_blocks: None) -> None:
    ker = IncrementalTfidf()
    ker.update(("ls la", "cat foo"))
    before = (ker.terms, ker._df.copy(), ker.similarities("ls foo"))
    bad = ("ls la", "cat foo", *[f"new{i} word{i}" for i in range(40)], None)  # the last piece fails
    with pytest.raises(AttributeError):
        ker.update(bad)  # type: ignore[arg-type]
    assert ker.terms == before[0] and np.array_equal(ker._df, before[1]) and len(ker) == 2
    assert np.array_equal(ker.similarities("ls foo"), before[2])
    ker.update(("ls la", "cat foo", "grep bar"))
    assert len(ker) == 3 and ker.similarities("grep")[2] > 0
