"""A disk that fills up, for tests of what a command does on ENOSPC: deterministic, no tmpfs or root needed.

:func:`full_disk_open` replaces :meth:`pathlib.Path.open` (through which ``ceb`` writes every file: the result
rows, ``write_bytes``, the banks, metrics, reports, exports and converted streams). Files opened for writing
under ``root`` take ``rows`` lines of ``scores.jsonl``; the next line is cut in the middle, as a full disk cuts a
buffered write, and from then on every write under ``root`` fails. The error is the one the system gives: an
``OSError`` with ``errno.ENOSPC`` and no file name.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

__all__ = ["full_disk_open"]

_real_open = Path.open


def _no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Disk:
    def __init__(self, rows: int) -> None:
        self.rows_left = rows
        self.full = rows <= 0


class _Filling:
    """A file opened for writing on a disk that fills up; everything else is the real file's."""

    def __init__(self, file: IO[Any], disk: _Disk, counts_rows: bool) -> None:
        self._file = file
        self._disk = disk
        self._counts_rows = counts_rows

    def write(self, data: Any) -> int:
        if self._disk.full:
            raise _no_space()
        if self._counts_rows:
            if self._disk.rows_left <= 0:
                self._disk.full = True
                self._file.write(data[: len(data) // 2])  # a torn line, as a partial write leaves it
                self._file.flush()
                raise _no_space()
            self._disk.rows_left -= bytes(data).count(b"\n")
        return int(self._file.write(data))

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()

    def __iter__(self) -> Any:
        return iter(self._file)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)


def full_disk_open(root: Path, rows: int) -> Callable[..., Any]:
    """A :meth:`pathlib.Path.open` for a disk under ``root`` that is full after ``rows`` lines of scores.jsonl.

    ``rows=0``: full from the start (the first write of any file under ``root`` fails).
    """
    disk = _Disk(rows)
    root = root.resolve()

    def open_(self: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        file = _real_open(self, mode, *args, **kwargs)
        if not set(mode) & set("wax+") or not self.resolve().is_relative_to(root):
            return file
        return _Filling(file, disk, counts_rows=self.name == "scores.jsonl")

    return open_
