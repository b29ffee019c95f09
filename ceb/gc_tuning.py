"""Garbage-collector settings for a long scoring run in one process (:mod:`gc`: ``freeze``, ``set_threshold``).

A run keeps its streams, banks and lane states alive while making many short-lived objects, so CPython's
default thresholds ``(700, 10, 10)`` run a full collection every few seconds, freezing the event loop
(docs/serving.md, "The garbage collector"). :func:`quiet_gc` freezes what exists and raises the thresholds; every
scoring run (:func:`ceb.pipeline.run_scoring`) and ``ceb serve`` runs inside it. :func:`default_gc` keeps
CPython's settings, for benchmarks that compare the two.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RUN_GC_THRESHOLD", "default_gc", "quiet_gc"]

RUN_GC_THRESHOLD = (20_000, 50, 100)
"""Allocations per generation-0 collection, then generation-0 (and 1) collections per older one."""

_open = {"quiet": 0, "default": 0}  # quiet_gc and default_gc blocks in progress (runs may overlap in one loop)
_before: tuple[int, int, int] | None = None  # the thresholds quiet_gc replaced, while it has them replaced


@contextmanager
def quiet_gc(threshold: tuple[int, int, int] = RUN_GC_THRESHOLD) -> Iterator[None]:
    """Freeze what is alive and raise the thresholds inside the block, restoring both after.

    Cyclic garbage is still freed, only pauses get fewer. Blocks may nest or overlap (two runs in one event loop):
    the first one tunes the collector and the last one to end restores it; inside :func:`default_gc` nothing
    changes. Process-wide: not re-entrant across threads.
    """
    global _before
    if _before is None and not _open["default"]:
        _before = gc.get_threshold()
        gc.freeze()  # no collection first: it would walk the whole heap on every run (garbage frozen here waits)
        gc.set_threshold(*threshold)
    _open["quiet"] += 1
    try:
        yield
    finally:
        _open["quiet"] -= 1
        if not _open["quiet"] and _before is not None:
            gc.set_threshold(*_before)
            gc.unfreeze()
            _before = None


@contextmanager
def default_gc() -> Iterator[None]:
    """Keep the collector's settings inside the block: a :func:`quiet_gc` that starts in it changes nothing."""
    _open["default"] += 1
    try:
        yield
    finally:
        _open["default"] -= 1
