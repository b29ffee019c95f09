"""A bank kept on disk as an append-only log with periodic compaction.

A :class:`BankJournal` saves each update as one JSON line with the trajectory's records. The bank's state is a
function of its sequence of updates (:mod:`ceb.bank.policy`), so replaying the lines rebuilds it exactly::

    {"format": "ceb-bank-journal/1", "settings": {...BankConfig...}}     header
    {"snapshot": {...Bank.to_document()...}, "mark": ...}                optional: the state at compaction
    {"add": [{...BankRecord...}, ...], "mark": ...}                      one per update since, in order

``mark`` is an optional caller's tag for the update (the gate's trajectory sequence number, :mod:`ceb.gate`),
durable with its records; a snapshot carries the latest on. Compaction rewrites the file as the header and one
snapshot (atomically: sibling file, fsync, rename, fsync of the folder) once the records logged since the last
snapshot exceed ``compact_ratio`` times the records held (and ``compact_min``), or once ``snapshot_every`` updates
holding at least half as many records as the bank were logged: the file stays proportional to the bank, at an
amortised constant cost per record. Reopening replays the updates after the last snapshot: a bounded bank's one at
a time (eviction depends on their order, so ``snapshot_every`` bounds them), an append-only bank's as one update.

A kill leaves at most the last line torn, which :meth:`BankJournal.open` cuts off (that update is lost); a kill
during compaction leaves the old file (and a ``.tmp`` sibling, deleted on open) or the new one. Reopening gives a
bank bit-identical to the one that wrote the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import orjson
from pydantic import ValidationError

from ceb.bank.bank import Bank
from ceb.bank.record import BankRecord
from ceb.bank.retrieval import Retriever
from ceb.config import BankConfig
from ceb.errors import BankError

__all__ = ["JOURNAL_FORMAT", "BankJournal"]

JOURNAL_FORMAT = "ceb-bank-journal/1"
"""The header's ``format``."""

_SNAPSHOT_GROWTH = 0.5
"""Records logged since the last snapshot, as a share of the bank's records, before ``snapshot_every`` applies."""


class BankJournal:
    """A :class:`~ceb.bank.bank.Bank` whose every update is appended to a log file (see the module docstring).

    Made by :meth:`open`; updated through :meth:`add_trajectory` only (``bank.add_trajectory`` would leave the file
    behind). A context manager: leaving it closes the file. ``handle`` is the file open for appending;
    ``logged`` and ``updates`` count the records and updates since the last snapshot; the rest is :meth:`open`'s.
    """

    def __init__(
        self,
        path: Path,
        bank: Bank,
        handle: IO[bytes],
        logged: int,
        *,
        compact_ratio: float,
        compact_min: int,
        fsync: bool,
        mark: Any = None,
        snapshot_every: int | None = None,
        updates: int = 0,
    ) -> None:
        self.path = path
        self.mark = mark
        self.bank = bank
        self._file = handle
        self._logged = logged
        self.compact_ratio = compact_ratio
        self.compact_min = compact_min
        self.fsync = fsync
        self.snapshot_every = snapshot_every
        self.updates = updates
        self.snapshots = 0  # compactions this object wrote (tests and benchmarks count them)

    @classmethod
    def open(
        cls,
        path: str | Path,
        retriever: Retriever | None = None,
        settings: BankConfig | None = None,
        *,
        compact_ratio: float = 2.0,
        compact_min: int = 1024,
        fsync: bool = False,
        snapshot_every: int | None = None,
    ) -> BankJournal:
        """Open the journal at ``path`` (created with its folder if missing), rebuilding its bank, or start one empty.

        ``retriever`` is empty (``None``: the exact TF-IDF kernel). A new journal records ``settings``; an existing
        one must match them (``None``: take the recorded ones). It compacts once
        ``logged > compact_ratio * max(len(bank), compact_min)`` (``compact_min`` in records), and once
        ``snapshot_every`` updates were logged since the last snapshot (``None``: by records only), so reopening
        replays at most that many. ``fsync``: after every appended line (durable against power loss, not a crash only).

        Raises:
            ValueError: ``compact_ratio <= 0`` or ``snapshot_every < 1``.
            BankError: The file is not a journal, a line before the last is malformed (names the line), or the
                recorded settings differ from ``settings``.
        """
        if compact_ratio <= 0:
            raise ValueError(f"compact_ratio must be > 0, got {compact_ratio}")
        if snapshot_every is not None and snapshot_every < 1:
            raise ValueError(f"snapshot_every must be >= 1, got {snapshot_every}")
        path = Path(path)
        _tmp(path).unlink(missing_ok=True)  # a compaction killed before its rename: the file itself is whole
        opts: dict[str, Any] = {
            "compact_ratio": compact_ratio,
            "compact_min": compact_min,
            "fsync": fsync,
            "snapshot_every": snapshot_every,
        }
        if not path.exists() or path.stat().st_size == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
            settings = settings if settings is not None else BankConfig()
            _write_new(path, settings, None)
            return cls(path, Bank(retriever, settings), path.open("ab"), 0, **opts)
        lines = path.read_bytes().split(b"\n")
        # A last piece without its newline is an unfinished update, even if it parses (counting it would pad a NUL).
        if lines.pop() and not lines:
            raise BankError(f"{path}: line 1: the header has no newline: not a complete {JOURNAL_FORMAT} file")
        docs: list[dict[str, Any]] = []
        good_bytes = 0
        for i, line in enumerate(lines):
            try:
                doc = orjson.loads(line)
                if not isinstance(doc, dict):
                    raise orjson.JSONDecodeError("not an object", line.decode(errors="replace"), 0)
            except orjson.JSONDecodeError as exc:
                if i == len(lines) - 1 and i > 0:
                    break  # a torn last line: the update it held never finished
                raise BankError(f"{path}: line {i + 1}: {exc}") from exc
            docs.append(doc)
            good_bytes += len(line) + 1
        header = docs[0]
        if header.get("format") != JOURNAL_FORMAT:
            raise BankError(f"{path}: not a {JOURNAL_FORMAT} file")
        try:
            recorded = BankConfig.model_validate(header.get("settings", {}))
        except ValidationError as exc:
            raise BankError(f"{path}: bad settings in the header: {exc}") from exc
        if settings is not None and settings != recorded:
            raise BankError(f"{path}: the journal's bank settings {recorded!r} differ from {settings!r}")
        start = max((i for i, d in enumerate(docs) if "snapshot" in d), default=0)
        if start:
            # An unbounded bank's snapshot is its records alone: its settings are the header's.
            where = f"{path}: line {start + 1}"
            bank = Bank.from_document(docs[start]["snapshot"], retriever, where=where, settings=recorded)
        else:
            bank = Bank(retriever, recorded)
        mark = docs[start].get("mark")
        logged = 0
        tail: list[BankRecord] = []
        for i in range(start + 1, len(docs)):
            records = _records(docs[i], f"{path}: line {i + 1}")
            if recorded.bounded:
                bank.add_trajectory(records)  # eviction and compression depend on each update's order
            else:
                tail.extend(records)
            logged += len(records)
            mark = docs[i].get("mark", mark)
        if tail:
            # An append-only bank scores as a refit however its records came in: the tail as one update.
            bank.add_trajectory(tail)
        if good_bytes != path.stat().st_size:
            os.truncate(path, good_bytes)
        updates = len(docs) - start - 1
        journal = cls(path, bank, path.open("ab"), logged, **opts, mark=mark, updates=updates)
        if journal._snapshot_due():
            journal.compact()  # a journal written without snapshots (or with a larger period): one now
        return journal

    def add_trajectory(self, records: Iterable[BankRecord], *, mark: Any = None) -> None:
        """Update the bank (:meth:`~ceb.bank.bank.Bank.add_trajectory`) and append the update as one line.

        ``mark`` is a JSON value stored with the update (see the module docstring); ``None`` stores none.

        Raises:
            BankError: From the bank; the file is then left unchanged.
        """
        new = list(records)
        self.bank.add_trajectory(new)
        line: dict[str, Any] = {"add": [asdict(r) for r in new]}
        if mark is not None:
            line["mark"] = mark
            self.mark = mark
        self._file.write(orjson.dumps(line) + b"\n")
        self._file.flush()
        if self.fsync:
            os.fsync(self._file.fileno())
        self._logged += len(new)
        self.updates += 1
        if self._logged > self.compact_ratio * max(len(self.bank), self.compact_min) or self._snapshot_due():
            self.compact()

    def _snapshot_due(self) -> bool:
        """``snapshot_every`` updates since the last snapshot, logging half the bank's records (geometric spacing)."""
        return (
            self.snapshot_every is not None
            and self.updates >= self.snapshot_every
            and self._logged >= _SNAPSHOT_GROWTH * len(self.bank)
        )

    def compact(self) -> None:
        """Rewrite the file as its header and one snapshot of the bank (atomic replace)."""
        self._file.close()
        _write_new(self.path, self.bank.settings, self.bank.to_document(), self.mark)
        self._file = self.path.open("ab")
        self._logged = 0
        self.updates = 0
        self.snapshots += 1

    def close(self) -> None:
        """Close the file (every update is already written)."""
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _write_new(path: Path, settings: BankConfig, snapshot: dict[str, Any] | None, mark: Any = None) -> None:
    """Write a journal holding the header and, if given, one snapshot (with ``mark``): a sibling file, fsync, rename."""
    tmp = _tmp(path)
    with tmp.open("wb") as f:
        f.write(orjson.dumps({"format": JOURNAL_FORMAT, "settings": settings.model_dump(mode="json")}) + b"\n")
        if snapshot is not None:
            doc: dict[str, Any] = {"snapshot": snapshot} if mark is None else {"snapshot": snapshot, "mark": mark}
            f.write(orjson.dumps(doc) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (against power loss; a crash of the process alone keeps it anyway)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _records(doc: dict[str, Any], where: str) -> list[BankRecord]:
    raw = doc.get("add")
    if not isinstance(raw, list):
        raise BankError(f"{where}: neither a snapshot nor an update")
    try:
        return [BankRecord(**r) for r in raw]
    except TypeError as exc:
        raise BankError(f"{where}: {exc}") from exc
