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

_blocks: list[bool] = []  # the quiet_gc / default_gc blocks in progress, innermost last (True: quiet_gc)


@contextmanager
def quiet_gc(threshold: tuple[int, int, int] = RUN_GC_THRESHOLD) -> Iterator[None]:
    """Freeze what is alive and raise the thresholds inside the block, restoring both after.

    Cyclic garbage is still freed, only pauses get fewer. Nested in another :func:`quiet_gc` or in
    :func:`default_gc`, it changes nothing. Process-wide: not re-entrant across threads.
    """
    if _blocks:
        _blocks.append(_blocks[-1])
        try:
            yield
        finally:
            _blocks.pop()
        return
    before = gc.get_threshold()
    gc.freeze()  # no collection first: it would walk the whole heap on every run (garbage frozen here waits)
    gc.set_threshold(*threshold)
    _blocks.append(True)
    try:
        yield
    finally:
        _blocks.pop()
        gc.set_threshold(*before)
        gc.unfreeze()


@contextmanager
def default_gc() -> Iterator[None]:
    """Keep the collector's settings as they are inside the block: a :func:`quiet_gc` within it changes nothing."""
    _blocks.append(False)
    try:
        yield
    finally:
        _blocks.pop()
