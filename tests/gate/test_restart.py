"""A gate restarts from each stream's last bank snapshot and the journal lines after it, and a kill at any point
of the write path restarts to the state of the last completed write: the same bank, ids and ``seq``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ceb.bank.journal as journal_module
from ceb.bank import Bank, BankJournal
from ceb.config import load_config
from ceb.data.trajectory import Trajectory
from ceb.gate import Gate, Receipt
from tests.support.builders import step, trajectory

pytestmark = pytest.mark.anyio

CONFIG = load_config(overrides={"gate": {"snapshot_every": 3}})


class Killed(BaseException):
    """Stands for SIGKILL at a chosen point: nothing after it runs (not an Exception: nobody catches it)."""


def _trajs(n: int) -> list[Trajectory]:
    return [
        trajectory(f"t{i}", step(f"grep item{i % 4} /data", f"line {i % 3}"), step(f"wc -l /data/{i}", f"{i}"))
        for i in range(n)
    ]


async def _reference(trajs: list[Trajectory]) -> dict[str, Any]:
    async with Gate(CONFIG) as gate:
        for t in trajs:
            await gate.finish("s", t)
        return _state(gate)


def _state(gate: Gate) -> dict[str, Any]:
    stats = gate.stats("s")["streams"]["s"]
    return {
        "bank": gate.bank("s").to_document(),
        "accepted": stats["accepted"],
        "bank_version": stats["bank_version"],
        "pending": stats["pending"],
    }


def _count_updates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    add = Bank.add_trajectory

    def counted(self: Bank, records: Any) -> None:
        calls[0] += 1
        add(self, records)

    monkeypatch.setattr(Bank, "add_trajectory", counted)
    return calls


async def test_a_restart_loads_the_snapshot_and_replays_only_the_journal_tail(tmp_path: Path, monkeypatch) -> None:
    trajs = _trajs(11)
    async with Gate(CONFIG, state_dir=tmp_path) as gate:
        for t in trajs:
            await gate.finish("s", t)
    lines = (tmp_path / "s" / "bank.journal").read_bytes().splitlines()
    # Snapshots at 3 and 6 (then the next is due at 12, when the updates since hold half the bank's records).
    assert b'"snapshot"' in lines[1] and len(lines) == 2 + 5  # header, the snapshot at 6, updates 7 to 11
    calls = _count_updates(monkeypatch)
    async with Gate(CONFIG, state_dir=tmp_path) as gate:
        assert calls[0] == 1 + 1  # the snapshot's records as one update, the five updates after it as one
        state = _state(gate)
        receipts = [await gate.accept("s", t) for t in trajs]
    monkeypatch.undo()
    assert state == await _reference(trajs)
    assert receipts == [Receipt(i + 1, replayed=True) for i in range(11)]  # every id known, with its seq


def _kill_at(monkeypatch: pytest.MonkeyPatch, point: str, nth: int) -> None:
    """Raise :class:`Killed` at the ``nth`` time the write path reaches ``point``.

    The journal is created by the same atomic rewrite as a snapshot: the first rename is its creation.
    """
    seen = [0]

    def due() -> bool:
        seen[0] += 1
        return seen[0] == nth

    if point == "before the journal line":  # the inbox holds the trajectory, the bank does not
        add = BankJournal.add_trajectory

        def before_line(self: BankJournal, records: Any, *, mark: Any = None) -> None:
            if due():
                raise Killed
            add(self, records, mark=mark)

        monkeypatch.setattr(BankJournal, "add_trajectory", before_line)
    elif point == "between the journal line and the snapshot":
        compact = BankJournal.compact

        def before_snapshot(self: BankJournal) -> None:
            if due():
                raise Killed
            compact(self)

        monkeypatch.setattr(BankJournal, "compact", before_snapshot)
    elif point == "snapshot written, not renamed":
        replace = journal_module.os.replace

        def no_rename(src: Any, dst: Any) -> None:
            if str(src).endswith("bank.journal.tmp") and due():
                raise Killed
            replace(src, dst)

        monkeypatch.setattr(journal_module.os, "replace", no_rename)
    elif point == "snapshot renamed, journal not reopened":
        fsync_dir = journal_module._fsync_dir

        def after_rename(folder: Path) -> None:
            fsync_dir(folder)
            if due():
                raise Killed

        monkeypatch.setattr(journal_module, "_fsync_dir", after_rename)
    else:
        raise AssertionError(point)


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize(
    "point",
    [
        "before the journal line",
        "between the journal line and the snapshot",
        "snapshot written, not renamed",
        "snapshot renamed, journal not reopened",
    ],
)
async def test_a_kill_at_any_point_restarts_to_the_same_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, nth: int
) -> None:
    trajs = _trajs(13)  # snapshots at 3, 6 and 12 (the journal's creation is a rewrite too)
    acked: list[str] = []
    _kill_at(monkeypatch, point, nth)
    killed = Gate(CONFIG, state_dir=tmp_path)
    with pytest.raises(BaseException) as info:  # noqa: PT011 - the kill, alone or in the task group's group
        async with killed as gate:
            for t in trajs:
                await gate.accept("s", t)
                acked.append(t.id)
                await gate.flush()
    assert info.group_contains(Killed) if isinstance(info.value, BaseExceptionGroup) else info.type is Killed
    monkeypatch.undo()
    for st in killed._streams.values():  # what a dead process's memory held: gone (closed here to say so)
        st.send.close()
        st.receive.close()

    # A client resends every trajectory (the acknowledged ones are known, with their seq) and goes on.
    async with Gate(CONFIG, state_dir=tmp_path) as gate:
        await gate.flush()
        if acked:  # every acknowledged trajectory is in the bank, none twice, before anything is resent
            restored = _state(gate)
            assert restored["accepted"] == restored["bank_version"] == len(acked)
            assert restored == await _reference(trajs[: len(acked)])
        receipts = [await gate.accept("s", t) for t in trajs]
        await gate.flush()
        state = _state(gate)
    assert receipts == [Receipt(i + 1, replayed=trajs[i].id in acked) for i in range(len(trajs))]
    assert state == await _reference(trajs)
    async with Gate(CONFIG, state_dir=tmp_path) as gate:  # and once more, from what that run left
        assert _state(gate) == state
    assert not (tmp_path / "s" / "bank.journal.tmp").exists()
