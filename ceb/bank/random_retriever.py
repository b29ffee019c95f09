"""A seeded random retriever: the ``ceb-random-retrieval`` ablation's control for what similarity adds."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from ceb.bank.retrieval import FloatArray

__all__ = ["RandomRetriever"]


class RandomRetriever:
    """Scores every record with a uniform draw seeded by ``(seed, query, bank size)``.

    Class-split top-k then picks ``k`` records of each class uniformly at random (paper, component ablation
    "random retrieval"); a resumed run retrieves what an uninterrupted one did.
    """

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._n = 0

    def update(self, keys: Sequence[str]) -> None:
        """Take the bank's keys (only their count matters)."""
        self._n = len(keys)

    def similarities(self, query: str) -> FloatArray:
        """Uniform [0, 1) scores, shape ``(n,)``, reproducible for the same query and bank size."""
        digest = hashlib.blake2b(f"{self.seed}\x1f{self._n}\x1f{query}".encode(), digest_size=8).digest()
        rng = np.random.default_rng(int.from_bytes(digest, "little"))
        return rng.random(self._n)
