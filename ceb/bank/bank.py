"""The Critic Experience Bank ``B = B+ ∪ B-`` of one stream (paper section 3.2, Algorithm 1).

By default the bank is the paper's: append-only. :class:`~ceb.config.BankConfig` bounds it (eviction policies
and near-duplicate compression, defined in :mod:`ceb.bank.policy`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import orjson
from pydantic import ValidationError

from ceb.bank.kernel import IncrementalTfidf
from ceb.bank.policy import judge, reservoir_draw, usefulness_order
from ceb.bank.record import BankRecord
from ceb.bank.retrieval import Retriever, top_k
from ceb.config import BankConfig
from ceb.errors import BankError, ConfigError

__all__ = ["BANK_FORMAT", "BOUNDED_BANK_FORMAT", "Bank", "Hit", "Retrieval"]

BANK_FORMAT = "ceb-bank/1"
"""Layout of an append-only bank's file: ``{"format", "records"}`` (the records are the whole state)."""
BOUNDED_BANK_FORMAT = "ceb-bank/2"
"""Layout of a bounded bank's file (:class:`~ceb.config.BankConfig` not the default): the records plus the
settings and the policy state (counts, counters, reservoir slots, the kernel's term order), which the records
alone no longer determine."""

_NO_INDEX = np.empty(0, dtype=np.int64)
_DEFAULT_SETTINGS = BankConfig()


def _classes(labels: npt.NDArray[np.int8]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Record indices of ``B+`` and ``B-``, ascending."""
    return np.flatnonzero(labels == 1).astype(np.int64), np.flatnonzero(labels == 0).astype(np.int64)


def _check(records: Iterable[BankRecord], where: str) -> None:
    """Refuse a pseudo-label not 0 or 1, or a soft vote outside [0, 1] (:class:`~ceb.errors.BankError`)."""
    for r in records:
        if r.pseudo_label not in (0, 1) or not 0.0 <= r.soft_vote <= 1.0:
            raise BankError(
                f"{where}bad record {r.trajectory_id} step {r.step}: pseudo_label={r.pseudo_label!r}, "
                f"soft_vote={r.soft_vote!r}"
            )


class _Keys(Sequence[str]):
    """The records' composite keys, built when read (held as strings they cost about 400 MB at 1M records)."""

    __slots__ = ("_records",)

    def __init__(self, records: Sequence[BankRecord]) -> None:
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [r.key for r in self._records[i]]
        return self._records[i].key


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved record and its similarity to the query: TF-IDF cosine in [0, 1]; dense cosine may be negative.

    ``similarity`` is exact for the retriever (a count does not change it). ``count`` is the records it stands
    for: 1 plus the near-duplicates merged into it (:mod:`ceb.bank.policy`); a critic multiplies its weight by it.
    """

    record: BankRecord
    similarity: float
    count: int = 1


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

    Records enter a trajectory at a time (:meth:`add_trajectory`), after all its steps were scored (Algorithm 1).
    With bounding ``settings`` each update also compresses and evicts (:mod:`ceb.bank.policy`), with no refit.

    Args:
        retriever: Similarity backend; the exact incremental TF-IDF kernel when ``None``. Without an ``evict``
            method it is cleared and given the kept keys again after an eviction; with a
            ``top_k(query, classes, k)`` method it ranks each class itself (not under the usefulness policy).
        settings: Eviction and compression; ``None``: the default, the paper's append-only bank. Under the
            ``usefulness`` policy its ``usefulness_k`` must be set (:meth:`~ceb.config.BankConfig.for_k`).

    Raises:
        ConfigError: The ``usefulness`` policy with ``usefulness_k`` not set.
    """

    def __init__(self, retriever: Retriever | None = None, settings: BankConfig | None = None) -> None:
        self._retriever: Retriever = retriever if retriever is not None else IncrementalTfidf()
        self._settings = settings if settings is not None else _DEFAULT_SETTINGS
        if self._settings.policy == "usefulness" and self._settings.usefulness_k is None:
            raise ConfigError("bank.usefulness_k is not derived yet: build the bank from BankConfig.for_k(k)")
        self._records: list[BankRecord] = []
        self._labels = np.empty(0, dtype=np.int8)
        # Record indices of B+ and B- (ascending), kept between updates so a retrieval does not rescan labels.
        self._classes: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] = (_NO_INDEX, _NO_INDEX)
        # Policy state, per held record: insertion number (ascending), count, agree / disagree counters.
        self._ids = np.empty(0, dtype=np.int64)
        self._next_id = 0
        self._counts = np.empty(0, dtype=np.int64)
        self._agreed = np.empty(0, dtype=np.int64)
        self._disagreed = np.empty(0, dtype=np.int64)
        # Reservoir: records of each class seen (not merged), and the ids in each class's slots.
        self._seen = [0, 0]
        self._slots: tuple[list[int], list[int]] = ([], [])
        # Usefulness: the retrievals served since the last update, by query key (the bank has not changed since).
        self._served: dict[str, tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]] = {}

    def __len__(self) -> int:
        return len(self._records)

    @property
    def settings(self) -> BankConfig:
        """The eviction and compression settings."""
        return self._settings

    @property
    def records(self) -> Sequence[BankRecord]:
        """All held records in insertion order."""
        return tuple(self._records)

    @property
    def counts(self) -> npt.NDArray[np.int64]:
        """Records each held record stands for (1 plus its merged near-duplicates), shape ``(len(self),)``."""
        if not self._settings.bounded:
            return np.ones(len(self._records), dtype=np.int64)
        return self._counts.copy()

    @property
    def usefulness(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(agreed, disagreed)`` per held record, shape ``(len(self),)`` each; zeros but for ``usefulness``."""
        if not self._settings.bounded:
            zeros = np.zeros(len(self._records), dtype=np.int64)
            return zeros, zeros.copy()
        return self._agreed.copy(), self._disagreed.copy()

    @property
    def n_positive(self) -> int:
        """``|B+|``: held records with pseudo-label 1."""
        return int(self._labels.sum())

    def copy(self) -> Bank:
        """An independent bank in the same state; the records, immutable, are shared."""
        return copy.deepcopy(self, {id(r): r for r in self._records})

    def add_trajectory(self, records: Iterable[BankRecord]) -> None:
        """Add a trajectory's records (step order) and refresh the retriever; a bounded bank compresses and evicts.

        Raises:
            BankError: A record's pseudo-label is not 0 or 1, or its soft vote is outside [0, 1].
        """
        new = list(records)
        _check(new, "")
        if self._settings.bounded:
            self._add_bounded(new)
            return
        if not new:
            return
        self._records.extend(new)
        self._labels = np.concatenate([self._labels, np.fromiter((r.pseudo_label for r in new), dtype=np.int8)])
        self._classes = _classes(self._labels)
        self._retriever.update(_Keys(self._records))

    def settle_scores(self, records: Sequence[BankRecord]) -> None:
        """Give the held records of the last trajectory added their critic scores, from ``records`` (step order).

        For a bank grown before the scores were known (the bank ahead of :mod:`ceb.pipeline.lane`): each of
        ``records`` replaces the held record of its trajectory and step, which it equals but for ``score`` and
        ``agreement``; so the keys, labels and retriever stay as they are. A record a bounded bank does not hold
        (evicted, merged) is skipped.

        Raises:
            BankError: A record differs from the held one in more than its score and agreement, or an append-only
                bank does not hold one of them.
        """
        by_step = {(r.trajectory_id, r.step): r for r in records}
        settled = 0
        for i in range(max(0, len(self._records) - len(by_step)), len(self._records)):
            held = self._records[i]
            new = by_step.get((held.trajectory_id, held.step))
            if new is None:
                continue
            if replace(new, score=held.score, agreement=held.agreement) != held:
                raise BankError(f"settle_scores: the record of {held.trajectory_id} step {held.step} changed")
            self._records[i] = new
            settled += 1
        if settled < len(by_step) and not self._settings.bounded:
            raise BankError(f"settle_scores: {len(by_step) - settled} of {len(by_step)} records are not in the bank")

    def retrieve(self, query_key: str, k: int) -> Retrieval:
        """Top-``k`` productive and top-``k`` unproductive records by the retriever's similarity to ``query_key``.

        ``query_key`` is the step's :func:`~ceb.bank.record.composite_key`; ``k`` counts per class (paper: k=2). A
        side is empty when its bucket is; the records are those :func:`~ceb.bank.retrieval.class_split_topk`
        picks, in its order.

        Raises:
            ValueError: ``k < 0``, or the retriever returned the wrong number of similarities.
        """
        if not self._records or k == 0:
            return Retrieval()
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        pruned = getattr(self._retriever, "top_k", None)
        if pruned is not None and self._settings.policy != "usefulness":
            # The kernel's exact pruned top-k: the same records and similarities without scoring every record.
            (pos, pos_sims), (neg, neg_sims) = pruned(query_key, self._classes, k)
        else:
            sims = self._retriever.similarities(query_key)
            if sims.shape != self._labels.shape:
                raise ValueError(f"sims {sims.shape} and labels {self._labels.shape} differ in shape")
            pos, neg = (top_k(sims, idx, k) for idx in self._classes)
            pos_sims, neg_sims = sims[pos], sims[neg]
            if self._settings.policy == "usefulness":
                self._served[query_key] = self._judged(sims)
        bounded = self._settings.bounded

        def hits(idx: npt.NDArray[np.int64], sims: npt.NDArray[np.float64]) -> tuple[Hit, ...]:
            pairs = zip(idx.tolist(), sims.tolist(), strict=True)
            return tuple(Hit(self._records[i], s, int(self._counts[i]) if bounded else 1) for i, s in pairs)

        return Retrieval(positives=hits(pos, pos_sims), negatives=hits(neg, neg_sims))

    # --- bounded banks (ceb.bank.policy) --------------------------------------------------------------------

    def _judged(self, sims: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """The usefulness retrieval for a query with similarities ``sims``: its hits' positions and similarities."""
        k = self._settings.usefulness_k
        assert k is not None  # refused at construction
        hits = np.concatenate([top_k(sims, idx, k) for idx in self._classes])
        return hits, sims[hits]

    def _add_bounded(self, new: list[BankRecord]) -> None:
        """:meth:`add_trajectory` with compression and eviction, in the order of :mod:`ceb.bank.policy`."""
        cfg = self._settings
        served, self._served = self._served, {}
        if not new:
            return
        if cfg.policy == "usefulness" and self._records:
            for r in new:
                got = served.get(r.key)
                hits, sims = got if got is not None else self._judged(self._retriever.similarities(r.key))
                agreed, disagreed = judge(self._labels[hits], sims, r.pseudo_label)
                self._agreed[hits[agreed]] += 1
                self._disagreed[hits[disagreed]] += 1
        n_old, m = len(self._records), len(new)
        self._records.extend(new)
        self._labels = np.concatenate([self._labels, np.fromiter((r.pseudo_label for r in new), dtype=np.int8)])
        self._ids = np.concatenate([self._ids, np.arange(self._next_id, self._next_id + m, dtype=np.int64)])
        self._next_id += m
        self._counts = np.concatenate([self._counts, np.ones(m, dtype=np.int64)])
        self._agreed = np.concatenate([self._agreed, np.zeros(m, dtype=np.int64)])
        self._disagreed = np.concatenate([self._disagreed, np.zeros(m, dtype=np.int64)])
        n = n_old + m
        held = np.ones(n, dtype=np.bool_)
        synced = False
        if cfg.compress_threshold is not None:
            self._retriever.update(_Keys(self._records))
            synced = True
            for p in range(n_old, n):
                sims = self._retriever.similarities(self._records[p].key)
                candidates = np.flatnonzero(held[:p] & (self._labels[:p] == self._labels[p]))
                if candidates.size:
                    best = candidates[int(np.argmax(sims[candidates]))]  # argmax: the first of tied maxima
                    if sims[best] >= cfg.compress_threshold:
                        self._counts[best] += self._counts[p]
                        held[p] = False
        self._evict_by_policy(held, n_old)
        self._apply(held, n_old, synced)

    def _evict_by_policy(self, held: npt.NDArray[np.bool_], n_old: int) -> None:
        """Clear ``held`` for the records the policy evicts (see :mod:`ceb.bank.policy`)."""
        cfg = self._settings
        alive = np.flatnonzero(held)
        if cfg.policy == "window":
            assert cfg.max_records is not None
            held[alive[: max(0, alive.size - cfg.max_records)]] = False
        elif cfg.policy == "usefulness":
            assert cfg.max_records is not None
            excess = alive.size - cfg.max_records
            if excess > 0:
                usefulness = self._agreed[alive] - self._disagreed[alive]
                order = usefulness_order(usefulness, alive >= n_old, self._ids[alive])
                held[alive[order[:excess]]] = False
        elif cfg.policy == "reservoir":
            assert cfg.max_per_class is not None
            cap = cfg.max_per_class
            evicted_ids: list[int] = []
            for p in alive[alive >= n_old]:
                label = int(self._labels[p])
                self._seen[label] += 1
                slots = self._slots[label]
                if len(slots) < cap:
                    slots.append(int(self._ids[p]))
                    continue
                j = reservoir_draw(cfg.seed, label, self._seen[label])
                if j < cap:
                    evicted_ids.append(slots[j])
                    slots[j] = int(self._ids[p])
                else:
                    evicted_ids.append(int(self._ids[p]))
            if evicted_ids:
                held[np.searchsorted(self._ids, np.asarray(evicted_ids, dtype=np.int64))] = False

    def _apply(self, held: npt.NDArray[np.bool_], n_old: int, synced: bool) -> None:
        """Drop the records not ``held`` from the bank and the retriever; bring the retriever up to date."""
        gone = np.flatnonzero(~held)
        if gone.size:
            keep = np.flatnonzero(held)
            self._records = [self._records[i] for i in keep]
            self._labels = self._labels[keep]
            self._ids = self._ids[keep]
            self._counts = self._counts[keep]
            self._agreed = self._agreed[keep]
            self._disagreed = self._disagreed[keep]
        self._classes = _classes(self._labels)
        # The retriever holds every row (synced) or the old rows only; it drops what it holds of ``gone``.
        in_retriever = gone if synced else gone[gone < n_old]
        evict = getattr(self._retriever, "evict", None)
        if in_retriever.size:
            if evict is not None:
                evict(in_retriever)
            else:
                self._retriever.update(())  # a retriever that only appends: start it over
        self._retriever.update(_Keys(self._records))

    def to_document(self) -> dict[str, Any]:
        """The bank's whole state as a JSON-ready document (what :meth:`save` writes, :meth:`from_document` reads).

        Append-only: ``{"format": "ceb-bank/1", "records": [...]}``. Bounded (``ceb-bank/2``): also ``settings``,
        per record ``counts``, ``agreed`` and ``disagreed``, the reservoir's ``seen`` and ``slots`` (positions)
        per class (index = pseudo-label), and ``terms``, the TF-IDF kernel's term order (``null`` for others).
        """
        records = [asdict(r) for r in self._records]
        if not self._settings.bounded:
            return {"format": BANK_FORMAT, "records": records}
        terms = getattr(self._retriever, "terms", None)
        return {
            "format": BOUNDED_BANK_FORMAT,
            "settings": self._settings.model_dump(mode="json"),
            "records": records,
            "counts": self._counts.tolist(),
            "agreed": self._agreed.tolist(),
            "disagreed": self._disagreed.tolist(),
            "seen": list(self._seen),
            "slots": [np.searchsorted(self._ids, np.asarray(s, dtype=np.int64)).tolist() for s in self._slots],
            "terms": list(terms) if terms is not None else None,
        }

    @classmethod
    def from_document(
        cls,
        doc: Mapping[str, Any],
        retriever: Retriever | None = None,
        *,
        where: str = "bank",
        settings: BankConfig | None = None,
    ) -> Bank:
        """Rebuild a bank from :meth:`to_document`'s output, bit-identical in retrieval to the saved bank.

        A ``ceb-bank/1`` document's records are added as one update; a ``ceb-bank/2`` one restores the settings,
        the policy state (no eviction is replayed) and the TF-IDF kernel's term order.

        ``retriever`` is empty (``None``: the exact TF-IDF kernel); ``where`` is what errors name (the file);
        ``settings`` are a ``ceb-bank/1`` document's bank's (a ``ceb-bank/2`` one records its own).

        Raises:
            BankError: Unknown format, a malformed record (names it), or inconsistent policy state.
        """
        fmt = doc.get("format")
        if fmt not in (BANK_FORMAT, BOUNDED_BANK_FORMAT):
            raise BankError(f"{where}: not a {BANK_FORMAT} file (nor {BOUNDED_BANK_FORMAT})")
        records = []
        for i, raw in enumerate(doc.get("records", [])):
            try:
                records.append(BankRecord(**raw))
            except TypeError as exc:
                raise BankError(f"{where}: records[{i}]: {exc}") from exc
        if fmt == BANK_FORMAT:
            bank = cls(retriever, settings)
            bank.add_trajectory(records)
            return bank
        try:
            settings = BankConfig.model_validate(doc["settings"])
            n = len(records)
            arrays = [np.asarray(doc[name], dtype=np.int64) for name in ("counts", "agreed", "disagreed")]
            seen = [int(x) for x in doc["seen"]]
            slots = tuple([int(p) for p in s] for s in doc["slots"])
            terms = doc.get("terms")
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            raise BankError(f"{where}: bad {BOUNDED_BANK_FORMAT} state: {exc}") from exc
        if any(a.shape != (n,) for a in arrays) or len(seen) != 2 or len(slots) != 2:
            raise BankError(f"{where}: the policy state does not match the {n} records")
        bank = cls(retriever, settings)
        _check(records, f"{where}: ")
        bank._records = records
        bank._labels = np.fromiter((r.pseudo_label for r in records), dtype=np.int8, count=n)
        bank._classes = _classes(bank._labels)
        bank._ids = np.arange(n, dtype=np.int64)  # only their order matters
        bank._next_id = n
        bank._counts, bank._agreed, bank._disagreed = arrays
        bank._seen = seen
        bank._slots = (slots[0], slots[1])
        restore = getattr(bank._retriever, "restore", None)
        if terms is not None and restore is not None:
            restore(_Keys(bank._records), terms)
        else:
            bank._retriever.update(_Keys(bank._records))
        return bank

    def save(self, path: str | Path) -> None:
        """Write the bank atomically as one JSON document (:meth:`to_document`); per update: :mod:`~ceb.bank.journal`.

        Raises:
            OSError: The file cannot be written (a full disk); the old file is left as it was, and no ``.tmp``.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_bytes(orjson.dumps(self.to_document(), option=orjson.OPT_INDENT_2))
            tmp.replace(path)
        except OSError:  # a full disk, say: leave the old bank and no empty .tmp beside it
            tmp.unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path, retriever: Retriever | None = None) -> Bank:
        """Read a bank written by :meth:`save` (``ceb-bank/1`` or ``ceb-bank/2``; see :meth:`from_document`).

        Raises:
            BankError: The file is not a bank document or a record is malformed (names the file and record).
        """
        path = Path(path)
        try:
            doc = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise BankError(f"{path}: cannot read bank: {exc}") from exc
        if not isinstance(doc, dict):
            raise BankError(f"{path}: not a {BANK_FORMAT} file")
        return cls.from_document(doc, retriever, where=str(path))
