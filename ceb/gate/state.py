"""The gate's state directory: one folder per stream, holding its bank journal and its inbox.

Layout::

    <state_dir>/<stream>/bank.journal      the stream's bank: a snapshot, then one line per update since, with its
                                           ``seq`` (:class:`~ceb.bank.BankJournal`; rewritten as one snapshot every
                                           ``gate.snapshot_every`` updates)
    <state_dir>/<stream>/inbox.jsonl       every acknowledged trajectory, ``fsync``'d before the acknowledgement
                                           (:mod:`ceb.gate.inbox`; its ids file beside it once compacted)

Nothing else in :mod:`ceb.gate` names these files.

Restart. A stream comes back from its last bank snapshot (the bank, bit for bit, and the ``seq`` of the last
update it holds), the journal's updates after it (fewer than ``gate.snapshot_every``), and its inbox: the ids,
``seq`` and fingerprints of every acknowledged trajectory, and the acknowledged ones not yet in the bank, which
are replayed through hindsight. Reading the ids is one pass over short lines; no bank update before the snapshot
is replayed. Every file is changed by appending a line (a torn last line is cut off: that write was never
acknowledged) or by an atomic rewrite (temporary file, ``fsync``, rename), and a journal line holds an update with
its ``seq``, so a kill at any point restarts to the state of the last write that completed
(``tests/gate/test_restart.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ceb.bank import BankJournal, Retriever
from ceb.config import BankConfig
from ceb.gate.inbox import Accepted, Inbox, Known
from ceb.gate.types import STREAM_NAME

__all__ = ["StateDir", "StreamFiles"]


@dataclass(frozen=True, slots=True)
class StreamFiles:
    """A stream's durable state as read back from its folder.

    Attributes:
        journal: The bank journal (its bank holds every update it recorded).
        inbox: The inbox, open for appending.
        entries: The inbox's acknowledged trajectories, in ``seq`` order.
        known: Trajectory id -> (``seq``, fingerprint) of every trajectory the stream accepted.
    """

    journal: BankJournal
    inbox: Inbox
    entries: list[Accepted]
    known: Known


@dataclass(frozen=True, slots=True)
class StateDir:
    """Where a gate keeps each stream (``state_dir`` of :class:`~ceb.gate.Gate`).

    Attributes:
        path: The folder; created with the first stream.
        fsync: ``gate.fsync``: whether every journal and inbox line is ``fsync``'d.
    """

    path: Path
    fsync: bool

    JOURNAL = "bank.journal"
    INBOX = "inbox.jsonl"

    def streams(self) -> list[str]:
        """The streams found on disk (folders with a valid stream name), sorted."""
        if not self.path.exists():
            return []
        return sorted(p.name for p in self.path.iterdir() if p.is_dir() and STREAM_NAME.fullmatch(p.name))

    def open(
        self, stream: str, retriever: Retriever, bank: BankConfig, *, snapshot_every: int | None = None
    ) -> StreamFiles:
        """Open (or create) ``stream``'s journal and inbox and read back what they hold.

        ``snapshot_every``: the journal's snapshot period in updates (``gate.snapshot_every``; ``None``: none).

        Raises:
            OSError: A file cannot be created or read.
            RunError: A line before the last of the inbox or of its ids file is damaged (names file and line).
        """
        folder = self.path / stream
        journal = BankJournal.open(
            folder / self.JOURNAL, retriever, bank, fsync=self.fsync, snapshot_every=snapshot_every
        )
        inbox, entries, known = Inbox.open(folder / self.INBOX, fsync=self.fsync)
        return StreamFiles(journal, inbox, entries, known)
