import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.metrics.pairwise import cosine_similarity

from ceb.bank import Bank, BankRecord, TfidfReference, agreement_flag, class_split_topk, composite_key
from ceb.errors import BankError


def rec(
    action: str,
    label: int,
    *,
    task: str = "list files",
    state: str = "",
    tid: str = "t0",
    step: int = 0,
    score: float | None = 0.5,
) -> BankRecord:
    return BankRecord(
        task=task,
        state=state,
        action=action,
        observation="out",
        pseudo_label=label,
        soft_vote=float(label),
        score=score,
        agreement=agreement_flag(score, label),
        trajectory_id=tid,
        step=step,
    )


def test_composite_key_has_the_papers_three_fields_in_order():
    assert composite_key("q", "s", "a") == "task: q || state: s || action: a"


@pytest.mark.parametrize(
    ("score", "label", "chi"),
    [(0.9, 1, True), (0.5, 1, True), (0.49, 1, False), (0.2, 0, True), (0.5, 0, False), (None, 1, None)],
)
def test_agreement_flag_thresholds_the_score_at_one_half(score, label, chi):
    assert agreement_flag(score, label) is chi


def test_retrieval_is_contrastive_top_k_per_class_most_similar_first():
    bank = Bank()
    bank.add_trajectory(
        [
            rec("ls -la /testbed", 1, tid="a"),
            rec("find /testbed -name '*.py'", 1, tid="b"),
            rec("cat /etc/passwd", 1, tid="c"),
            rec("ls /nonexistent", 0, tid="d"),
            rec("rm -rf /testbed", 0, tid="e"),
            rec("echo hello world", 0, tid="f"),
        ]
    )
    got = bank.retrieve(composite_key("list files", "", "ls -la /testbed"), k=2)
    assert [h.record.trajectory_id for h in got.positives][0] == "a"
    assert got.positives[0].similarity == pytest.approx(1.0)
    assert [h.record.trajectory_id for h in got.negatives][0] == "d"
    assert len(got.positives) == 2 and len(got.negatives) == 2
    assert all(h.record.pseudo_label == 1 for h in got.positives)
    assert all(h.record.pseudo_label == 0 for h in got.negatives)
    for side in (got.positives, got.negatives):
        sims = [h.similarity for h in side]
        assert sims == sorted(sims, reverse=True)


def test_a_bucket_with_fewer_than_k_gives_all_and_an_empty_bucket_is_omitted():
    bank = Bank()
    bank.add_trajectory([rec("ls", 1, tid="a"), rec("ls -l", 1, tid="b")])
    got = bank.retrieve(composite_key("list files", "", "ls"), k=5)
    assert len(got.positives) == 2
    assert got.negatives == ()


def test_empty_bank_and_k_zero_retrieve_nothing():
    assert Bank().retrieve("task: x || state:  || action: y", k=2).hits == ()
    bank = Bank()
    bank.add_trajectory([rec("ls", 1)])
    assert bank.retrieve("anything", k=0).hits == ()


def test_ties_go_to_the_earlier_record():
    sims = np.array([0.5, 0.9, 0.5, 0.9, 0.5])
    labels = np.array([1, 1, 1, 0, 0], dtype=np.int8)
    pos, neg = class_split_topk(sims, labels, 2)
    assert pos.tolist() == [1, 0]
    assert neg.tolist() == [3, 4]
    # identical records: the earlier one is returned first
    bank = Bank()
    bank.add_trajectory([rec("ls -la", 1, tid="first"), rec("ls -la", 1, tid="second"), rec("ls -la", 1, tid="third")])
    got = bank.retrieve(composite_key("list files", "", "ls -la"), k=2)
    assert [h.record.trajectory_id for h in got.positives] == ["first", "second"]


def test_class_split_topk_rejects_bad_arguments():
    with pytest.raises(ValueError, match="k must be"):
        class_split_topk(np.zeros(2), np.zeros(2, dtype=np.int8), -1)
    with pytest.raises(ValueError, match="shape"):
        class_split_topk(np.zeros(2), np.zeros(3, dtype=np.int8), 1)


def test_reference_similarities_equal_sklearn_cosine_on_a_fresh_fit():
    keys = [composite_key("q", f"state {i}", a) for i, a in enumerate(["ls -la", "cat a.txt", "grep foo *.py", "ls"])]
    ref = TfidfReference()
    ref.update(keys)
    query = composite_key("q", "state 0", "ls -l")
    vec = TfidfVectorizer(ngram_range=(1, 2))
    m = vec.fit_transform(keys)
    expected = cosine_similarity(vec.transform([query]), m).ravel()
    np.testing.assert_allclose(ref.similarities(query), expected, atol=1e-12)


def test_retriever_is_refit_when_a_trajectory_is_added():
    bank = Bank()
    bank.add_trajectory([rec("ls", 1, tid="a"), rec("pwd", 0, tid="b")])
    before = bank.retrieve(composite_key("list files", "", "grep needle"), k=1)
    assert before.positives[0].record.trajectory_id == "a"
    bank.add_trajectory([rec("grep needle haystack", 1, tid="c")])
    after = bank.retrieve(composite_key("list files", "", "grep needle"), k=1)
    assert after.positives[0].record.trajectory_id == "c"
    assert len(bank) == 3 and bank.n_positive == 2


def test_a_copy_grows_apart_and_retrieves_as_the_original_grown_alike():
    bank = Bank()
    bank.add_trajectory([rec("ls -la", 1, tid="a"), rec("pwd", 0, tid="a", step=1)])
    copy = bank.copy()
    new = [rec("grep needle haystack", 1, tid="b"), rec("grep needle", 0, tid="b", step=1)]
    copy.add_trajectory(new)
    assert len(bank) == 2 and len(copy) == 4  # the original is as it was
    query = composite_key("list files", "", "grep needle")
    assert [h.record.trajectory_id for h in bank.retrieve(query, k=1).hits] == ["a", "a"]
    bank.add_trajectory(new)
    assert bank.retrieve(query, k=2) == copy.retrieve(query, k=2)  # same records, bit-identical similarities


def test_settled_scores_give_the_bank_grown_with_them():
    first = [rec("ls -la", 1, tid="a"), rec("pwd", 0, tid="a", step=1)]
    scored = [rec("grep needle haystack", 1, tid="b", score=0.9), rec("grep needle", 0, tid="b", step=1, score=0.7)]
    strict, ahead = Bank(), Bank()
    for bank, second in (
        (strict, scored),
        (ahead, [rec(r.action, r.pseudo_label, tid="b", step=r.step, score=None) for r in scored]),
    ):
        bank.add_trajectory(first)
        bank.add_trajectory(second)
    assert ahead.records != strict.records
    ahead.settle_scores(scored)
    assert ahead.records == strict.records and ahead.to_document() == strict.to_document()
    query = composite_key("list files", "", "grep needle")
    assert ahead.retrieve(query, k=2) == strict.retrieve(query, k=2)


def test_settling_scores_refuses_a_record_that_changed_otherwise():
    bank = Bank()
    bank.add_trajectory([rec("ls -la", 1, tid="a", score=None)])
    with pytest.raises(BankError, match="a step 0 changed"):
        bank.settle_scores([rec("ls -la", 0, tid="a", score=0.2)])
    with pytest.raises(BankError, match="1 of 1 records are not in the bank"):
        bank.settle_scores([rec("pwd", 1, tid="b", score=0.2)])


def test_bank_refuses_records_with_bad_labels():
    with pytest.raises(BankError, match="pseudo_label=2"):
        Bank().add_trajectory([rec("ls", 2)])


def test_save_and_load_round_trip_keeps_records_and_retrieval(tmp_path):
    bank = Bank()
    bank.add_trajectory([rec("ls -la", 1, tid="a", score=None), rec("rm x", 0, tid="a", step=1, score=0.8)])
    path = tmp_path / "bank.json"
    bank.save(path)
    loaded = Bank.load(path)
    assert loaded.records == bank.records
    q = composite_key("list files", "", "ls")
    assert loaded.retrieve(q, 2) == bank.retrieve(q, 2)


def test_a_save_on_a_full_disk_leaves_the_old_bank_and_no_tmp_file(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    bank = Bank()
    bank.add_trajectory([rec("ls -la", 1, tid="a")])
    path = tmp_path / "banks" / "s__ceb.json"
    bank.save(path)
    before = path.read_bytes()
    bank.add_trajectory([rec("rm x", 0, tid="b")])

    def full_disk(self, data):
        self.touch()  # the file is created, then the write fails, as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full_disk)
    with pytest.raises(OSError, match="No space"):
        bank.save(path)
    assert path.read_bytes() == before and sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_load_names_the_file_and_the_bad_record(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ceb-bank/1", "records": [{"task": "x"}]}')
    with pytest.raises(BankError, match=r"bad\.json: records\[0\]"):
        Bank.load(bad)
    other = tmp_path / "other.json"
    other.write_text('{"format": "something"}')
    with pytest.raises(BankError, match="not a ceb-bank/1 file"):
        Bank.load(other)


class FixedSims:
    """A retriever that returns prepared similarities (the first ``n`` of them for a bank of ``n``)."""

    def __init__(self, sims: np.ndarray) -> None:
        self.sims = sims
        self.n = 0

    def update(self, keys) -> None:
        self.n = len(keys)

    def similarities(self, query: str) -> np.ndarray:
        return self.sims[: self.n]


@pytest.mark.parametrize("seed", range(6))
def test_partial_selection_top_k_equals_a_full_stable_sort(seed):
    # Bank.retrieve selects by partial sort; heavy ties, zeros and tiny classes must still match the full sort.
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    sims = np.round(rng.random(n), int(rng.integers(0, 3)))  # 0, 1 or 2 decimals: many exact ties
    sims[rng.random(n) < 0.3] = 0.0
    labels = (rng.random(n) < rng.choice([0.0, 0.02, 0.5, 1.0])).astype(np.int8)
    bank = Bank(FixedSims(sims))
    records = [rec(f"cmd {i}", int(y), tid=f"t{i}") for i, y in enumerate(labels)]
    bank.add_trajectory(records)
    for k in (1, 2, 3, 7, 50, 1000):
        got = bank.retrieve("q", k)
        # the oracle: a full stable sort per class (descending similarity, then ascending index)
        pos, neg = ([i for i in sorted(np.flatnonzero(labels == c), key=lambda i: (-sims[i], i))][:k] for c in (1, 0))
        assert class_split_topk(sims, labels, k)[0].tolist() == pos
        assert [h.record for h in got.positives] == [records[i] for i in pos]
        assert [h.record for h in got.negatives] == [records[i] for i in neg]
        assert [h.similarity for h in got.hits] == [sims[i] for i in (*pos, *neg)]


def test_bank_retrieve_with_nan_similarities_falls_back_to_the_full_sort():
    sims = np.array([0.2, np.nan, 0.9, np.nan, 0.2, 0.5])
    bank = Bank(FixedSims(sims))
    records = [rec(f"cmd {i}", 1, tid=f"t{i}") for i in range(6)]
    bank.add_trajectory(records)
    pos, _ = class_split_topk(sims, np.ones(6, dtype=np.int8), 3)
    assert [h.record for h in bank.retrieve("q", 3).positives] == [records[i] for i in pos]


def test_bank_retrieve_rejects_bad_k_and_a_retriever_of_the_wrong_length():
    bank = Bank(FixedSims(np.zeros(1)))
    bank.add_trajectory([rec("ls", 1), rec("pwd", 0)])
    with pytest.raises(ValueError, match="k must be"):
        bank.retrieve("q", -1)
    with pytest.raises(ValueError, match="shape"):
        bank.retrieve("q", 1)
