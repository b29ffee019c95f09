"""Bounded banks (issue 15): eviction policies, near-duplicate compression, and their determinism.

What a user relies on: the kernel stays exact on the kept records (scikit-learn refit on them), each policy keeps
what it promises, and a bank rebuilt from its records alone (a resume) or loaded from its file continues exactly
as the original.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.feature_extraction.text import TfidfVectorizer

from ceb.bank import TFIDF_PARAMS, Bank, BankRecord, TfidfReference, agreement_flag, composite_key
from ceb.bank.policy import judge, reservoir_draw
from ceb.config import BankConfig
from ceb.errors import BankError

WORDS = ("ls", "la", "cat", "grep", "foo", "bar", "select", "from", "users", "rm", "tmp", "echo")
POLICIES = {
    "window": BankConfig(policy="window", max_records=7),
    "reservoir": BankConfig(policy="reservoir", max_per_class=4, seed=3),
    "usefulness": BankConfig(policy="usefulness", max_records=7, usefulness_k=2),
    "compress": BankConfig(compress_threshold=0.8),
    "window+compress": BankConfig(policy="window", max_records=6, compress_threshold=0.7),
    "usefulness+compress": BankConfig(policy="usefulness", max_records=5, usefulness_k=2, compress_threshold=0.9),
}


def rec(action: str, label: int, tid: str = "t", step: int = 0) -> BankRecord:
    return BankRecord("task", "", action, "out", label, float(label), 0.5, agreement_flag(0.5, label), tid, step)


action_st = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
traj_st = st.lists(st.tuples(action_st, st.integers(0, 1)), min_size=0, max_size=5)
stream_st = st.lists(traj_st, min_size=1, max_size=10)


def trajectories(stream: list[list[tuple[str, int]]]) -> list[list[BankRecord]]:
    return [[rec(a, y, f"t{i}", t) for t, (a, y) in enumerate(traj)] for i, traj in enumerate(stream)]


def live(bank: Bank, trajs: list[list[BankRecord]], k: int = 2) -> Bank:
    """What a lane does: retrieve for every step of a trajectory, then add the trajectory."""
    for traj in trajs:
        for r in traj:
            bank.retrieve(r.key, k)
        bank.add_trajectory(traj)
    return bank


def refit_sims(keys: list[str], query: str) -> np.ndarray:
    vec = TfidfVectorizer(**TFIDF_PARAMS)  # type: ignore[arg-type]
    try:
        m = vec.fit_transform(keys)
    except ValueError:
        return np.zeros(len(keys))
    return np.asarray((m @ vec.transform([query]).T).toarray()).ravel()


def sims_of(bank: Bank, query: str) -> np.ndarray:
    return bank._retriever.similarities(query)  # white-box: the retriever's vector over the held records


@pytest.mark.slow  # 40 examples per policy, a scikit-learn refit per query: half a minute a policy, loaded
@pytest.mark.parametrize("name", list(POLICIES))
@settings(max_examples=40, deadline=None)
@given(stream=stream_st)
def test_the_kernel_stays_exact_on_the_kept_records(name, stream):
    bank = Bank(settings=POLICIES[name])
    for traj in trajectories(stream):
        bank.add_trajectory(traj)
        keys = [r.key for r in bank.records]
        for q in ("ls la", "cat foo bar", "select from users", "rm tmp"):
            want = refit_sims(keys, composite_key("task", "", q))
            got = sims_of(bank, composite_key("task", "", q))
            assert np.max(np.abs(want - got), initial=0.0) <= 1e-9
        assert len(bank.counts) == len(bank)


@pytest.mark.parametrize("name", list(POLICIES))
@settings(max_examples=30, deadline=None)
@given(stream=stream_st, cut=st.integers(0, 10))
def test_a_resume_replaying_records_only_rebuilds_the_same_bank(name, stream, cut):
    """The lane retrieves before each add; a resume replays only the adds, then carries on live."""
    trajs = trajectories(stream)
    cut = min(cut, len(trajs))
    whole = live(Bank(settings=POLICIES[name]), trajs)
    resumed = Bank(settings=POLICIES[name])
    for traj in trajs[:cut]:
        resumed.add_trajectory(traj)
    live(resumed, trajs[cut:])
    assert resumed.to_document() == whole.to_document()
    q = composite_key("task", "", "cat foo")
    assert resumed.retrieve(q, 3) == whole.retrieve(q, 3)


@pytest.mark.parametrize("name", list(POLICIES))
@settings(max_examples=30, deadline=None)
@given(stream=stream_st, cut=st.integers(0, 10))
def test_a_saved_and_loaded_bank_continues_bit_identically(name, stream, cut, tmp_path_factory):
    trajs = trajectories(stream)
    cut = min(cut, len(trajs))
    whole = live(Bank(settings=POLICIES[name]), trajs)
    first = live(Bank(settings=POLICIES[name]), trajs[:cut])
    path = tmp_path_factory.mktemp("bank") / "bank.json"
    first.save(path)
    loaded = live(Bank.load(path), trajs[cut:])
    assert loaded.settings == POLICIES[name]
    assert loaded.to_document() == whole.to_document()
    for q in ("ls la", "cat foo bar", "echo"):
        key = composite_key("task", "", q)
        assert np.array_equal(sims_of(loaded, key), sims_of(whole, key))  # bit for bit, not 1e-9


def test_window_keeps_the_last_n_records_in_order():
    bank = Bank(settings=BankConfig(policy="window", max_records=3))
    for i in range(4):
        bank.add_trajectory([rec(f"cmd{i} a", 1, f"t{i}", 0), rec(f"cmd{i} b", 0, f"t{i}", 1)])
    assert [(r.trajectory_id, r.step) for r in bank.records] == [("t2", 1), ("t3", 0), ("t3", 1)]
    assert bank.n_positive == 1


def test_reservoir_caps_each_class_and_samples_it_uniformly():
    cap, n = 3, 12
    inclusion = np.zeros(n)
    seeds = 300
    for seed in range(seeds):
        bank = Bank(settings=BankConfig(policy="reservoir", max_per_class=cap, seed=seed))
        for i in range(n):
            bank.add_trajectory([rec(f"pos{i}", 1, f"t{i}"), rec(f"neg{i}", 0, f"t{i}", 1)] + [])
        assert bank.n_positive == cap and len(bank) == 2 * cap  # both classes capped
        for r in bank.records:
            if r.pseudo_label == 1:
                inclusion[int(r.trajectory_id[1:])] += 1
    # Algorithm R keeps every record with probability cap / n (here 0.25): within 4 standard errors.
    se = np.sqrt(0.25 * 0.75 / seeds)
    assert np.all(np.abs(inclusion / seeds - cap / n) < 4 * se)
    assert all(0 <= reservoir_draw(1, 0, i) < i for i in range(1, 50))


def test_compression_merges_a_near_duplicate_of_the_same_class_and_counts_it():
    bank = Bank(settings=BankConfig(compress_threshold=0.95))
    bank.add_trajectory([rec("ls -la /testbed", 1, "a"), rec("cat notes", 0, "a", 1)])
    bank.add_trajectory([rec("ls -la /testbed", 1, "b"), rec("ls -la /testbed", 0, "b", 1)])
    bank.add_trajectory([rec("ls -la /testbed", 1, "c"), rec("grep needle", 1, "c", 1)])
    # Same key and class merges (into the first occurrence); the other class does not.
    assert [(r.trajectory_id, r.pseudo_label) for r in bank.records] == [("a", 1), ("a", 0), ("b", 0), ("c", 1)]
    assert bank.counts.tolist() == [3, 1, 1, 1]
    hit = bank.retrieve(composite_key("task", "", "ls -la /testbed"), 1).positives[0]
    assert (hit.record.trajectory_id, hit.count, hit.similarity) == ("a", 3, pytest.approx(1.0))


def test_judge_marks_the_nearest_evidence_of_the_wrong_class():
    labels = np.array([1, 1, 0, 0], dtype=np.int8)
    sims = np.array([0.9, 0.3, 0.5, 0.1])
    agreed, disagreed = judge(labels, sims, outcome=0)  # the step turned out unproductive
    assert disagreed.tolist() == [True, False, False, False]  # 0.9 outranked every negative
    assert agreed.tolist() == [False, False, False, False]  # no negative outranked the 0.9 positive
    agreed, disagreed = judge(labels, sims, outcome=1)
    assert agreed.tolist() == [True, False, False, False] and not disagreed.any()


def test_usefulness_evicts_the_record_that_misled_retrievals_first():
    bank = Bank(settings=BankConfig(policy="usefulness", max_records=4, usefulness_k=1))
    bank.add_trajectory([rec("cat foo", 0, "a"), rec("grep bar", 1, "a", 1), rec("ls la tmp", 1, "a", 2)])
    # 'ls la tmp' (productive) is the nearest precedent of two steps that turned out unproductive: it misled
    # both retrievals, so it goes, although a window would have dropped the older 'cat foo'.
    bank.add_trajectory([rec("ls la", 0, "b"), rec("ls la tmp", 0, "b", 1)])
    assert [(r.trajectory_id, r.action) for r in bank.records] == [
        ("a", "cat foo"),
        ("a", "grep bar"),
        ("b", "ls la"),
        ("b", "ls la tmp"),
    ]
    agreed, disagreed = bank.usefulness
    assert agreed.tolist() == [0, 0, 0, 0] and disagreed.tolist() == [0, 0, 0, 0]  # the misleader took its -2


def test_a_retriever_without_evict_is_started_over_with_the_kept_keys():
    bank = Bank(TfidfReference(), settings=BankConfig(policy="window", max_records=2))
    for i in range(3):
        bank.add_trajectory([rec(f"cmd{i}", 1, f"t{i}")])
    q = composite_key("task", "", "cmd2")
    assert [h.record.trajectory_id for h in bank.retrieve(q, 2).positives] == ["t2", "t1"]


def test_the_default_bank_writes_the_unchanged_format(tmp_path):
    bank = Bank()
    bank.add_trajectory([rec("ls", 1)])
    bank.save(tmp_path / "b.json")
    assert list(orjson.loads((tmp_path / "b.json").read_bytes())) == ["format", "records"]
    assert bank.retrieve(composite_key("task", "", "ls"), 1).positives[0].count == 1


def test_settings_name_the_capacity_their_policy_needs():
    with pytest.raises(ValueError, match="needs max_per_class"):
        BankConfig(policy="reservoir")
    with pytest.raises(ValueError, match="max_records has no effect"):
        BankConfig(max_records=3)


def test_a_bounded_file_with_inconsistent_state_is_refused(tmp_path):
    bank = Bank(settings=BankConfig(policy="window", max_records=3))
    bank.add_trajectory([rec("ls", 1)])
    doc = bank.to_document()
    doc["counts"] = [1, 1]
    (tmp_path / "b.json").write_bytes(orjson.dumps(doc))
    with pytest.raises(BankError, match="does not match the 1 records"):
        Bank.load(tmp_path / "b.json")
