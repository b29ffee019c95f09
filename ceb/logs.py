"""Log setup for applications, and the processor that keeps secrets out of every log line.

Library code only asks for :func:`get_logger` (``get_logger(__name__)``) and binds stream / trajectory / step ids;
an application (the ``ceb`` command line) calls :func:`configure_logging` once. That sends structlog events, and
warnings from other libraries that log through the standard :mod:`logging` module (openai, httpx), to
stderr through the same chain, whose last step before rendering is :func:`redact_secrets`.

As a library ceb is silent on stdout: until structlog is configured (by :func:`configure_logging` or by the
application itself, whose configuration ceb's events then follow), each event goes to the standard :mod:`logging`
logger of its module (``ceb.pipeline.runner``...), redacted, as a library's should: nothing shows below warning
unless the caller's logging asks for it, and warnings reach stderr through :mod:`logging`'s last-resort handler.
structlog's own default, which prints every event to stdout, is never used.

What :func:`redact_secrets` replaces with :data:`REDACTED`, at any depth of dicts, lists, tuples and sets:

- the whole value of a key whose name looks secret: its last word (split at ``_``, ``-``, ``.``, spaces and
  camelCase, case-insensitive) is ``key``, ``apikey``, ``token``, ``secret``, ``password``, ``passwd``,
  ``auth``, ``authorization``, ``credential(s)`` or ``cookie``, or any word is ``password``, ``secret``,
  ``authorization``, ``apikey`` or ``credentials``. So ``api_key``, ``OPENAI_API_KEY``, ``Authorization``
  and ``access_token`` are hidden, while ``api_key_env`` (the *name* of a variable) and ``max_tokens`` are not;
- in every string (the event message, other values, the formatted traceback of ``exc_info``): the token after
  ``Bearer`` / ``Basic``, OpenAI-style ``sk-...`` keys, Hugging Face ``hf_...`` tokens, the value in
  ``api_key=...`` / ``token: ...`` / ``password=...`` / ``secret=...`` / ``authorization: ...`` text, and
  every secret registered with :func:`register_secret` or :func:`register_secret_env` (the API key itself,
  read from the variable ``BackendConfig.api_key_env`` names, whatever it looks like).

Values that are neither JSON scalars nor containers (exceptions, paths, objects) are logged as their
``repr``, redacted. Tracebacks are plain text without local variables: a pretty traceback that shows locals
would print a key held in a local variable of the failing frame.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from ceb.errors import ConfigError

__all__ = [
    "REDACTED",
    "configure_logging",
    "get_logger",
    "muted",
    "redact_secrets",
    "register_secret",
    "register_secret_env",
]

REDACTED: Final = "[REDACTED]"
"""What a secret is replaced with."""

MIN_SECRET_CHARS: Final = 4
"""Registered values shorter than this are ignored: they would blank out ordinary words and protect nothing."""

_MAX_DEPTH = 8
"""Containers nested deeper than this in an event are logged as their (redacted) ``repr``."""

_LAST_WORDS = frozenset(
    {"key", "apikey", "token", "secret", "password", "passwd", "auth", "authorization", "credential", "credentials"}
    | {"cookie"}
)
_ANY_WORDS = frozenset({"password", "passwd", "secret", "authorization", "apikey", "credentials"})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b(bearer|basic)(\s+)(?!\[REDACTED\])[A-Za-z0-9._~+/=-]{6,}", re.IGNORECASE), r"\1\2" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"), REDACTED),
    (re.compile(r"\bhf_[A-Za-z0-9]{20,}"), REDACTED),
    (
        re.compile(
            r"""\b((?:x-)?api[_-]?key|(?:access|auth|refresh|bearer)[_-]?token|token|password|passwd|secret"""
            r"""|authorization)(["']?\s*[:=]\s*["']?)(?!(?:bearer|basic)\s)(?!\[REDACTED\])[^\s"',;&)}\]]+""",
            re.IGNORECASE,
        ),
        r"\1\2" + REDACTED,
    ),
)


class _Secrets:
    """The registered secret values, and one compiled pattern that finds any of them (longest first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self.pattern: re.Pattern[str] | None = None

    def add(self, value: str) -> None:
        with self._lock:
            if value in self._values:
                return
            self._values.add(value)
            alternatives = sorted(self._values, key=len, reverse=True)
            self.pattern = re.compile("|".join(re.escape(v) for v in alternatives))


_secrets = _Secrets()


class _StderrLogger:
    """Writes each rendered line to whatever ``sys.stderr`` is at the time of the call.

    ``structlog.PrintLogger(sys.stderr)`` would keep the stream of the moment it was configured: after a
    test runner or ``typer.testing.CliRunner`` swaps stderr for a buffer and closes it, every later log call
    would fail with "I/O operation on closed file".
    """

    def msg(self, message: str) -> None:
        stream = sys.stderr
        stream.write(message + "\n")
        stream.flush()

    debug = info = warning = warn = error = err = critical = fatal = exception = failure = log = msg


def _stderr_logger(*args: Any) -> _StderrLogger:
    return _StderrLogger()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A :class:`logging.StreamHandler` on the current ``sys.stderr`` (see :class:`_StderrLogger`)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the current sys.stderr


def register_secret(value: str | None) -> None:
    """Redact every later occurrence of ``value`` in log output, whatever it looks like.

    ``None``, blank values and values shorter than :data:`MIN_SECRET_CHARS` characters are ignored. Surrounding
    white space is not part of the secret. Safe to call from any thread; there is no way to un-register.
    """
    if value is None:
        return
    value = value.strip()
    if len(value) >= MIN_SECRET_CHARS:
        _secrets.add(value)


def register_secret_env(name: str) -> None:
    """Register the value of environment variable ``name`` (e.g. ``BackendConfig.api_key_env``), if it is set."""
    register_secret(os.environ.get(name))


def _looks_secret(key: object) -> bool:
    if not isinstance(key, str):
        return False
    words = [w.lower() for w in _WORD.findall(key)]
    return bool(words) and (words[-1] in _LAST_WORDS or any(w in _ANY_WORDS for w in words))


def _redact_text(text: str) -> str:
    pattern = _secrets.pattern
    if pattern is not None:
        text = pattern.sub(REDACTED, text)
    for regex, replacement in _PATTERNS:
        text = regex.sub(replacement, text)
    return text


def _safe_repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:  # a broken __repr__ must not turn a log call into a crash
        return f"<{type(value).__name__} object>"


def _redact_value(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, str):
        return _redact_text(value)
    if depth < _MAX_DEPTH:
        if isinstance(value, Mapping):
            return {
                k: (REDACTED if _looks_secret(k) and v is not None else _redact_value(v, depth + 1))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple | set | frozenset):
            items = [_redact_value(v, depth + 1) for v in value]
            return items if isinstance(value, list | set | frozenset) else tuple(items)
    return _redact_text(_safe_repr(value))


def redact_secrets(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    """A structlog processor: hide secrets in an event (the rules are in the module docstring).

    Put it after the processors that add fields and before the renderer. An ``exc_info`` in the event is
    formatted into an ``exception`` string here first (as :func:`structlog.processors.format_exc_info` does),
    so the traceback's text is redacted too, wherever this processor sits in the chain.

    Args:
        logger: The wrapped logger (unused).
        method_name: The log method's name (unused).
        event_dict: The event; it is changed in place and returned.

    Returns:
        ``event_dict`` with every secret replaced by :data:`REDACTED`.
    """
    if event_dict.get("exc_info"):
        event_dict = structlog.processors.format_exc_info(logger, method_name, event_dict)
    else:
        event_dict.pop("exc_info", None)
    for key, value in list(event_dict.items()):
        if _looks_secret(key) and value is not None:
            event_dict[key] = REDACTED
        else:
            event_dict[key] = _redact_value(value, 0)
    return event_dict


_MUTED: ContextVar[frozenset[str]] = ContextVar("ceb_muted_events", default=frozenset())


@contextmanager
def muted(*events: str) -> Iterator[None]:
    """Drop the log events named ``events`` made inside this block (and in the tasks it starts).

    For a run whose step failures are expected and say nothing: a Batch export, whose every step waits for its
    reply (:mod:`ceb.pipeline.batch`).
    """
    token = _MUTED.set(_MUTED.get() | frozenset(events))
    try:
        yield
    finally:
        _MUTED.reset(token)


def _drop_muted(logger: WrappedLogger, method_name: str, event_dict: EventDict) -> EventDict:
    if event_dict.get("event") in _MUTED.get():
        raise structlog.DropEvent
    return event_dict


_STDLIB_CHAIN: list[Processor] = [
    structlog.stdlib.filter_by_level,  # the logging logger's own level: a caller's logging decides what shows
    _drop_muted,
    redact_secrets,
    structlog.processors.KeyValueRenderer(key_order=["event"]),
]
"""The processors of an event while structlog is not configured, ending in the text the logging record carries."""


class _LibraryLogger:
    """A structlog logger chosen at each call: the configured one, or else the module's :mod:`logging` logger."""

    __slots__ = ("_context", "_level", "_name")

    def __init__(self, name: str, level: int | None, context: dict[str, Any]) -> None:
        self._name, self._level, self._context = name, level, context

    def bind(self, **values: Any) -> _LibraryLogger:
        return _LibraryLogger(self._name, self._level, self._context | values)

    def _target(self) -> Any:
        if structlog.is_configured():
            if self._level is None:
                target = structlog.get_logger(self._name)
            else:
                target = structlog.wrap_logger(None, wrapper_class=structlog.make_filtering_bound_logger(self._level))
        else:
            target = structlog.wrap_logger(
                logging.getLogger(self._name),
                processors=_STDLIB_CHAIN,
                wrapper_class=structlog.stdlib.BoundLogger,
            )
        return target.bind(**self._context) if self._context else target

    def __getattr__(self, method: str) -> Any:
        return getattr(self._target(), method)


def get_logger(name: str, *, level: int | None = None) -> Any:
    """The logger for library code: a structlog bound logger that is silent on stdout (module docstring).

    Args:
        name: The module's ``__name__``; also the :mod:`logging` logger's name while structlog is not configured.
        level: A level of its own (``logging.INFO`` for progress lines, which show at the default ``warning``),
            where structlog is configured; ``None``: the configured filter.

    Returns:
        An object with structlog's ``bind`` and ``debug`` ... ``exception`` methods.
    """
    return _LibraryLogger(name, level, {})


def configure_logging(level: str, *, json: bool = False) -> None:
    """Send log events at ``level`` and above to stderr, with secrets redacted.

    structlog events are filtered at ``level``; records of the standard :mod:`logging` module (other
    libraries) keep their loggers' own levels (by default warnings and up) and go through the same processors
    and renderer. Calling it again replaces the earlier setup.

    Args:
        level: ``debug``, ``info``, ``warning``, ``error`` or ``critical`` (any case).
        json: One JSON object per line (ISO UTC timestamps) instead of the human-readable console format.

    Raises:
        ConfigError: ``level`` is not a log level.
    """
    lvl = logging.getLevelNamesMapping().get(level.upper())
    if lvl is None:
        raise ConfigError(f"unknown log level {level!r}: use debug, info, warning or error")
    renderer: Processor
    if json:
        stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
        renderer = structlog.processors.JSONRenderer()
    else:
        stamp = structlog.processors.TimeStamper(fmt="%H:%M:%S")
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
    structlog.configure(
        processors=[_drop_muted, structlog.processors.add_log_level, stamp, redact_secrets, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=_stderr_logger,
    )

    handler = _StderrHandler()
    handler.setLevel(lvl)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.processors.add_log_level, stamp],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, redact_secrets, renderer],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StderrHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
