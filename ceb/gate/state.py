"""The gate's state directory: one folder per stream, holding its bank journal and its inbox.

Layout::

    <state_dir>/<stream>/bank.journal   snapshot + one line per update with its seq (:class:`~ceb.bank.BankJournal`)
    <state_dir>/<stream>/inbox.jsonl    every acknowledged trajectory (:mod:`ceb.gate.inbox`)
    <state_dir>/gate.lock               held by the one gate using the directory (:mod:`ceb.dirlock`)

Nothing else in :mod:`ceb.gate` names these files. A stream restarts from its last snapshot, the journal lines
after it and the inbox lines not yet banked (replayed through hindsight). Files change only by appending a line (a
torn last line is cut off) or by an atomic rewrite, so a kill at any point restarts to the last completed write
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
    """A stream's durable state as read back: journal, inbox, ``entries`` in ``seq`` order, ``known`` ids."""

    journal: BankJournal
    inbox: Inbox
    entries: list[Accepted]
    known: Known


@dataclass(frozen=True, slots=True)
class StateDir:
    """Where a gate keeps each stream (``state_dir`` of :class:`~ceb.gate.Gate`); ``fsync`` is ``gate.fsync``."""

    path: Path
    fsync: bool

    JOURNAL = "bank.journal"
    INBOX = "inbox.jsonl"
    LOCK = "gate.lock"
    PROBE = ".write-check"

    def lock(self) -> AbstractContextManager[None]:
        """Hold the directory's lock for a block, creating the directory (:func:`ceb.dirlock.dir_lock`).

        Raises:
            RunError: Another process holds it (names its pid), or the directory cannot be created or written.
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
        """Open (or create) ``stream``'s journal (snapshot every ``snapshot_every`` updates) and inbox.

        Raises:
            OSError: A file cannot be created or read.
            RunError: A line before the last of the inbox or its ids file is damaged (names file and line).
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
