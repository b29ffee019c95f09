"""The gate's durable log of accepted trajectories: one per stream, append-only, fsync'd before acknowledging.

Each line holds the blinded trajectory, its ``seq`` and its step scores; the bank journal
(:class:`~ceb.bank.journal.BankJournal`) marks each update with the same ``seq``, so after a crash the lines after
the journal's mark are replayed in order. ``<state_dir>/<stream>/inbox.jsonl``::

    {"seq": 7, "trajectory": {...SCHEMA.md object, blinded...}, "scores": [0.8, null, ...]}

A torn last line was never acknowledged and is cut off by :meth:`Inbox.open`. :meth:`Inbox.compact` rewrites the
file atomically without applied lines, first appending their ids to ``inbox.ids.jsonl``
(``{"seq": 7, "id": "run-42", "fingerprint": "<32 hex digits>"}``, ``fsync``'d) so a retry stays recognised.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson

from ceb.data.reader import parse_trajectory, trajectory_object
from ceb.data.trajectory import Trajectory
from ceb.errors import CEBError, RunError

__all__ = ["Accepted", "Inbox", "Known", "fingerprint"]

Known = dict[str, tuple[int, bytes]]
"""Trajectory id -> (``seq``, :func:`fingerprint`) of every trajectory a stream acknowledged."""

_T = TypeVar("_T")


def fingerprint(trajectory: Trajectory) -> bytes:
    """A 16-byte BLAKE2b digest of a blinded trajectory's SCHEMA.md object (without ``source``)."""
    return hashlib.blake2b(orjson.dumps(trajectory_object(trajectory)), digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Accepted:
    """A trajectory the gate has accepted (and, with a state directory, written down).

    Attributes:
        seq: Position in its stream's accepted order, from 1.
        trajectory: Blinded (no labels, rewards or meta).
        scores: ``z^_t`` the gate gave each step (``None`` where none); shape ``(T,)``.
    """

    seq: int
    trajectory: Trajectory
    scores: tuple[float | None, ...]
    fingerprint: bytes


class Inbox:
    """Append-only, fsync'd log of one stream's accepted trajectories (module docstring); made by :meth:`open`.

    ``held`` is ``(seq, id, fingerprint)`` of each line, ``ids_seq`` the ids file's highest ``seq`` (0 if empty).
    """

    def __init__(
        self, path: Path, handle: IO[bytes], *, fsync: bool, held: list[tuple[int, str, bytes]], ids_seq: int
    ) -> None:
        self.path = path
        self.ids_path = _ids_path(path)
        self._file = handle
        self.fsync = fsync
        self._held = held
        self._ids_seq = ids_seq
        self._size = os.fstat(handle.fileno()).st_size

    @property
    def lines(self) -> int:
        """Lines in the file."""
        return len(self._held)

    @classmethod
    def open(cls, path: Path, *, fsync: bool = True) -> tuple[Inbox, list[Accepted], Known]:
        """Open (or create) the inbox at ``path`` and read what it holds.

        Returns:
            The inbox, its entries in ``seq`` order, and every acknowledged trajectory's id, ``seq`` and fingerprint.

        Raises:
            RunError: A line before the last of the inbox or its ids file is damaged (names file and line).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        entries = _read_lines(path, _entry)
        known: Known = {}
        ids_seq = 0
        for seq, tid, fp in _read_lines(_ids_path(path), _id_line):
            known[tid] = (seq, fp)
            ids_seq = max(ids_seq, seq)
        known |= {e.trajectory.id: (e.seq, e.fingerprint) for e in entries}
        held = [(e.seq, e.trajectory.id, e.fingerprint) for e in entries]
        return cls(path, path.open("ab", buffering=0), fsync=fsync, held=held, ids_seq=ids_seq), entries, known

    def append(self, entry: Accepted) -> None:
        """Write ``entry`` as one line and (with ``fsync``) make it durable before returning.

        Raises:
            OSError: The line cannot be written or made durable (``ENOSPC``); what was written of it is cut off again.
        """
        fd = self._file.fileno()
        if os.fstat(fd).st_size != self._size:  # a part left by an earlier failure whose cut failed too
            os.ftruncate(fd, self._size)
        line = _line(entry)
        _append(fd, line, self._size, fsync=self.fsync)
        self._size += len(line)
        self._held.append((entry.seq, entry.trajectory.id, entry.fingerprint))

    def compact(self, pending: Sequence[Accepted]) -> None:
        """Rewrite the file holding ``pending`` only, atomically; the dropped ids go to the ids file first, fsynced.

        Raises:
            OSError: A file cannot be written; the inbox and the ids file are left whole and usable.
        """
        keep = {e.seq for e in pending}
        gone = [h for h in self._held if h[0] not in keep and h[0] > self._ids_seq]
        if gone:
            fd = os.open(self.ids_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                lines = (orjson.dumps({"seq": q, "id": i, "fingerprint": fp.hex()}) + b"\n" for q, i, fp in gone)
                _append(fd, b"".join(lines), os.fstat(fd).st_size, fsync=True)
            finally:
                os.close(fd)
            self._ids_seq = max(self._ids_seq, *(q for q, _, _ in gone))
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with tmp.open("wb") as f:
                f.write(b"".join(_line(e) for e in pending))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        self._file.close()
        self._file = self.path.open("ab", buffering=0)
        self._size = os.fstat(self._file.fileno()).st_size
        self._held = [h for h in self._held if h[0] in keep]

    def close(self) -> None:
        """Close the file (every line is already written)."""
        self._file.close()


def _append(fd: int, data: bytes, size: int, *, fsync: bool) -> None:
    """Append ``data`` to the file open at ``fd`` (``size`` bytes long), all of it or, on an error, none of it."""
    try:
        view = memoryview(data)
        while view:  # os.write may write a part
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    except OSError:
        with contextlib.suppress(OSError):  # else Inbox.append cuts it before its next line
            os.ftruncate(fd, size)
        raise


def _ids_path(path: Path) -> Path:
    return path.with_name(path.name.removesuffix(".jsonl") + ".ids.jsonl")


def _read_lines(path: Path, parse: Callable[[Any, str], _T]) -> list[_T]:
    """Every line of a JSON-lines file, parsed; a torn last line is cut off the file, a damaged earlier one raises."""
    out: list[_T] = []
    if not path.exists():
        return out
    good = 0
    lines = path.read_bytes().split(b"\n")
    # The last piece never ends in a newline: empty after a whole line, else a line cut before its newline, even
    # if it parses (its fsync did not finish, so it was never acknowledged). Cut, never parsed.
    lines.pop()
    for i, line in enumerate(lines):
        try:
            out.append(parse(orjson.loads(line), f"{path}:{i + 1}"))
        except (orjson.JSONDecodeError, CEBError, KeyError, TypeError, ValueError) as exc:
            if i == len(lines) - 1:
                break  # a torn last line: never acknowledged
            raise RunError(f"{path}: line {i + 1} is damaged: {exc}") from exc
        good += len(line) + 1
    if good != path.stat().st_size:
        os.truncate(path, good)
    return out


def _line(entry: Accepted) -> bytes:
    doc = {"seq": entry.seq, "trajectory": trajectory_object(entry.trajectory), "scores": list(entry.scores)}
    return orjson.dumps(doc) + b"\n"


def _entry(doc: Any, where: str) -> Accepted:
    if not isinstance(doc, dict) or type(doc.get("seq")) is not int or not isinstance(doc.get("scores"), list):
        raise ValueError("not an inbox line")
    scores: list[Any] = doc["scores"]
    if not all(s is None or type(s) in (int, float) for s in scores):
        raise ValueError("scores must be numbers or null")
    trajectory = parse_trajectory(doc["trajectory"], where)
    return Accepted(
        seq=doc["seq"],
        trajectory=trajectory,
        scores=tuple(None if s is None else float(s) for s in scores),
        fingerprint=fingerprint(trajectory),
    )


def _id_line(doc: Any, where: str) -> tuple[int, str, bytes]:
    if not isinstance(doc, dict) or type(doc.get("seq")) is not int or not isinstance(doc.get("id"), str):
        raise ValueError("not an ids line")
    fp = bytes.fromhex(doc["fingerprint"])
    if len(fp) != 16:
        raise ValueError("fingerprint must be 32 hex digits")
    return doc["seq"], doc["id"], fp
