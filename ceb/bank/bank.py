"""The Critic Experience Bank ``B = B+ ∪ B-`` of one stream (paper section 3.2, Algorithm 1)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import orjson

from ceb.bank.kernel import IncrementalTfidf
from ceb.bank.record import BankRecord
from ceb.bank.retrieval import Retriever, top_k
from ceb.errors import BankError

__all__ = ["BANK_FORMAT", "Bank", "Hit", "Retrieval"]

BANK_FORMAT = "ceb-bank/1"

_NO_INDEX = np.empty(0, dtype=np.int64)


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved record and its similarity to the query: TF-IDF cosine in [0, 1]; dense cosine may be negative."""

    record: BankRecord
    similarity: float


@dataclass(frozen=True, slots=True)
class Retrieval:
    """Contrastive precedents ``R+`` and ``R-`` for one query, most similar first (paper section 3.3)."""

    positives: tuple[Hit, ...] = ()
    negatives: tuple[Hit, ...] = ()

    @property
    def hits(self) -> tuple[Hit, ...]:
        """Positives then negatives."""
        return self.positives + self.negatives


class Bank:
    """Hindsight-labelled records of earlier trajectories, split by pseudo-label, with retrieval.

    Records enter a trajectory at a time (:meth:`add_trajectory`), only after all its steps were scored
    (Algorithm 1); the retriever is brought up to date once per such update.

    Args:
        retriever: Similarity backend; the exact incremental TF-IDF kernel when ``None``.
    """

    def __init__(self, retriever: Retriever | None = None) -> None:
        self._retriever: Retriever = retriever if retriever is not None else IncrementalTfidf()
        self._records: list[BankRecord] = []
        self._keys: list[str] = []
        self._labels = np.empty(0, dtype=np.int8)
        # Record indices of B+ and B- (ascending), kept between updates so a retrieval does not rescan labels.
        self._classes: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] = (_NO_INDEX, _NO_INDEX)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> Sequence[BankRecord]:
        """All records in insertion order."""
        return tuple(self._records)

    @property
    def n_positive(self) -> int:
        """``|B+|``."""
        return int(self._labels.sum())

    def add_trajectory(self, records: Iterable[BankRecord]) -> None:
        """Append one finished trajectory's records and refresh the retriever.

        Raises:
            BankError: A record's pseudo-label is not 0 or 1, or its soft vote is outside [0, 1].
        """
        new = list(records)
        for r in new:
            if r.pseudo_label not in (0, 1) or not 0.0 <= r.soft_vote <= 1.0:
                raise BankError(
                    f"bad record {r.trajectory_id} step {r.step}: pseudo_label={r.pseudo_label!r}, "
                    f"soft_vote={r.soft_vote!r}"
                )
        if not new:
            return
        self._records.extend(new)
        # Keys are kept rather than rebuilt from every record on each update (40 ms per update at 100k records).
        self._keys.extend(r.key for r in new)
        self._labels = np.concatenate([self._labels, np.fromiter((r.pseudo_label for r in new), dtype=np.int8)])
        self._classes = (
            np.flatnonzero(self._labels == 1).astype(np.int64),
            np.flatnonzero(self._labels == 0).astype(np.int64),
        )
        self._retriever.update(tuple(self._keys))

    def retrieve(self, query_key: str, k: int) -> Retrieval:
        """Top-``k`` productive and top-``k`` unproductive records by the retriever's similarity to ``query_key``.

        Args:
            query_key: The step's composite key (:func:`~ceb.bank.record.composite_key`).
            k: Records per class (paper: k=2).

        Returns:
            The contrastive precedents; a side is empty when its bucket is. The records are those
            :func:`~ceb.bank.retrieval.class_split_topk` picks, in its order.

        Raises:
            ValueError: ``k < 0``, or the retriever returned the wrong number of similarities.
        """
        if not self._records or k == 0:
            return Retrieval()
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        sims = self._retriever.similarities(query_key)
        if sims.shape != self._labels.shape:
            raise ValueError(f"sims {sims.shape} and labels {self._labels.shape} differ in shape")
        pos, neg = (top_k(sims, idx, k) for idx in self._classes)
        return Retrieval(
            positives=tuple(Hit(self._records[i], float(sims[i])) for i in pos),
            negatives=tuple(Hit(self._records[i], float(sims[i])) for i in neg),
        )

    def save(self, path: str | Path) -> None:
        """Write the bank atomically as one JSON document: ``{"format": "ceb-bank/1", "records": [...]}``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        doc = {"format": BANK_FORMAT, "records": [asdict(r) for r in self._records]}
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path, retriever: Retriever | None = None) -> Bank:
        """Read a bank written by :meth:`save`; the retriever is refit on the loaded keys.

        Raises:
            BankError: The file is not a ``ceb-bank/1`` document or a record is malformed (names the record).
        """
        path = Path(path)
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BankError(f"{path}: cannot read bank: {exc}") from exc
        if not isinstance(doc, dict) or doc.get("format") != BANK_FORMAT:
            raise BankError(f"{path}: not a {BANK_FORMAT} file")
        bank = cls(retriever)
        records = []
        for i, raw in enumerate(doc.get("records", [])):
            try:
                records.append(BankRecord(**raw))
            except TypeError as exc:
                raise BankError(f"{path}: records[{i}]: {exc}") from exc
        bank.add_trajectory(records)
        return bank
