"""Garbage-collector settings for a long scoring run in one process (:mod:`gc`: ``freeze``, ``set_threshold``).

A run keeps its streams, banks and lane states alive while making many short-lived objects, so CPython's
default thresholds ``(700, 10, 10)`` run a full collection every few seconds, freezing the event loop
(docs/serving.md, "The garbage collector"). :func:`quiet_gc` freezes what exists and raises the thresholds.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["RUN_GC_THRESHOLD", "quiet_gc"]

RUN_GC_THRESHOLD = (20_000, 50, 100)
"""Allocations per generation-0 collection, then generation-0 (and 1) collections per older one."""


@contextmanager
def quiet_gc(threshold: tuple[int, int, int] = RUN_GC_THRESHOLD) -> Iterator[None]:
    """Freeze what is alive and raise the thresholds inside the block, restoring both after.

    Cyclic garbage is still freed, only pauses get fewer. Process-wide: not re-entrant across threads.
    """
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(*threshold)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
