"""The bank journal: saving costs one line per update, reopening continues bit-identically, kills are survived."""

from __future__ import annotations

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
