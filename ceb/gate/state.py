"""The gate's state directory: one folder per stream, holding its bank journal and its inbox.

Layout::

    <state_dir>/<stream>/bank.journal      the stream's bank: a snapshot, then one line per update since, with its
                                           ``seq`` (:class:`~ceb.bank.BankJournal`; rewritten as one snapshot after
                                           ``gate.snapshot_every`` updates holding half the bank's records)
    <state_dir>/<stream>/inbox.jsonl       every acknowledged trajectory, ``fsync``'d before the acknowledgement
                                           (:mod:`ceb.gate.inbox`; its ids file beside it once compacted)
    <state_dir>/gate.lock                  held by the one gate using the directory (:mod:`ceb.dirlock`); it holds
                                           that process's id

Nothing else in :mod:`ceb.gate` names these files.

Restart. A stream comes back from its last bank snapshot (the bank, bit for bit, and the ``seq`` of the last
update it holds), the journal's updates after it (an append-only bank's in one update; a bounded bank's, fewer
than ``gate.snapshot_every``, one at a time), and its inbox: the ids,
``seq`` and fingerprints of every acknowledged trajectory, and the acknowledged ones not yet in the bank, which
are replayed through hindsight. Reading the ids is one pass over short lines; no bank update before the snapshot
is replayed. Every file is changed by appending a line (a torn last line is cut off: that write was never
acknowledged) or by an atomic rewrite (temporary file, ``fsync``, rename), and a journal line holds an update with
its ``seq``, so a kill at any point restarts to the state of the last write that completed
(``tests/gate/test_restart.py``).
"""

from __future__ import annotations

import os
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from ceb.bank import BankJournal, Retriever
from ceb.config import BankConfig
from ceb.dirlock import dir_lock
from ceb.errors import RunError
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
    LOCK = "gate.lock"
    PROBE = ".write-check"

    def lock(self) -> AbstractContextManager[None]:
        """Hold the directory's lock for a block, creating the directory (:func:`ceb.dirlock.dir_lock`).

        Two gates on one directory would give two trajectories one ``seq`` and count each other's lines wrong.

        Raises:
            RunError: Another process holds it (the message names the directory and its pid), or the directory
                cannot be created or written.
        """
        return dir_lock(self.path, self.LOCK, what="a gate state directory")

    def check_writable(self) -> None:
        """Create, write and remove a small file in the directory: what accepting a trajectory needs.

        Raises:
            OSError: It cannot (read-only, permissions, a full disk, the directory gone).
        """
        probe = self.path / self.PROBE
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"ceb\n")
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)

    def problem(self) -> str | None:
        """Why the directory cannot be written now (:meth:`check_writable`), or ``None`` when it can."""
        try:
            self.check_writable()
        except OSError as exc:
            return f"cannot write the state directory {self.path}: {exc.strerror or exc}"
        return None

    def check_usable(self) -> None:
        """:meth:`check_writable` at start, as one error.

        Raises:
            RunError: The directory cannot be written (names it and the reason).
        """
        try:
            self.check_writable()
        except OSError as exc:
            raise RunError(f"cannot use {self.path} as a gate state directory: {exc.strerror or exc}") from None

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
        try:
            inbox, entries, known = Inbox.open(folder / self.INBOX, fsync=self.fsync)
        except BaseException:
            journal.close()
            raise
        return StreamFiles(journal, inbox, entries, known)
