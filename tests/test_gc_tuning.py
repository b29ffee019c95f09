"""The run's garbage-collector settings apply inside the block only, and cyclic garbage is still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from ceb.gc_tuning import RUN_GC_THRESHOLD, default_gc, quiet_gc


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the collector frees it


def test_quiet_gc_freezes_and_raises_thresholds_then_restores_them() -> None:
    before = gc.get_threshold()
    frozen_before = gc.get_freeze_count()
    with quiet_gc():
        assert gc.get_threshold() == RUN_GC_THRESHOLD
        assert gc.get_freeze_count() > frozen_before  # what was alive at the start is out of the collector's walk
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_quiet_gc_restores_the_settings_when_the_run_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), quiet_gc():
        raise RuntimeError("the run failed")
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_cycles_made_inside_are_still_collected() -> None:
    with quiet_gc():
        ref = weakref.ref(_Node())
        assert ref() is not None
        gc.collect()
        assert ref() is None


def test_a_nested_block_changes_nothing_and_default_gc_keeps_cpythons_settings() -> None:
    before = gc.get_threshold()
    with quiet_gc():
        with quiet_gc((1, 1, 1)):  # a run inside a command that tuned the collector already
            assert gc.get_threshold() == RUN_GC_THRESHOLD
        assert gc.get_threshold() == RUN_GC_THRESHOLD and gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with default_gc(), quiet_gc():  # a benchmark's arm with CPython's collector
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with quiet_gc():
        assert gc.get_threshold() == RUN_GC_THRESHOLD  # the default block ended


@pytest.mark.anyio
async def test_overlapping_runs_keep_the_collector_tuned_until_the_last_one_ends() -> None:
    import anyio

    before = gc.get_threshold()
    first_done, seen = anyio.Event(), []

    async def first() -> None:
        with quiet_gc():
            await anyio.sleep(0.01)
        first_done.set()

    async def second() -> None:
        with quiet_gc():
            await first_done.wait()
            seen.append(gc.get_threshold())
        seen.append(gc.get_threshold())

    async with anyio.create_task_group() as tg:
        tg.start_soon(first)
        tg.start_soon(second)
    assert seen == [RUN_GC_THRESHOLD, before] and gc.get_freeze_count() == 0
