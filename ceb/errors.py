"""The exceptions ``ceb`` raises, in one tree; each carries the context to find the cause.

::

    CEBError
    ├── ConfigError                 a setting is missing, unknown or out of range
    ├── DataError                   input that breaks the stream contract (file, line, field)
    │   └── StreamValidationError   every bad line of a stream, gathered before any work starts
    ├── BankError                   a bank file that cannot be read back, or a bad record
    ├── BackendError                a model endpoint failed after its retries (backend, stream, trajectory, step)
    │   ├── FatalBackendError       the endpoint refuses every request (bad key, unknown model): stop the run
    │   └── UnsupportedFeatureError the endpoint would ignore a field the request needs: not available there
    ├── RunError                    failures over threshold, or a run/state directory held or not writable
    ├── OverloadedError             a live gate's stream has too many trajectories waiting: retry later
    └── ConflictError               a live gate refuses a request that retrying unchanged cannot fix
        ├── StreamLimitError        a new stream beyond ``gate.max_streams``
        └── DuplicateTrajectoryError  a trajectory id the stream accepted before, now with other content

Machine faults (full disk, permission, read-only file system) stay ``OSError``, named by :func:`with_path` where
the system names no file; the CLI reports them in one line with their own exit code (:func:`ceb.cli._common.fail`).
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
    """Base of every error ``ceb`` raises on purpose; pickles with its attributes (:mod:`ceb.pipeline.ray_launch`)."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.args, self.__dict__))


def _restore(cls: type[CEBError], args: tuple[Any, ...], state: dict[str, Any]) -> CEBError:
    """Rebuild a pickled :class:`CEBError` without calling its ``__init__``."""
    exc = cls.__new__(cls, *args)
    exc.args = args
    exc.__dict__.update(state)
    return exc


def with_path(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` if it names a file, else the same ``errno`` and reason on ``path`` (writes to open files name none)."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return OSError(exc.errno, exc.strerror, os.fspath(path))  # OSError picks the subclass from the errno


class ConfigError(CEBError):
    """A configuration value is missing, unknown or out of range."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a line of a stream file was rejected."""

    path: str
    line: int  # 1-based (0: the whole file)
    field: str  # a dotted path (steps[2].action), "<line>" or "<file>"
    message: str
    trajectory_id: str | None = None  # the id, when readable
    step: int | None = None  # 0-based, inside a step

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}"
        if self.trajectory_id is not None:
            where += f" (trajectory {self.trajectory_id!r}"
            where += f", step {self.step})" if self.step is not None else ")"
        return f"{where}: field {self.field}: {self.message}"


class DataError(CEBError):
    """Input that breaks the stream contract (``docs/stream-format.md``); ``problem`` places it."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


class StreamValidationError(DataError):
    """A stream has bad lines, nothing was scored; ``problems`` lists every one in file and line order."""

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
    """A model endpoint failed after its retries.

    ``message`` lacks the context suffix; ``backend`` is name and endpoint (``openai@http://127.0.0.1:8000/v1``);
    ``step`` is 0-based, when known.
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
    """The endpoint refuses every request alike (401, 403, 404): retrying cannot help."""


class UnsupportedFeatureError(BackendError):
    """The endpoint would ignore a needed field (vLLM's ``continue_final_message``), so nothing is sent."""


class RunError(CEBError):
    """Failures passed the threshold, or a run or gate state directory is held by another process or not writable."""


class OverloadedError(CEBError):
    """A gate stream holds ``gate.max_pending`` trajectories waiting for hindsight (HTTP 503: retry later)."""

    def __init__(self, stream: str, pending: int) -> None:
        super().__init__(f"stream {stream}: {pending} accepted trajectories are waiting for hindsight; retry later")
        self.stream = stream
        self.pending = pending


class ConflictError(CEBError):
    """A gate refuses a request by its own state; resending it unchanged is refused again (HTTP 409, not retried).

    ``field`` is the request field at fault (``stream``, ``trajectory.id``).
    """

    def __init__(self, message: str, *, stream: str, field: str) -> None:
        super().__init__(message)
        self.stream = stream
        self.field = field


class StreamLimitError(ConflictError):
    """A request would open a stream beyond ``gate.max_streams`` (``limit``); open streams keep working."""

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
    """A finished trajectory's id was accepted before (``seq``) with other content.

    The same content again is a retry, acknowledged without a second bank update (:meth:`ceb.gate.Gate.accept`).
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
    """The one error inside nested one-member exception groups (anyio task groups), else ``exc``."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def reported_error(exc: BaseException) -> CEBError | OSError | None:
    """``exc``, or the first (depth first) :class:`CEBError` or ``OSError`` in its groups; ``None``: a bug."""
    if isinstance(exc, CEBError | OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = reported_error(inner)
            if found is not None:
                return found
    return None
