"""Shared model statistics (ceb.stages.statistics): one fetch per key, however many callers ask."""

from __future__ import annotations

from collections import Counter

import anyio
import pytest

from ceb.stages.statistics import SharedStatistics, current_statistics, step_statistics

pytestmark = pytest.mark.anyio


async def test_concurrent_readers_share_one_fetch() -> None:
    shared = SharedStatistics()
    calls = 0
    gate = anyio.Event()

    async def fetch() -> str:
        nonlocal calls
        calls += 1
        await gate.wait()
        return "span"

    results: list[tuple[str, bool]] = []

    async def read() -> None:
        results.append(await shared.get("k", fetch))

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert calls == 1
    assert sorted(results) == [("span", False), ("span", False), ("span", True)]
    assert await shared.get("k", fetch) == ("span", False) and calls == 1
    assert (shared.fetched, shared.shared) == (1, 3)


async def test_a_failed_fetch_reaches_its_waiters_and_is_not_kept() -> None:
    shared = SharedStatistics()
    gate = anyio.Event()

    async def failing() -> str:
        await gate.wait()
        raise RuntimeError("endpoint down")

    errors: list[str] = []

    async def read() -> None:
        try:
            await shared.get("k", failing)
        except RuntimeError as exc:
            errors.append(str(exc))

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        gate.set()
    assert errors == ["endpoint down", "endpoint down"]

    async def ok() -> str:
        return "span"

    assert await shared.get("k", ok) == ("span", True)


async def test_a_waiter_fetches_again_when_the_fetcher_is_cancelled() -> None:
    shared = SharedStatistics()
    started = anyio.Event()

    async def slow() -> str:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    async def fast() -> str:
        return "span"

    got: list[tuple[str, bool]] = []
    first = anyio.CancelScope()

    async def first_reader() -> None:
        with first:
            got.append(await shared.get("k", slow))

    async def second_reader() -> None:
        got.append(await shared.get("k", fast))

    async with anyio.create_task_group() as tg:
        tg.start_soon(first_reader)
        await started.wait()
        tg.start_soon(second_reader)
        await anyio.wait_all_tasks_blocked()
        first.cancel()
    # The cancellation stays with its own caller; the waiter fetched the value itself.
    assert got == [("span", True)]


async def test_a_step_scope_shares_with_the_tasks_it_starts_and_keeps_nothing_after_it() -> None:
    calls: Counter[str] = Counter()

    async def fetch() -> str:
        calls["k"] += 1
        return "span"

    assert current_statistics() is None
    got: list[tuple[str, bool]] = []

    async def read() -> None:
        shared = current_statistics()
        assert shared is not None
        got.append(await shared.get("k", fetch))

    with step_statistics() as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read)
            tg.start_soon(read)
    assert calls["k"] == 1 and sorted(got) == [("span", False), ("span", True)] and len(scope) == 1
    # The next step's scope starts empty: the statistic is fetched again.
    with step_statistics():
        await read()
    assert calls["k"] == 2 and current_statistics() is None
