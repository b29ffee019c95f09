"""One process per directory: an exclusive, advisory ``flock`` on a file in it.

The batch pipeline locks its run directory (``RunDir.LOCK``) and the live gate its state directory
(``StateDir.LOCK``) with :func:`dir_lock`, the one way ``ceb`` locks a directory. The kernel drops the lock when its
holder exits, however it exits (SIGKILL included), so a crashed process never leaves a stale lock: the next one
takes it again at once. POSIX only (``fcntl``), like vLLM's own server.
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
    """Hold ``directory``'s lock for the block, creating the directory if needed.

    A directory this call created is removed again when the block wrote nothing into it.

    Args:
        directory: The directory.
        name: The lock file's name in it (``RunDir.LOCK``, ``StateDir.LOCK``); the file holds the holder's process
            id, for the message to a second one.
        what: What the directory is, for the message when it cannot be used (``"a gate state directory"``).

    Raises:
        RunError: Another process holds it (the message names the directory and the holder's pid), or the
            directory cannot be created or written (the message names the path and the reason).
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
    """The process id a live process holding ``directory``'s lock wrote, or ``None`` when no process holds it.

    Takes a shared lock for an instant to test it, so a process starting to use the directory at that very instant
    is refused as if another held it (it says so and names this pid); nothing is created or written.
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
