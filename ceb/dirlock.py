"""One process per directory: an exclusive advisory ``flock`` on a file in it (POSIX ``fcntl``, as vLLM's server).

The run directory (``RunDir.LOCK``) and the gate's state directory (``StateDir.LOCK``) are locked only through
:func:`dir_lock`. The kernel drops the lock however its holder exits (SIGKILL too), so no lock goes stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ceb.errors import RunError

__all__ = ["dir_lock", "lock_holder"]


@contextlib.contextmanager
def dir_lock(directory: Path, name: str, *, what: str = "a run directory") -> Iterator[None]:
    """Hold ``directory``'s lock file ``name`` (holding the pid) for the block, creating the directory if needed.

    A directory this call created is removed when the block wrote nothing; ``what`` names it in messages.

    Raises:
        RunError: Another process holds it (names directory and pid), or it cannot be created or written.
    """
    path = directory / name
    created = not directory.exists()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise RunError(f"cannot use {directory} as {what}: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise RunError(
                f"{directory} is in use by another ceb process (pid {holder}); wait for it to end, or use another "
                f"directory"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:
            raise RunError(f"cannot use {directory} as {what}: {exc.strerror or exc}") from None
        try:
            yield
        finally:
            # A directory moved away in the block (a run built aside, then published by a rename) is left alone.
            if created and directory.is_dir() and [p.name for p in directory.iterdir()] == [name]:
                # Nothing was written (a bad setting, a dead endpoint, a gate that saw no stream): leave no directory.
                path.unlink()
                directory.rmdir()
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def lock_holder(directory: Path, name: str) -> str | None:
    """The pid a live holder of ``directory``'s lock wrote, or ``None``; creates and writes nothing.

    It takes a shared lock for an instant, so a process starting at that instant is refused naming this pid.
    """
    try:
        fd = os.open(directory / name, os.O_RDONLY)
    except OSError:
        return None  # no lock file: never locked
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
