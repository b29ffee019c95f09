"""One registry kind for every pluggable family, and one lazy-import helper.

A :class:`Registry` maps names to objects in declaration order (backends, retrievers, converters, methods,
report sections, benchmarks). An entry is an object or a ``"module:attr"`` path imported on first
:meth:`Registry.get`, may name the modules it ``requires`` (checked without importing) and the extra that
brings them; plugin packages register their own entries when imported on the first look-up.
:func:`lazy_exports` gives a package PEP 562 lazy public names. Follows inspect_ai ``_util/registry.py``,
``model/_providers/providers.py`` and lm-eval ``api/registry.py``.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

from ceb.errors import ConfigError
from ceb.version import install_command

__all__ = ["Registry", "did_you_mean", "import_path", "lazy_exports"]

T = TypeVar("T")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest choice (:func:`difflib.get_close_matches`, no case), or ``""``."""
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


def _install_hint(extra: str | None) -> str:
    return f"; install it with: {install_command(extra)}" if extra else ""


def import_path(target: str, *, what: str, extra: str | None = None) -> Any:
    """The object ``"module:attr"`` names, imported now; ``what`` and ``extra`` go into the error.

    Raises:
        ConfigError: No ``:``, the module cannot be imported (names ``extra``'s install), or no such attribute.
    """
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ConfigError(f"{what}: {target!r} is not a 'module:attr' path")
    try:
        return getattr(importlib.import_module(module), attr)
    except ImportError as exc:
        raise ConfigError(f"{what} cannot be loaded ({exc}){_install_hint(extra)}") from exc
    except AttributeError as exc:
        raise ConfigError(f"{what} cannot be loaded: {module} has no {attr!r}") from exc


@dataclass(slots=True)
class _Entry(Generic[T]):
    target: str | T
    extra: str | None
    requires: tuple[str, ...]
    declared_in: tuple[str, ...]
    """Registering modules, innermost first; the first plugin module orders the entry."""


class Registry(Generic[T]):
    """Name -> object, in declaration order, each resolved on first use; ``kind`` (``backend``) names them in messages.

    The modules of the ``plugins`` packages are all imported on the first look-up; their entries are ordered by
    module name then declaration, before entries declared elsewhere (in registration order).
    """

    def __init__(self, kind: str, *, plugins: Sequence[str] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, _Entry[T]] = {}
        self._plugins = tuple(plugins)
        self._loaded = not plugins
        self._rank: dict[str, int] = {}

    def register(
        self,
        name: str,
        target: str | T,
        *,
        extra: str | None = None,
        requires: Sequence[str] = (),
        before: str | None = None,
    ) -> None:
        """Add ``name``, last or just before ``before``; registering again replaces the target in place.

        ``target`` is the object or its ``"module:attr"`` path, imported on first :meth:`get`; ``extra`` the
        ``pip install -e '.[extra]'`` providing its dependencies; ``requires`` the top-level modules it needs,
        checked before loading.

        Raises:
            ConfigError: ``before`` is not registered.
        """
        entry = _Entry(target, extra, tuple(requires), _callers())
        if before is None or name in self._entries:
            self._entries[name] = entry
            return
        if before not in self._entries:
            self._unknown(before)
        entries = list(self._entries.items())
        at = [n for n, _ in entries].index(before)
        self._entries = dict([*entries[:at], (name, entry), *entries[at:]])

    def add(self, name: str, *, extra: str | None = None, requires: Sequence[str] = ()) -> Callable[[T], T]:
        """Decorator form of :meth:`register`."""

        def decorate(obj: T) -> T:
            self.register(name, obj, extra=extra, requires=requires)
            return obj

        return decorate

    def unregister(self, name: str) -> None:
        """Remove ``name`` if registered."""
        self._entries.pop(name, None)

    def _load_plugins(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        modules: list[str] = []
        for package_name in self._plugins:
            package = importlib.import_module(package_name)
            modules += sorted(info.name for info in pkgutil.iter_modules(package.__path__, prefix=f"{package_name}."))
        self._rank = {name: i for i, name in enumerate(modules)}
        for name in modules:
            importlib.import_module(name)

    def names(self) -> list[str]:
        """Registered names in declaration order (plugin order: class docstring)."""
        self._load_plugins()
        if not self._rank:
            return list(self._entries)
        last = len(self._rank)

        def rank(entry: _Entry[T]) -> int:
            return next((self._rank[m] for m in entry.declared_in if m in self._rank), last)

        ranked = sorted(enumerate(self._entries.items()), key=lambda e: (rank(e[1][1]), e[0]))
        return [name for _, (name, _) in ranked]

    def __contains__(self, name: object) -> bool:
        self._load_plugins()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def position(self, name: str) -> int:
        """``name``'s 0-based place in declaration order.

        Raises:
            ConfigError: Unknown name.
        """
        names = self.names()
        if name not in names:
            self._unknown(name)
        return names.index(name)

    def missing(self, name: str) -> list[str]:
        """The ``requires`` modules of ``name`` not installed (:func:`importlib.util.find_spec`)."""
        self._load_plugins()
        entry = self._entries.get(name)
        return [] if entry is None else [m for m in entry.requires if importlib.util.find_spec(m) is None]

    def get(self, name: str, *, check: bool = True) -> T:
        """Resolve ``name``; ``check=False`` imports it despite missing ``requires`` (help without the extra).

        Raises:
            ConfigError: Unknown name (lists the known ones), or a missing dependency (names the extra).
        """
        self._load_plugins()
        entry = self._entries.get(name)
        if entry is None:
            self._unknown(name)
        lacking = self.missing(name) if check else []
        if lacking:
            raise ConfigError(
                f"{self.kind} {name!r} needs {', '.join(lacking)}, which is not installed{_install_hint(entry.extra)}"
            )
        if not isinstance(entry.target, str):
            return entry.target
        obj: T = import_path(entry.target, what=f"{self.kind} {name!r}", extra=entry.extra)
        entry.target = obj
        return obj

    def items(self) -> list[tuple[str, T]]:
        """Every ``(name, object)`` in declaration order, resolved as :meth:`get` does."""
        return [(name, self.get(name)) for name in self.names()]

    def _unknown(self, name: str) -> NoReturn:
        names = self.names()
        hint = did_you_mean(name, names)
        raise ConfigError(f"unknown {self.kind} {name!r}{hint}; choose one of: {', '.join(names)}")


def _callers() -> tuple[str, ...]:
    """Module names of the calling frames, innermost first."""
    names: list[str] = []
    frame = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name != __name__ and (not names or names[-1] != name):
            names.append(name)
        frame = frame.f_back  # type: ignore[assignment]
    return tuple(names)


def lazy_exports(
    package: str, homes: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """PEP 562 ``__getattr__`` and ``__dir__`` loading ``homes`` (name -> module) once, on first use.

    ``__getattr__, __dir__ = lazy_exports(__name__, {"Gate": "ceb.gate"}, __all__)``.
    """
    namespace = sys.modules[package].__dict__  # the package being imported is already in sys.modules

    def __getattr__(name: str) -> Any:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(public)

    return __getattr__, __dir__
