"""The exceptions ``ceb`` raises, in one tree.

::

    CEBError
    ├── ConfigError                 a setting is missing, unknown or out of range
    ├── DataError                   input that breaks the trajectory contract (SCHEMA.md)
    │   └── StreamValidationError   every bad line of a stream, gathered before any work starts
    ├── BankError                   a bank file that cannot be read back, or a bad record
    ├── BackendError                a model endpoint failed after its retry budget
    │   ├── FatalBackendError       the endpoint refuses every request (bad key, unknown model): stop the run
    │   └── UnsupportedFeatureError the endpoint would ignore a field the request needs: not available there
    ├── RunError                    the run stopped: failures over threshold, or a run or state directory that
    │                               another process holds or that cannot be written
    ├── OverloadedError             a live gate's stream has too many trajectories waiting: retry later
    └── ConflictError               a live gate refuses a request that retrying unchanged cannot fix
        ├── StreamLimitError        a new stream beyond ``gate.max_streams``
        └── DuplicateTrajectoryError  a trajectory id the stream accepted before, now with other content

Each exception carries the context a user needs to find the cause: the file and line of bad input, or
the stream, trajectory id, step and backend of a failed call.

A fault of the machine rather than of the input (a full disk, a refused permission, a read-only file system)
stays the system's ``OSError``; where the system gives no file name (a write to an open file), the writer names
it with :func:`with_path`. The command line reports it in one line with its own exit code
(:func:`ceb.cli._common.fail`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BackendError",
    "BankError",
    "CEBError",
    "ConfigError",
    "ConflictError",
    "DataError",
    "DuplicateTrajectoryError",
    "Problem",
    "FatalBackendError",
    "OverloadedError",
    "RunError",
    "StreamLimitError",
    "StreamValidationError",
    "UnsupportedFeatureError",
    "leaf_error",
    "reported_error",
    "with_path",
]


class CEBError(Exception):
    """Base class of every error ``ceb`` raises on purpose.

    Each pickles as itself, with its message and attributes, so that it crosses a process boundary unchanged (a
    Ray task's error reaches the driver so, :mod:`ceb.pipeline.ray_launch`). Python's default would call the
    subclass's ``__init__`` with the message as its only argument, which most of them do not take.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[CEBError], args: tuple[Any, ...], state: dict[str, Any]) -> CEBError:
    """A pickled :class:`CEBError` rebuilt without its ``__init__``: its ``args`` and attributes as they were."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def with_path(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` naming ``path`` when it names no file: a failed write to an open file does not say which file.

    Returns:
        ``exc`` itself when it has a file name, else a new error of the same kind (``errno``, reason) on ``path``.
    """
    if exc.filename is not None or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, os.fspath(path))  # OSError picks the subclass from the errno


class ConfigError(CEBError):
    """A configuration value is missing, unknown or out of range."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a line of a trajectory file was rejected.

    Attributes:
        path: The file, as given by the user.
        line: 1-based line number in that file.
        field: Dotted path of the offending field (``steps[2].action``), or ``"<line>"`` for the whole line.
        message: What is wrong, in words.
        trajectory_id: The trajectory's ``id`` when it could be read, else ``None``.
        step: 0-based step index when the problem is inside a step, else ``None``.
    """

    path: str
    line: int
    field: str
    message: str
    trajectory_id: str | None = None
    step: int | None = None

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.trajectory_id is not None:
            where += f" (trajectory {self.trajectory_id!r}"
            where += f", step {self.step})" if self.step is not None else ")"
        return f"{where}: field {self.field}: {self.message}"


class DataError(CEBError):
    """Input that breaks the trajectory contract of SCHEMA.md."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class StreamValidationError(DataError):
    """A stream has one or more bad lines; nothing was scored.

    Attributes:
        problems: Every problem found, in file and line order.
    """

    def __init__(self, problems: list[Problem], *, shown: int = 20) -> None:
        self.problems = problems
        head = "\n".join(f"  {p}" for p in problems[:shown])
        more = f"\n  ... and {len(problems) - shown} more" if len(problems) > shown else ""
        n = len(problems)
        Exception.__init__(self, f"{n} problem{'s' if n != 1 else ''} in the stream, nothing was scored:\n{head}{more}")
        self.problem = problems[0]


class BankError(CEBError):
    """A bank file that cannot be read back, or a record that breaks the bank's rules."""


class BackendError(CEBError):
    """A model endpoint failed after its retry budget.

    Attributes:
        message: The message without the context suffix.
        backend: Backend name and endpoint (``openai@http://127.0.0.1:8000/v1``).
        stream: Stream name, when known.
        trajectory_id: Trajectory id, when known.
        step: 0-based step index, when known.
    """

    def __init__(
        self,
        message: str,
        *,
        backend: str = "",
        stream: str | None = None,
        trajectory_id: str | None = None,
        step: int | None = None,
    ) -> None:
        ctx = ", ".join(
            f"{k}={v}"
            for k, v in (
                ("backend", backend),
                ("stream", stream),
                ("trajectory", trajectory_id),
                ("step", step),
            )
            if v not in (None, "")
        )
        super().__init__(f"{message} [{ctx}]" if ctx else message)
        self.message = message
        self.backend = backend
        self.attempts = 1
        self.stream = stream
        self.trajectory_id = trajectory_id
        self.step = step


class FatalBackendError(BackendError):
    """The endpoint refuses every request the same way (401, 403, 404): retrying or going on cannot help."""


class UnsupportedFeatureError(BackendError):
    """The endpoint would ignore a field the request needs, so the request is not sent: not available, not failed.

    Raised for vLLM's ``continue_final_message`` on a server known to ignore body fields it does not know.
    """


class RunError(CEBError):
    """A run stopped, or a directory cannot be used.

    Failures passed the threshold; or a run directory (or a gate's state directory) is held by another process, or
    cannot be created or written.
    """


class OverloadedError(CEBError):
    """A live gate's stream holds ``gate.max_pending`` accepted trajectories waiting for hindsight; retry later.

    Attributes:
        stream: The stream.
        pending: Trajectories waiting.
    """

    def __init__(self, stream: str, pending: int) -> None:
        super().__init__(f"stream {stream}: {pending} accepted trajectories are waiting for hindsight; retry later")
        self.stream = stream
        self.pending = pending


class ConflictError(CEBError):
    """A live gate refuses a request because of its own state, and the same request would be refused again.

    Unlike :class:`OverloadedError` (HTTP 503, retry later), waiting does not help: the client must change the
    request (or the operator the setting). ``ceb serve`` answers HTTP 409, which retry policies do not retry.

    Attributes:
        stream: The stream.
        field: The request field at fault (``stream``, ``trajectory.id``).
    """

    def __init__(self, message: str, *, stream: str, field: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.field = field


class StreamLimitError(ConflictError):
    """A request would open a stream beyond ``gate.max_streams``; the streams already open keep working.

    Attributes:
        held: Streams the gate holds.
        limit: ``gate.max_streams``.
    """

    def __init__(self, stream: str, held: int, limit: int) -> None:
        super().__init__(
            f"stream {stream}: the gate holds {held} streams already, its limit (gate.max_streams = {limit}); "
            "send to an existing stream, or raise gate.max_streams and restart the gate",
            stream=stream,
            field="stream",
        )
        self.held = held
        self.limit = limit


class DuplicateTrajectoryError(ConflictError):
    """A finished trajectory's id was accepted by the stream before, with different content.

    The same id with the same content is a retry and is acknowledged again without a second bank update; see
    :meth:`ceb.gate.Gate.accept`.

    Attributes:
        trajectory_id: The id.
        seq: The sequence number the stream gave the first trajectory with this id.
    """

    def __init__(self, stream: str, trajectory_id: str, seq: int) -> None:
        super().__init__(
            f"stream {stream}: trajectory {trajectory_id[:80]!r} was accepted before (seq {seq}) with different "
            "content; a retry must resend the same trajectory, a new run needs a new id",
            stream=stream,
            field="trajectory.id",
        )
        self.trajectory_id = trajectory_id
        self.seq = seq


def leaf_error(exc: BaseException) -> BaseException:
    """The one error inside nested one-member exception groups (what an anyio task group raises), else ``exc``.

    Public entry points (:class:`~ceb.gate.Gate`, the CLI) raise it in place of the group, so a caller catches
    ``DataError`` and not an ``ExceptionGroup`` holding one.
    """
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def reported_error(exc: BaseException) -> CEBError | OSError | None:
    """The error to report of ``exc``: itself, or the first one in its exception groups (anyio task groups).

    Returns:
        A :class:`CEBError` or ``OSError`` (the first, depth first: the cause, where the others are
        what failed while stopping), else ``None`` (a bug: let its traceback show).
    """
    if isinstance(exc, CEBError | OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = reported_error(inner)
            if found is not None:
                return found
    return None
