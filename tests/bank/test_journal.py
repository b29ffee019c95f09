"""The bank journal: saving costs one line per update, reopening continues bit-identically, kills are survived."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ceb.bank import Bank, BankJournal, composite_key
from ceb.config import BankConfig
from ceb.errors import BankError
from tests.bank.test_policy import POLICIES, live, stream_st, trajectories

QUERIES = [composite_key("task", "", q) for q in ("ls la", "cat foo bar", "select from users")]


def same(a: Bank, b: Bank) -> None:
    assert a.to_document() == b.to_document()
    for q in QUERIES:
        assert np.array_equal(a._retriever.similarities(q), b._retriever.similarities(q))  # bit for bit
        assert a.retrieve(q, 2) == b.retrieve(q, 2)


@pytest.mark.parametrize("name", ["none", *POLICIES])
@settings(max_examples=20, deadline=None)
@given(stream=stream_st, cuts=st.sets(st.integers(0, 10), max_size=3))
def test_a_journal_reopened_at_any_points_equals_the_bank_that_never_stopped(name, stream, cuts, tmp_path_factory):
    cfg = POLICIES.get(name, BankConfig())
    trajs = trajectories(stream)
    whole = live(Bank(settings=cfg), trajs)
    path = tmp_path_factory.mktemp("j") / "bank.jsonl"
    journal = BankJournal.open(path, settings=cfg, compact_ratio=0.5, compact_min=1)  # compacts often
    for i, traj in enumerate(trajs):
        if i in cuts:
            journal.close()
            journal = BankJournal.open(path, settings=cfg, compact_ratio=0.5, compact_min=1)
        for r in traj:
            journal.bank.retrieve(r.key, 2)
        journal.add_trajectory(traj)
    journal.close()
    with BankJournal.open(path) as reopened:
        same(reopened.bank, whole)


def test_each_update_appends_one_line_and_compaction_bounds_the_file(tmp_path):
    cfg = BankConfig(policy="window", max_records=4)
    path = tmp_path / "bank.jsonl"
    stream = [[(f"cmd{i} {j}", (i + j) % 2) for j in range(3)] for i in range(40)]
    with BankJournal.open(path, settings=cfg, compact_ratio=2.0, compact_min=4) as journal:
        sizes = []
        for traj in trajectories(stream):
            before = path.stat().st_size
            journal.add_trajectory(traj)
            sizes.append(path.stat().st_size - before)
    lines = path.read_bytes().splitlines()
    assert len(lines) <= 2 + 3  # header, snapshot, at most (2 * 4) / 3 updates since
    assert b'"snapshot"' in lines[1]
    assert max(s for s in sizes if s > 0) < 2_000  # an update writes its records, not the bank
    with BankJournal.open(path) as reopened:
        same(reopened.bank, live(Bank(settings=cfg), trajectories(stream)))


def test_a_torn_last_line_is_dropped_and_earlier_damage_is_refused(tmp_path):
    path = tmp_path / "bank.jsonl"
    trajs = trajectories([[("ls la", 1)], [("cat foo", 0)], [("grep bar", 1)]])
    with BankJournal.open(path) as journal:
        for traj in trajs:
            journal.add_trajectory(traj)
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a kill in the middle of the last update
    with BankJournal.open(path) as journal:
        assert [r.action for r in journal.bank.records] == ["ls la", "cat foo"]
        journal.add_trajectory(trajs[2])
    with BankJournal.open(path) as reopened:
        assert reopened.bank.to_document() == live(Bank(), trajs).to_document()
    lines = path.read_bytes().split(b"\n")
    path.write_bytes(b"\n".join([lines[0], b"{oops", *lines[1:]]))
    with pytest.raises(BankError, match="line 2"):
        BankJournal.open(path)


def test_an_update_cut_just_before_its_newline_is_dropped_and_the_next_one_survives(tmp_path):
    path = tmp_path / "bank.jsonl"
    trajs = trajectories([[("ls la", 1)], [("cat foo", 0)], [("grep bar", 1)]])
    with BankJournal.open(path) as journal:
        for traj in trajs[:2]:
            journal.add_trajectory(traj, mark=len(journal.bank) + 1)
    path.write_bytes(path.read_bytes()[:-1])  # killed after the JSON of the second update, before its newline
    with BankJournal.open(path) as journal:
        assert [r.action for r in journal.bank.records] == ["ls la"] and journal.mark == 1
        journal.add_trajectory(trajs[2], mark=2)
    with BankJournal.open(path) as reopened:
        assert [r.action for r in reopened.bank.records] == ["ls la", "grep bar"] and reopened.mark == 2
    assert b"\0" not in path.read_bytes()


def test_a_journal_refuses_other_settings(tmp_path):
    path = tmp_path / "bank.jsonl"
    BankJournal.open(path, settings=BankConfig(policy="window", max_records=3)).close()
    with pytest.raises(BankError, match="differ"):
        BankJournal.open(path, settings=BankConfig())
    with BankJournal.open(path) as reopened:
        assert reopened.bank.settings.max_records == 3


def _count_updates(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the bank updates made from now on (``Bank.add_trajectory`` calls)."""
    calls = [0]
    add = Bank.add_trajectory

    def counted(self: Bank, records) -> None:  # type: ignore[no-untyped-def]
        calls[0] += 1
        add(self, records)

    monkeypatch.setattr(Bank, "add_trajectory", counted)
    return calls


def test_reopening_replays_only_the_updates_after_the_last_snapshot(tmp_path, monkeypatch):
    path = tmp_path / "bank.jsonl"
    stream = [[(f"cmd{i} {j}", (i + j) % 2) for j in range(2)] for i in range(23)]
    trajs = trajectories(stream)
    with BankJournal.open(path, snapshot_every=5) as journal:
        for i, traj in enumerate(trajs):
            journal.add_trajectory(traj, mark=i + 1)
        # At 5 and 10 (5 updates, as many records as the bank), then at 20 (10 updates, half the bank's 40 records).
        assert journal.snapshots == 3 and journal.updates == 3
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 + 3 and b'"snapshot"' in lines[1]  # header, snapshot at 20, updates 21-23
    calls = _count_updates(monkeypatch)
    with BankJournal.open(path, snapshot_every=5) as reopened:
        # An append-only bank: one update loads the snapshot's records (its document is its records), one the tail's.
        assert calls[0] == 1 + 1 and reopened.mark == 23 and reopened.updates == 3
        same(reopened.bank, live(Bank(), trajs))


def test_a_bounded_bank_replays_its_tail_one_update_at_a_time(tmp_path, monkeypatch):
    cfg = BankConfig(policy="window", max_records=5)
    path = tmp_path / "bank.jsonl"
    trajs = trajectories([[(f"cmd{i} {j}", (i + j) % 2) for j in range(2)] for i in range(9)])
    with BankJournal.open(path, settings=cfg, snapshot_every=4, compact_min=100) as journal:
        for i, traj in enumerate(trajs):
            journal.add_trajectory(traj, mark=i + 1)
    calls = _count_updates(monkeypatch)
    with BankJournal.open(path, settings=cfg, snapshot_every=4, compact_min=100) as reopened:
        assert calls[0] == 1 and reopened.mark == 9  # the snapshot at 8 restores its state; update 9 is replayed
        same(reopened.bank, live(Bank(settings=cfg), trajs))


def test_a_journal_without_snapshots_gets_one_when_reopened_with_a_period(tmp_path, monkeypatch):
    path = tmp_path / "bank.jsonl"
    trajs = trajectories([[(f"cmd{i}", i % 2)] for i in range(12)])
    with BankJournal.open(path) as journal:  # as a gate before snapshots wrote it: one line per update
        for i, traj in enumerate(trajs):
            journal.add_trajectory(traj, mark=i + 1)
    assert len(path.read_bytes().splitlines()) == 13
    with BankJournal.open(path, snapshot_every=5) as journal:
        assert journal.snapshots == 1 and journal.updates == 0 and journal.mark == 12
    calls = _count_updates(monkeypatch)
    with BankJournal.open(path, snapshot_every=5) as reopened:
        assert calls[0] == 1 and reopened.mark == 12  # the snapshot, nothing after it
        same(reopened.bank, live(Bank(), trajs))


class _Killed(BaseException):
    """Stands for SIGKILL at a chosen point: nothing after it runs."""


def test_a_kill_during_a_snapshot_leaves_the_old_journal_or_the_new_one(tmp_path, monkeypatch):
    import ceb.bank.journal as journal_module

    trajs = trajectories([[(f"cmd{i}", i % 2)] for i in range(7)])
    reference = live(Bank(), trajs[:6])
    for point in ("tmp half written", "before the rename", "after the rename"):
        path = tmp_path / point.replace(" ", "-") / "bank.jsonl"
        journal = BankJournal.open(path, snapshot_every=3)
        for i, traj in enumerate(trajs[:5]):
            journal.add_trajectory(traj, mark=i + 1)  # a snapshot at 3
        with monkeypatch.context() as m:
            if point == "tmp half written":

                def torn(path_: Path, *args: object) -> None:
                    journal_module._tmp(path_).write_bytes(b'{"format": "ceb-bank-journal/1", "sett')
                    raise _Killed

                m.setattr(journal_module, "_write_new", torn)
            elif point == "before the rename":
                m.setattr(journal_module.os, "replace", lambda *a: (_ for _ in ()).throw(_Killed()))
            else:
                m.setattr(journal_module, "_fsync_dir", lambda folder: (_ for _ in ()).throw(_Killed()))
            with pytest.raises(_Killed):
                journal.add_trajectory(trajs[5], mark=6)  # the 3rd update since: its line, then the snapshot
        calls = _count_updates(monkeypatch)
        with BankJournal.open(path, snapshot_every=3) as reopened:
            assert reopened.mark == 6, point
            same(reopened.bank, reference)
            # The old file: its snapshot and the three updates after it, one update each; the new one: the snapshot.
            assert calls[0] == (1 if point == "after the rename" else 1 + 1), point
            reopened.add_trajectory(trajs[6], mark=7)
        monkeypatch.undo()
        assert not journal_module._tmp(path).exists()
        with BankJournal.open(path, snapshot_every=3) as again:
            same(again.bank, live(Bank(), trajs))
