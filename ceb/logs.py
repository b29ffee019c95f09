"""structlog setup for applications, and the processor that keeps secrets out of every log line.

Library code calls :func:`get_logger` and binds stream / trajectory / step ids; the CLI calls
:func:`configure_logging` once, sending structlog events and stdlib :mod:`logging` records (openai, httpx) to
stderr through one chain ending in :func:`redact_secrets`. Until structlog is configured, events go redacted
to their module's :mod:`logging` logger, as a library's should (structlog's stdout default is never used).

:func:`redact_secrets` replaces with :data:`REDACTED`, at any depth of containers: the value of a key whose
last word (split at ``_ - .``, spaces, camelCase) is ``key``, ``apikey``, ``token``, ``secret``, ``password``,
``passwd``, ``auth``, ``authorization``, ``credential(s)`` or ``cookie``, or with any word ``password``,
``secret``, ``authorization``, ``apikey`` or ``credentials`` (``OPENAI_API_KEY`` and ``access_token`` hidden,
``api_key_env`` and ``max_tokens`` not); and in every string (message, values, ``exc_info`` traceback) the
token after ``Bearer``/``Basic``, ``sk-...`` and ``hf_...`` keys, the value in ``api_key=`` / ``token:`` /
``password=`` / ``secret=`` / ``authorization:`` text, and every value given to :func:`register_secret`.
Other objects are logged as their redacted ``repr``; tracebacks carry no locals (they could hold a key).
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
"""Registered values shorter than this are ignored (they would blank ordinary words)."""

_MAX_DEPTH = 8
"""Containers nested deeper are logged as their redacted ``repr``."""

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
    """Registered secrets and one pattern matching any (longest first)."""

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
    """Writes to the current ``sys.stderr``, which test runners swap and close."""

    def msg(self, message: str) -> None:
        stream = sys.stderr
        stream.write(message + "\n")
        stream.flush()

    debug = info = warning = warn = error = err = critical = fatal = exception = failure = log = msg


def _stderr_logger(*args: Any) -> _StderrLogger:
    return _StderrLogger()


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A :class:`logging.StreamHandler` on the current ``sys.stderr``."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always the current sys.stderr


def register_secret(value: str | None) -> None:
    """Redact every later occurrence of ``value`` (stripped); ignored under :data:`MIN_SECRET_CHARS` characters.

    Thread-safe; there is no un-registering.
    """
    if value is None:
        return
    value = value.strip()
    if len(value) >= MIN_SECRET_CHARS:
        _secrets.add(value)


def register_secret_env(name: str) -> None:
    """:func:`register_secret` of environment variable ``name`` (``BackendConfig.api_key_env``), if set."""
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
    """A structlog processor hiding secrets by the module docstring's rules; changes ``event_dict`` in place.

    ``exc_info`` is formatted into ``exception`` first (as :func:`structlog.processors.format_exc_info`), so the
    traceback is redacted wherever this sits in the chain; put it before the renderer.
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
    """Drop the named events logged in this block and its tasks (a Batch export's waits, :mod:`ceb.pipeline.batch`)."""
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
"""Processors while structlog is not configured, ending in the stdlib record's text."""


class _LibraryLogger:
    """Picks at each call the configured structlog logger, else the module's :mod:`logging` logger."""

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
    """The library logger, silent on stdout (module docstring); structlog's ``bind`` and level methods.

    ``level`` (e.g. ``logging.INFO`` for progress lines) overrides the configured filter once structlog is set up.
    """
    return _LibraryLogger(name, level, {})


def configure_logging(level: str, *, json: bool = False) -> None:
    """Send events at ``level`` and up to stderr, redacted; calling again replaces the setup.

    Stdlib :mod:`logging` records keep their loggers' levels (warnings by default) and share the renderer.
    ``json``: one JSON object per line, ISO UTC timestamps.

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
